// Straggler and hang detection on per-rank signals. No clocks, maps or files:
// each evaluation gets the signals and the time, so tests replay them exactly.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "detect/collective_tracker.h"

namespace argus {

// A detected event, as GET /api/v1/events returns it.
struct DetectedEvent {
  double time = 0;  // unix seconds
  std::string kind;  // "straggler", "hang", "rank_exit", ...
  std::string job_id;
  int rank = -1;
  std::string summary;
  nlohmann::json evidence = nlohmann::json::object();
};

struct RankSignal {
  int pid = 0;
  std::string job_id;
  int rank = -1;
  double wait_ratio = 0;  // collectives + synchronize, last window
  double coverage = 0;    // share of the window the rank has been watched
  RankLagStats lag;
  // GPU side (from the GPU-activity records), when the rank has current ones:
  // share of the window its NCCL kernels run. They run long while waiting for a
  // late peer, so the rank whose GPU is slow has the lowest.
  bool gpu_valid = false;
  double gpu_nccl_ratio = 0;
  double bubble_ratio = 0;  // share of the window idle before a pipeline P2P receive
};

struct StragglerOptions {
  double min_wait_gap = 0.10;  // a straggler waits at least this much less than the median
  double mad_k = 4.0;          // ... and more than k robust deviations below it
  double min_late_fraction = 0.5;  // on one node: last to arrive at most collectives
  double min_lag_s = 0.002;        // ... by more than this
  double min_coverage = 0.3;
  int raise_after = 2;  // consecutive evaluations before the flag rises
  int clear_after = 3;  // ... and before it falls
  double min_gpu_gap = 0.10;  // GPU side: NCCL-kernel share at least this much below the median
};

struct StragglerState {
  bool straggler = false;
  std::string reason;  // "host" or "gpu" while flagged
  double score = 0;  // (1 - w) / (1 - median w) - 1: how much slower than the median (0 = on time)
};

class StragglerDetector {
  struct Verdict;

 public:
  explicit StragglerDetector(StragglerOptions opts = {}, double window_seconds = 10)
      : opts_(opts), window_seconds_(window_seconds) {}
  // One evaluation over all ranks of the node; returns the events of flags that rose.
  std::vector<DetectedEvent> evaluate(const std::vector<RankSignal>& ranks, double now_unix);
  StragglerState state(int pid) const;
  void forget(int pid);

 private:
  struct Track {
    int hits = 0, misses = 0;
    StragglerState st;
  };
  DetectedEvent straggler_event(const std::string& job, const RankSignal& r, const Verdict& v,
                                const std::vector<const RankSignal*>& members, double now_unix) const;
  StragglerOptions opts_;
  double window_seconds_;
  std::map<int, Track> tracks_;
};

struct BubbleOptions {
  double min_excess = 0.10;  // bubble ratio at least this much above the job's median (or own past)
  double mad_k = 2.0;        // ... and more than k robust deviations above the median
  double past_factor = 2.0;  // own past: at least this many times its baseline
  int baseline_evaluations = 5;  // evaluations before the own baseline counts
  double baseline_alpha = 0.2;   // EWMA weight of a new evaluation in the baseline
  double min_coverage = 0.3;
  int raise_after = 2;
  int clear_after = 3;
};

// Pipeline bubbles: a rank whose GPU idles waiting on pipeline P2P receives
// much more than the other ranks of its job, or than it used to.
class BubbleDetector {
 public:
  explicit BubbleDetector(BubbleOptions opts = {}, double window_seconds = 10)
      : opts_(opts), window_seconds_(window_seconds) {}
  std::vector<DetectedEvent> evaluate(const std::vector<RankSignal>& ranks, double now_unix);
  bool flagged(int pid) const;
  void forget(int pid) { tracks_.erase(pid); }

 private:
  struct Track {
    int hits = 0, misses = 0, evaluations = 0;
    double baseline = 0;
    bool flagged = false;
  };
  BubbleOptions opts_;
  double window_seconds_;
  std::map<int, Track> tracks_;
};

struct InflightCollective {
  int pid = 0;
  std::string comm;
  uint64_t start_ns = 0;
};

struct HangOptions {
  double min_stall_seconds = 10;  // a communicator stalled this long is hung...
  double step_multiple = 5;       // ... or this many step periods, whichever is longer
};

struct CommHealth {
  std::string comm;
  std::string job_id;
  double stalled_seconds = 0;
  uint64_t newest_seq = 0;
  bool hung = false;
  std::vector<int> missing_pids;  // local ranks that never reached newest_seq
};

struct RankInfoForHang {
  std::string job_id;
  int rank = -1;
  bool exited = false;
  std::string exit_reason;
  int exit_code = 0;
  double step_seconds = 0;
};

class HangDetector {
 public:
  explicit HangDetector(HangOptions opts = {}) : opts_(opts) {}
  // comms from the tracker, collectives still running (from BPF), rank facts by pid.
  std::vector<DetectedEvent> evaluate(const std::vector<CommView>& comms, const std::vector<InflightCollective>& inflight,
                                      const std::map<int, RankInfoForHang>& ranks, uint64_t now_ns, double now_unix);
  const std::map<std::string, CommHealth>& health() const { return health_; }
  bool missing(int pid) const;

 private:
  HangOptions opts_;
  std::map<std::string, CommHealth> health_;
  std::map<std::string, std::set<int>> reported_;  // comm -> missing pids already in an event
};

}  // namespace argus
