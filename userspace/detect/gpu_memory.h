// Device memory verdicts: an allocation that ran out of memory becomes an `oom`
// event (the rank, what it asked for, what it held, its peak, and its Python
// stack at that moment), remembered as the cause of an end that follows; and a
// rank's held bytes are judged for a leak (growth in every part of a steady
// window) and for pressure (near its GPU's total).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/model/event.h"
#include "userspace/model/pid_scoped.h"
#include "userspace/model/snapshot.h"

namespace argus {

// One failed allocation, as BPF saw it return CUDA_ERROR_OUT_OF_MEMORY.
struct OomRecord {
  int pid = 0;
  uint32_t tid = 0;
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC
  double unix_time = 0;
  std::string api;   // "cuMemAlloc", "cuMemCreate", ...
  std::string code;  // "CUDA_ERROR_OUT_OF_MEMORY"
  uint64_t asked_bytes = 0;
  int64_t held_bytes = 0;  // before the call
  uint64_t peak_bytes = 0;
  uint64_t total_bytes = 0;  // 0 unknown
};

// Failed allocations in, `oom` events out. The Python stack comes apart (the
// sampler's ring buffer, taken in the same return): an OOM waits for it up to
// kStackWaitSeconds. A framework answers a failure by freeing its cache and
// trying again, so the failures of one process within kBurstSeconds are one
// event (evidence.failed_calls counts them). The event loop's thread only.
class OomReports final : public PidScoped {
 public:
  static constexpr double kStackWaitSeconds = 0.5;
  static constexpr double kBurstSeconds = 30;
  // How long before an end an OOM is taken as its cause.
  static constexpr double kCauseSeconds = 120;

  void on_oom(const OomRecord& r);
  // The Python stack where thread `tid` of `pid` failed, root first (frame labels).
  void on_stack(int pid, uint32_t tid, uint64_t ts_ns, std::vector<std::string> frames_root_first);
  // The OOMs whose stack came, or whose wait is over, as events. `rank_of`
  // names the process (nullopt: unknown to the registry).
  std::vector<DetectedEvent> take_ready(uint64_t now_ns,
                                        const std::function<std::optional<RankSnapshot>(int)>& rank_of);
  // The process's newest OOM within kCauseSeconds before now_ns, as an exit's
  // cause (evidence.gpu_oom); null when none. `known_total`: the GPU's total as
  // learnt since (a framework asks for it to word its error), where the failing
  // call had none.
  nlohmann::json recent(int pid, uint64_t now_ns, uint64_t known_total = 0) const;
  void retain(const std::set<int>& pids) override;

 private:
  struct Pending {
    OomRecord first;
    uint64_t failed_calls = 1;
    nlohmann::json stack = nullptr;  // root first, where the sampler took it
    bool reported = false;
  };
  struct Stack {
    int pid;
    uint32_t tid;
    uint64_t ts_ns;
    std::vector<std::string> frames;
  };
  bool attach_stack(Pending& p, const Stack& s) const;
  DetectedEvent event_of(const Pending& p, const std::optional<RankSnapshot>& rank) const;

  std::map<int, Pending> by_pid_;  // the newest burst of each process
  std::deque<Stack> stacks_;       // stacks not yet paired (they may come before their OOM)
};

// "2.0 GiB of 80 GiB": held against the total, or alone when the total is unknown.
std::string held_phrase(uint64_t held, uint64_t total);
// "cuMemAlloc of 2 GiB failed (CUDA_ERROR_OUT_OF_MEMORY) while it held 78 GiB of 80 GiB": an exit's cause in words.
std::string gpu_oom_phrase(const nlohmann::json& gpu_oom);

// A rank's held bytes over time, judged each detection pass.
class GpuMemoryJudge final : public PidScoped {
 public:
  static constexpr double kPressureShare = 0.95;
  // A fast leak fills a GPU in tens of seconds: it is said before, over a dozen
  // steps of at least 10 s (a warm-up's growth is in its first part only).
  static constexpr double kMinWindowSeconds = 10;
  static constexpr double kMaxWindowSeconds = 600;
  static constexpr double kStepsPerWindow = 12;
  static constexpr int kSegments = 6;

  // `step_seconds`: the rank's step period (0 unknown); now in monotonic seconds.
  GpuMemoryVerdict judge(int pid, const GpuMemoryView& m, double step_seconds, double now_s);
  void rank_ended(int pid) override { tracks_.erase(pid); }
  void retain(const std::set<int>& pids) override;

 private:
  std::map<int, std::deque<std::pair<double, int64_t>>> tracks_;  // (monotonic seconds, held bytes)
};

}  // namespace argus
