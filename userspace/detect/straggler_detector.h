// Which rank the others wait for on this node, and why it is late. No clocks,
// maps or files: each evaluation gets the signals and the time, so tests replay
// them exactly.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/common/defaults.h"
#include "userspace/model/event.h"
#include "userspace/model/signals.h"
#include "userspace/model/vocab.h"

namespace argus {

// The straggler is the rank the others wait for: on one node (one clock) the
// rank that arrives behind its peers on one of its communicators (tensor,
// pipeline, expert or data parallel, or its point-to-point pairs) at nearly
// every step, where chance does not explain it; a rank that is behind on one
// communicator only because it waited ahead of its peers on another (it is
// ahead there: it waits for someone) is a victim, and the culprit's event
// names it. Why it is late: "host" (its host computes longer), "sync" (it
// spent its lag in its own synchronize calls, more than its peers spent before
// their arrival: its GPU or stream is slow), or, from the GPU layer, "gpu"
// (its NCCL kernels run least: its peers' kernels wait for it).
// "gc_pause" (from the Python layer): its garbage collector ran longer than
// its peers' median by at least half of its lateness; a gc_pause event then
// goes with the straggler event.
// With the kernel layer (offcpu_valid), a host straggler's reason says what:
// "throttled" (its cgroup's throttled time above its peers' median explains at
// least min_host_cause_share of its lag per step; asked first, as a throttled
// task also shows as runnable), "cpu_contention" (its runqueue time above the
// peers' median explains it), "io" (its block I/O wait does), "gc_pause" as
// above (it wins unless a kernel cause explains more), else "compute" (it
// computes longer: nothing on its host explains it). Without the kernel layer
// the reason stays "host".
struct StragglerOptions {
  // Late on a communicator (comms/arrival_order.h): behind its peers' median at
  // so many of its recent steps that chance explains it with at most this
  // probability (sign test), ...
  // Scaled by the step over 100 ms (up to max_p_late_long): false alarms are
  // counted per hour, and a long step makes fewer chances an hour.
  double max_p_late = 1e-4;
  double max_p_late_long = 1e-2;
  double min_t_score = 4;  // ... surely (median offset over its standard error) ...
  double min_lag_s = 50e-6;          // ... by more than this ...
  double min_lag_step_share = 0.05;  // ... and by more than this share of the step
  // A victim: ahead of its peers on some communicator (it waits there) this surely.
  double max_p_early = 1e-3;
  double min_early_t_score = 3;
  // A pipeline stage late by less than this share of the step on every replica
  // is the pipeline's shape (the loss stage), not a straggler.
  double max_imbalance_step_share = 0.10;
  // A rank whose host is on time may not have been behind by over half a step
  // (a pause of its own: a checkpoint, an evaluation) within this many
  // seconds: else its short NCCL kernels are its peers waiting out its pause
  // (the GPU records of it may come late), not a slow GPU.
  double pause_memory_seconds = 30;
  double min_sync_share = 0.5;  // lag spent in its own synchronize calls above its peers': "sync"
  double min_wait_gap = 0.03;   // evidence only: how much less than the median it waits
  double mad_k = 4.0;          // GPU side: more than k robust deviations below the median
  double min_coverage = 0.3;
  int raise_after = 2;  // consecutive evaluations before the flag rises
  int clear_after = 3;  // ... and before it falls
  double min_gpu_gap = 0.10;  // GPU side: NCCL-kernel share at least this much below the median
  double min_gc_share = 0.5;  // GC time above the peers' median per step explains this share of the lag
  double min_input_share = 0.5;  // waits for the next batch above the peers' median explain this share of the lag
  double min_input_looks = 3;        // ... seen in this many looks at least
  double min_input_share_gap = 0.1;  // ... and its share above twice its peers' median by this much
  // Of two peers late alike in their synchronize calls, the one
  // later by this share of its lag (and surely) is the one the other waits for.
  double min_partner_lag_share = 0.10;
  // Found waiting on a pair within a window, a victim still while its
  // earliness there stays this sure (t score below minus this).
  double min_still_early_t_score = 1.5;
  // A rank its peers wait for, its host not busy: its GPU's when its own
  // synchronize calls hold this share of its lag (its host may block in
  // launches behind a full queue instead).
  double min_waited_for_sync_share = 0.25;
  double min_host_cause_share = 0.5;  // throttled / runqueue / I/O time above the peers' median, per step
};

struct StragglerState {
  bool straggler = false;
  StragglerReason reason = StragglerReason::kNone;  // while flagged
  double score = 0;  // how far behind its peers, in steps (lag / step), or by the GPU share (0 = on time)
};

class StragglerDetector {
  struct Verdict;

 public:
  explicit StragglerDetector(StragglerOptions opts = {}, double window_seconds = kDefaultWindowSeconds)
      : opts_(opts), window_seconds_(window_seconds) {}
  // One evaluation over all ranks of the node; returns the events of flags that rose.
  std::vector<DetectedEvent> evaluate(const std::vector<RankSignal>& ranks, double now_unix);
  StragglerState state(int pid) const;
  void forget(int pid);
  void retain(const std::set<int>& pids);  // forgets every other process

 private:
  struct Track {
    int hits = 0, misses = 0;
    double gpu_low_since = -1;  // when its NCCL-kernel share last turned low, its host on time (-1: not low)
    double held_since = -1;     // since when it and a peer are late alike, not yet told apart (-1: not)
    int waited_for_pid = 0;     // the peer it was last found waiting for (settle_sync_partners) ...
    std::string waited_on;      // ... on which communicator ...
    double waited_at = -1;      // ... and when
    StragglerState st;
  };
  DetectedEvent straggler_event(const std::string& job, const RankSignal& r, const Verdict& v,
                                const std::vector<const RankSignal*>& members, const std::map<int, Verdict>& verdicts,
                                double now_unix) const;
  void judge_arrivals(const RankSignal& r, Verdict& v) const;
  // The phases of one job's evaluation, in order (straggler_detector.cpp).
  struct JobPass;
  JobPass open_job(const std::vector<const RankSignal*>& members, std::map<int, RankSignal*>& by_pid) const;
  void restate_lag(RankSignal& r, const Verdict& v) const;
  void set_pipeline_shape_aside(JobPass& p) const;
  void mark_imbalance(JobPass& p) const;
  void find_waits_on_late_peers(JobPass& p) const;
  std::set<int> gpu_slow_among_late(JobPass& p) const;
  std::map<int, const CommLateness*> behind_in_sync(const JobPass& p) const;
  std::set<int> settle_sync_partners(JobPass& p, const std::map<int, const CommLateness*>& behind) const;
  void recall_waits(JobPass& p, double now_unix);
  bool decide_reason(JobPass& p, const RankSignal& r, const std::set<int>& late_gpu_slow) const;
  void update_flag(JobPass& p, const std::string& job, const RankSignal& r, bool gpu_slow, bool held, double now_unix,
                   std::vector<DetectedEvent>& events);
  bool gc_explains_lag(const RankSignal& r, const std::vector<const RankSignal*>& members, Verdict& v) const;
  bool input_explains_lag(const RankSignal& r, const std::vector<const RankSignal*>& members, Verdict& v) const;
  std::string gc_summary(const RankSignal& r, const Verdict& v) const;
  StragglerReason host_reason(const RankSignal& r, const std::vector<const RankSignal*>& members, bool gc_explains,
                              Verdict& v) const;
  std::string host_cause_summary(const RankSignal& r, const Verdict& v) const;
  nlohmann::json host_cause_evidence(const RankSignal& r, const Verdict& v) const;
  DetectedEvent gc_pause_event(const std::string& job, const RankSignal& r, const Verdict& v,
                               const std::vector<const RankSignal*>& members, double now_unix) const;
  StragglerOptions opts_;
  double window_seconds_;
  std::map<int, Track> tracks_;
};

}  // namespace argus
