// Every bounded structure of the agent counts the times its bound bit, in one
// place, exported as argus_agent_capped_total{structure} (docs/metrics.md). The
// unit is one item dropped, refused or cut short because of the bound.
// Components take a CapCounts* (null in tests that do not look); increments
// are relaxed atomics, so the event loop counts and any thread reads.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace argus {

enum class Cap : unsigned {
  kStepSketchTime,      // a step sketch closed because no step mark came in time
  kStepSketchRecords,   // ... because it held the most kernels a sketch may hold
  kKernelNames,         // a kernel name refused: the rank has the most names kept
  kGpuTraceRecords,     // a GPU record pushed out of the trace buffer before its time
  kGpuWindowIntervals,  // a busy interval pushed out of the window before its time
  kGpuGaps,             // an idle gap pushed out of the window or trace before its time
  kHostTraceSpans,      // a host call span pushed out of the trace before its time
  kTraceAnswerSpans,    // a span left out of a GET /api/v1/trace answer
  kCommunicators,       // a communicator the tracker refused (the node has the most kept)
  kOpenCollectives,     // an incomplete collective dropped (some member never came)
  kCollectiveSamples,   // a per-rank arrival or lag sample dropped before its time
  kCommHandles,         // an ncclComm_t handle of a process left unnamed
  kExitedRanks,         // an exited rank forgotten before its grace period ended
  kRankCommInits,       // an ncclCommInitRank of a process not kept
  kDetectedEvents,      // a detected event pushed out of the event log
  kPythonSamples,       // a Python stack sample pushed out of a rank's profile before its time
  kCount,
};

inline const char* cap_label(Cap c) {
  switch (c) {
    case Cap::kStepSketchTime: return "step_sketch_time";
    case Cap::kStepSketchRecords: return "step_sketch_records";
    case Cap::kKernelNames: return "kernel_names";
    case Cap::kGpuTraceRecords: return "gpu_trace_records";
    case Cap::kGpuWindowIntervals: return "gpu_window_intervals";
    case Cap::kGpuGaps: return "gpu_gaps";
    case Cap::kHostTraceSpans: return "host_trace_spans";
    case Cap::kTraceAnswerSpans: return "trace_answer_spans";
    case Cap::kCommunicators: return "communicators";
    case Cap::kOpenCollectives: return "open_collectives";
    case Cap::kCollectiveSamples: return "collective_samples";
    case Cap::kCommHandles: return "comm_handles";
    case Cap::kExitedRanks: return "exited_ranks";
    case Cap::kRankCommInits: return "rank_comm_inits";
    case Cap::kDetectedEvents: return "detected_events";
    case Cap::kPythonSamples: return "python_samples";
    case Cap::kCount: break;
  }
  return "unknown";
}

class CapCounts {
 public:
  void hit(Cap c, uint64_t n = 1) { n_[static_cast<unsigned>(c)].fetch_add(n, std::memory_order_relaxed); }
  uint64_t get(Cap c) const { return n_[static_cast<unsigned>(c)].load(std::memory_order_relaxed); }
  // Every structure, those never capped at 0: the series exist from the start.
  std::map<std::string, uint64_t> all() const {
    std::map<std::string, uint64_t> out;
    for (unsigned i = 0; i < static_cast<unsigned>(Cap::kCount); ++i)
      out[cap_label(static_cast<Cap>(i))] = n_[i].load(std::memory_order_relaxed);
    return out;
  }

 private:
  std::array<std::atomic<uint64_t>, static_cast<unsigned>(Cap::kCount)> n_{};
};

// Counts into `caps` when there is one.
inline void count_cap(CapCounts* caps, Cap c, uint64_t n = 1) {
  if (caps != nullptr && n != 0) caps->hit(c, n);
}

}  // namespace argus
