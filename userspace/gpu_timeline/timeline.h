// One rank's GPU timeline, from the wire records the USDT producers hand over
// (CUPTI injection library or the sim): busy and idle time, NCCL kernel time,
// pipeline bubbles (idle gaps that end at a P2P kernel), per-step kernel
// sketches, and the recent records for the trace. Pure logic on timestamps:
// unit-tested on hand-built records, no clock, no BPF.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "bpf/argus_gpu_wire.h"
#include "userspace/model/agent_counters.h"
#include "userspace/common/defaults.h"
#include "userspace/gpu_timeline/sketch.h"
#include "userspace/model/trace.h"

namespace argus::gpu {

struct TimelineOptions {
  double window_seconds = kDefaultWindowSeconds;
  double trace_seconds = kDefaultTraceSeconds;        // recent records kept for GET /api/v1/trace
  size_t max_records = kDefaultMaxTraceRecordsPerRank;  // ... and at most this many (records, gaps)
  double min_step_gap_s = 1.0;     // an idle gap longer than max(this, 2 steps) is outside the steps
  size_t max_steps = 600;          // step sketches kept
  // A sketch with no step mark for this long, or this many kernels, closes anyway.
  double max_step_seconds = kDefaultMaxStepSketchSeconds;
  size_t max_step_kernels = kDefaultMaxStepSketchKernels;
  size_t max_names = kDefaultMaxKernelNamesPerRank;
  size_t max_intervals = kDefaultMaxWindowIntervalsPerRank;  // busy intervals (and gaps) in the window
  AgentCounters* caps = nullptr;       // where the bounds that bite are counted
};

struct GpuTotals {
  uint64_t records = 0;
  uint64_t kernels = 0;
  uint64_t memcpys = 0;
  uint64_t memsets = 0;
  uint64_t kernel_ns = 0;       // sum of kernel durations
  uint64_t nccl_kernel_ns = 0;  // ... of NCCL kernels
  uint64_t idle_ns = 0;         // gaps between kernels inside steps
  uint64_t bubble_ns = 0;       // ... that end at a P2P kernel
  uint64_t dropped = 0;         // records the producer lost
  uint64_t malformed = 0;       // records that end before they start, or of an unknown kind: never counted
  uint64_t folded_kernels = 0;  // kernels that came folded in spans (included in kernels)
  // What the producer fired while no agent listened (ARGUS_GPU_UNHEARD): never received.
  uint64_t unheard_records = 0, unheard_kernels = 0, unheard_nccl_kernels = 0;
  std::map<std::string, uint64_t> memcpy_bytes;  // direction label -> bytes
};

struct WindowStats {
  bool has_data = false;  // kernels seen within the last window
  double span_s = 0;      // the part of the window the records cover
  double busy_ratio = 0;  // share of the span with a kernel running
  double nccl_ratio = 0;  // share of the span with an NCCL kernel running
  double bubble_ratio = 0;  // share of the span idle before a P2P kernel
  double idle_s = 0;      // in-step idle time in the span
};


// The union of [start, end) intervals as disjoint spans sorted by start, with
// their total length. Intervals that come in start order (nearly all) append or
// extend the last span in O(1); one that goes back in time is merged in place.
// The covered time above any point at or before the oldest kept span's end is
// O(1): the window never scans its kernels.
class IntervalUnion {
 public:
  void add(uint64_t start_ns, uint64_t end_ns);
  // Drops the spans that end before lo, then the oldest past max_spans; returns how many went by the count.
  size_t trim(uint64_t lo, size_t max_spans);
  // Covered length in [lo, +inf); visited: spans looked at.
  uint64_t covered_since(uint64_t lo, uint64_t& visited) const;
  size_t size() const { return spans_.size(); }

 private:
  struct Span {
    uint64_t start, end;
  };
  std::deque<Span> spans_;
  uint64_t total_ = 0;
};


class Timeline {
 public:
  explicit Timeline(TimelineOptions opts = {}) : opts_(opts) {}

  // A rank keeps at most max_names names: a later one is refused (counted).
  void set_name(uint32_t id, std::string name);
  std::string name(uint32_t id) const;  // "kernel#<id>" when never announced
  const std::map<uint32_t, std::string>& names() const { return names_; }

  // A batch as the producer sent it (taken: sorted in place if it is not yet).
  // dropped: records lost before it. step_seconds: the rank's step period (0 = unknown).
  void add_batch(std::vector<argus_gpu_rec> batch, uint64_t dropped, double step_seconds);
  // The host saw a new step start at ts (CLOCK_MONOTONIC): closes the running sketch.
  void mark_step(uint64_t ts_ns);

  // O(1) in the records of the window (incremental sums); see window_visits().
  WindowStats window(uint64_t now_ns) const;
  // Test hook: spans and gaps the last window() looked at.
  uint64_t window_visits() const { return window_visits_; }
  const GpuTotals& totals() const { return totals_; }
  std::vector<argus_gpu_rec> recent(uint64_t since_ns) const;
  const std::deque<argus_gpu_rec>& recent_records() const { return recent_; }  // by arrival
  const std::deque<StepSummary>& steps() const { return steps_; }
  // In-step idle gaps that ended at or after since_ns (bubble: it ended at a receive).
  struct Gap {
    uint64_t end_ns;  // the start of the kernel that ended it
    uint64_t ns;
    bool bubble;
  };
  std::vector<Gap> gaps_since(uint64_t since_ns) const;
  const std::deque<Gap>& recent_gaps() const { return recent_gaps_; }  // by end
  double mean_step_bytes(size_t last) const;  // encoded sketch bytes per step, 0 when none
  uint64_t latest_end_ns() const { return frontier_ns_; }

 private:
  void add_sketch_entry(uint64_t span_start_ns, uint32_t name_id, int32_t bucket, uint32_t count, uint64_t sum_ns);
  void add_kernel(const argus_gpu_rec& r, uint64_t max_gap_ns);
  void add_kept_kernel(const argus_gpu_rec& r);
  void add_span(const argus_gpu_span& s);
  void add_gap(uint64_t start_ns, uint64_t end_ns, bool bubble, uint64_t max_gap_ns);
  void add_busy_chunk(uint64_t end_ns, uint64_t ns);
  void note_extent(uint64_t start_ns, uint64_t end_ns);
  void sketch_start(uint64_t start_ns);
  void close_step(uint64_t next_start_ns, const char* closed_by = "step");
  void trim();

  TimelineOptions opts_;
  std::map<uint32_t, std::string> names_;
  GpuTotals totals_;
  uint64_t frontier_ns_ = 0;  // latest kernel end seen
  uint64_t first_ns_ = 0;     // earliest kernel start seen
  std::deque<argus_gpu_rec> recent_;  // kernels and copies, by arrival
  IntervalUnion busy_;  // kernels within the window
  IntervalUnion nccl_;  // NCCL kernels within the window
  std::deque<Gap> gaps_;         // within the window, by end (they never overlap)
  uint64_t gaps_idle_ns_ = 0;    // sum over gaps_
  uint64_t gaps_bubble_ns_ = 0;  // ... of the bubbles
  std::deque<Gap> recent_gaps_;  // within the trace horizon
  std::deque<Gap> busy_chunks_;  // busy time summed by a folding producer, by end (bubble unused)
  uint64_t busy_chunks_ns_ = 0;
  mutable uint64_t window_visits_ = 0;
  std::deque<uint64_t> marks_;  // step starts not yet reached by the records
  uint64_t open_step_ns_ = 0;   // the step mark that opened the sketch (0: none yet)
  uint64_t open_first_ns_ = 0;  // the start of its first kernel
  StepSketch open_;
  std::deque<StepSummary> steps_;
};

}  // namespace argus::gpu
