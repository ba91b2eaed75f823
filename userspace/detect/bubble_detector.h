// Pipeline bubbles: a rank whose GPU idles waiting on pipeline receives far
// more than its peers, or than it used to. Pure: signals and time in.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/model/event.h"
#include "userspace/model/signals.h"

namespace argus {

struct BubbleOptions {
  double min_excess = 0.10;  // bubble ratio at least this much above the job's median (or own past)
  double mad_k = 2.0;        // ... and more than k robust deviations above the median
  double same_stage_tolerance = 0.05;  // ranks this close in bubble ratio are one stage (see evaluate)
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
  explicit BubbleDetector(BubbleOptions opts = {}, double window_seconds = kDefaultWindowSeconds)
      : opts_(opts), window_seconds_(window_seconds) {}
  std::vector<DetectedEvent> evaluate(const std::vector<RankSignal>& ranks, double now_unix);
  bool flagged(int pid) const;
  void forget(int pid) { tracks_.erase(pid); }
  void retain(const std::set<int>& pids) {  // forgets every other process
    std::erase_if(tracks_, [&](const auto& kv) { return !pids.count(kv.first); });
  }

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


}  // namespace argus
