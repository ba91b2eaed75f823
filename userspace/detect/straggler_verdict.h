// A straggler detector's verdict on one rank in one evaluation: where it is
// late and early, whom it waits for, and what explains its lag. Shared by the
// decision (straggler_detector.cpp) and the events that tell it
// (straggler_events.cpp); nothing outside the detector reads it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "userspace/detect/straggler_detector.h"

namespace argus {

// A rank's time by what it did, in thread-seconds per wall second (RankSignal).
struct HostShares {
  double runqueue = 0, io = 0, lock = 0, sleep = 0, oncpu = 0, throttled = 0;
};

// Which test decided a host straggler's reason (evidence.host_cause.decided_by).
enum class HostTest : uint8_t {
  kNone,              // not a host straggler
  kNoKernelLayer,     // the kernel layer does not follow it: "host", or GC
  kGcExcess,          // its GC time above its peers' explains the lag
  kThrottledExcess,   // its cgroup's throttled time does
  kRunqueueExcess,    // its runqueue time does
  kIoExcess,          // its block I/O wait does
  kInputExcess,       // its main thread's wait for its next batch, above its peers', does
  kNoneExplains,      // nothing on its host explains it: it computes longer
};

inline const char* label_of(HostTest t) {
  switch (t) {
    case HostTest::kNone: return "";
    case HostTest::kNoKernelLayer: return "no_kernel_layer";
    case HostTest::kGcExcess: return "gc_excess";
    case HostTest::kThrottledExcess: return "throttled_excess";
    case HostTest::kRunqueueExcess: return "runqueue_excess";
    case HostTest::kIoExcess: return "io_excess";
    case HostTest::kInputExcess: return "input_excess";
    case HostTest::kNoneExplains: return "none_explains";
  }
  return "";
}

// The share of its time a rank waits in collectives and synchronize calls.
inline double total_wait(const RankSignal& r) { return std::min(1.0, r.coll_wait_ratio + r.sync_wait_ratio); }

struct StragglerDetector::Verdict {
  StragglerReason reason = StragglerReason::kNone;  // kNone: on time
  bool late = false;   // arrives last at most collectives, by the margin
  double gc_peer_median_s = 0;  // the peers' GC seconds in the window (median)
  double gc_excess_per_step_s = 0;  // this rank's GC above it, per step
  double gc_explained_share = 0;    // ... as a share of its lag
  double input_peer_share = 0;           // the peers' share of looks in their DataLoader's next (median)
  double input_excess_per_step_s = 0;    // this rank's above it, as time per step
  double input_explained_share = 0;      // ... as a share of its lag
  InputWorkersView input_peer_workers;   // the peers' DataLoader workers (median of each figure)
  // Kernel layer: the rank's shares and its peers' medians (thread-seconds per
  // wall second), each cause's excess per step and the share of the lag it
  // explains, and which test decided the host reason.
  HostShares own, peers;
  double throttled_excess_s = 0, runqueue_excess_s = 0, io_excess_s = 0;
  double throttled_explained = 0, runqueue_explained = 0, io_explained = 0;
  HostTest decided_by = HostTest::kNone;
  double peers_lag_s = 0, lag_behind_peers_s = 0;  // the peers' median lag; its lag behind it
  double lag_margin_s = 0;
  double wait_median = 0, wait_threshold = 0;
  double gpu_median = 0, gpu_threshold = 0;
  double score = 0;
  std::vector<const CommLateness*> late_on, early_on;  // where it is surely behind / ahead of its peers
  std::vector<const CommLateness*> waits_on;  // on time where a peer is surely late: it waits for that peer
  const CommLateness* decisive = nullptr;  // the communicator it is most surely late on
  bool victim = false;                     // late, but ahead somewhere: it waits for someone
  bool imbalance = false;                  // late by the pipeline's design (see mark_imbalance)
  // Peers late together, each in its own synchronize (settle_sync_partners):
  // the peer it waits for (0: none) and where, and the one late alike that
  // nothing tells apart from it (no GPU layer).
  int waits_for_pid = 0;
  const CommLateness* waits_for_comm = nullptr;
  std::map<int, int> alike;  // pid -> rank of each peer late alike
};

}  // namespace argus
