// Detaches released probes off the event loop. Closing a link waits for a
// grace period inside the kernel, one link after another (~0.11 s each on our
// VMs, measured; threads in parallel do not overlap them): done inline, one
// released NCCL library would stall the event loop for ~0.5 s with uprobe_multi
// links (5 links), ~3 s with one perf event per probe (30).
// USDT links share libbpf's USDT manager with every USDT attach, so they are
// destroyed under the caller's USDT mutex.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "userspace/probes/bpf_backend.h"

namespace argus {

class LinkReaper {
 public:
  explicit LinkReaper(std::mutex& usdt_mu);
  ~LinkReaper();  // detaches everything still queued
  LinkReaper(const LinkReaper&) = delete;
  LinkReaper& operator=(const LinkReaper&) = delete;

  // `done` runs on the reaper's thread once these links are all detached.
  void reap(std::vector<Link> uprobes, std::vector<Link> usdt, std::function<void()> done = {});
  size_t pending() const;  // links queued or being detached
  void wait_idle();

 private:
  void loop();
  void destroy(std::vector<Link>& uprobes, std::vector<Link>& usdt);

  std::mutex& usdt_mu_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Link> uprobes_, usdt_;
  std::vector<std::function<void()>> done_;
  size_t in_flight_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace argus
