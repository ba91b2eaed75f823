// Ranks the agent has heard nothing from since its probes attached: which sit
// blocked inside libnccl or libcuda (procfs/thread_calls.h), seen twice,
// seconds apart, in the same place. An agent started while a job already
// hangs sees no call enter (they all entered before it): these are the calls
// in flight it can still see, handed on as waits that began before the agent.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/signals.h"

namespace argus {

class StuckCallCollector final : public HostCollector {
 public:
  // `silent(pid)`: the agent heard no probed call from it, and its probes have
  // been live long enough to expect one. `now_ns()`: the monotonic clock the
  // waits are dated by.
  StuckCallCollector(std::function<bool(int)> silent, std::function<uint64_t()> now_ns,
                     std::string proc_root = kDefaultProcRoot)
      : silent_(std::move(silent)), now_ns_(std::move(now_ns)), proc_root_(std::move(proc_root)) {}
  const char* name() const override { return "stuck_calls"; }
  void refresh(double now, const std::vector<int>& live_pids) override;
  // The waits seen: one per rank with a thread blocked inside a library since
  // two scans, dated by the first scan that saw it.
  std::vector<InflightWait> waits() const;
  void rank_ended(int pid) override { seen_.erase(pid); }
  void retain(const std::set<int>& pids) override;

  static constexpr double kMinSilentSeconds = 5;  // silent this long before the first look
  static constexpr double kRescanSeconds = 3;     // between looks while something is inside
  static constexpr double kIdleRescanSeconds = 30;  // ... and once two looks found nothing (a Gloo job, a data loader)

 private:
  struct Sighting {
    double silent_since = 0;
    double scanned_at = 0;
    int empty_scans = 0;
    std::map<int, std::pair<uint64_t, long>> threads;  // tid -> (sp, syscall) inside a library
    std::string library;
    uint64_t first_seen_ns = 0;  // when the thread was first seen inside
    bool confirmed = false;      // the same thread, same place, at two scans
  };
  std::function<bool(int)> silent_;
  std::function<uint64_t()> now_ns_;
  std::string proc_root_;
  std::map<int, Sighting> seen_;
};

}  // namespace argus
