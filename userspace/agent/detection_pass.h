// The detection pass, once a stats pass: the state's view of every rank (the
// registry's snapshot, the collective tracker's lag stats, communicators and
// the calls hosts are blocked in, the timeline's GPU view) turned into the
// detectors' signals, the detectors run, and their verdicts: the events that
// rose, each rank's conclusions and each communicator's health. It reads state
// only: no maps, no files, no process memory.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "userspace/comms/collective_tracker.h"
#include "userspace/detect/detectors.h"
#include "userspace/detect/gpu_memory.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/snapshot.h"
#include "userspace/trace/node_timeline.h"

namespace argus {

struct DetectionOptions {
  double window_seconds = kDefaultWindowSeconds;
  StragglerOptions straggler;
  HangOptions hang;
};

class DetectionPass final : public PidScoped {
 public:
  explicit DetectionPass(DetectionOptions opts)
      : opts_(opts), stragglers_(opts.straggler, opts.window_seconds), bubbles_(BubbleOptions{}, opts.window_seconds),
        hangs_(opts.hang) {}

  struct Verdicts {
    std::vector<DetectedEvent> events;  // stragglers (and their GC pauses), bubbles, hangs: in that order
    std::map<int, RankDetection> ranks;
    std::vector<CommSnapshot> comms;
  };
  Verdicts run(const std::vector<RankSnapshot>& ranks, const CollectiveTracker& tracker, const NodeTimeline& timeline,
               uint64_t now_ns, double now_unix);
  void retain(const std::set<int>& pids) override;

 private:
  RankSignal signal_of(const RankSnapshot& r, const RankLagStats& lag, const GpuRankView& gpu, double now_unix) const;
  std::vector<CommSnapshot> comm_health(const std::vector<CommView>& comms, const std::map<int, RankInfoForHang>& facts,
                                        std::map<int, std::map<std::string, uint64_t>>& seqs) const;

  DetectionOptions opts_;
  StragglerDetector stragglers_;
  BubbleDetector bubbles_;
  HangDetector hangs_;
  GpuMemoryJudge gpu_memory_;
};

}  // namespace argus
