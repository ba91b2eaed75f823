#include "userspace/probes/link_reaper.h"
#include "userspace/common/thread_name.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <iterator>

namespace argus {

LinkReaper::LinkReaper(std::mutex& usdt_mu)
    : usdt_mu_(usdt_mu), thread_([this] {
        name_this_thread("argus-detach");
        loop();
      }) {}

LinkReaper::~LinkReaper() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LinkReaper::reap(std::vector<Link> uprobes, std::vector<Link> usdt, std::function<void()> done) {
  if (uprobes.empty() && usdt.empty()) {
    if (done) done();
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (done) done_.push_back(std::move(done));
    std::move(uprobes.begin(), uprobes.end(), std::back_inserter(uprobes_));
    std::move(usdt.begin(), usdt.end(), std::back_inserter(usdt_));
  }
  cv_.notify_all();
}

size_t LinkReaper::pending() const {
  std::lock_guard lock(mu_);
  return uprobes_.size() + usdt_.size() + in_flight_;
}

void LinkReaper::wait_idle() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return uprobes_.empty() && usdt_.empty() && in_flight_ == 0; });
}

void LinkReaper::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !uprobes_.empty() || !usdt_.empty(); });
    if (uprobes_.empty() && usdt_.empty()) return;  // stopping, and nothing left
    std::vector<Link> uprobes = std::move(uprobes_), usdt = std::move(usdt_);
    std::vector<std::function<void()>> done = std::move(done_);
    uprobes_.clear();
    usdt_.clear();
    done_.clear();
    in_flight_ = uprobes.size() + usdt.size();
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    const size_t nu = uprobes.size(), ns = usdt.size();
    destroy(uprobes, usdt);
    spdlog::debug("detached {} uprobes and {} USDT probes in {} ms", nu, ns,
                  std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    for (auto& f : done) f();
    lock.lock();
    in_flight_ = 0;
    cv_.notify_all();
  }
}

void LinkReaper::destroy(std::vector<Link>& uprobes, std::vector<Link>& usdt) {
  for (auto& l : uprobes) {
    l = Link(nullptr);
    std::lock_guard lock(mu_);
    --in_flight_;
  }
  uprobes.clear();
  std::lock_guard lock(usdt_mu_);
  usdt.clear();
}

}  // namespace argus
