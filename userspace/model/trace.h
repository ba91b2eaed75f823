// The node's timeline as the trace route and the step-history route hand it
// out: plain copies, built by the state layer, read by the exporters.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace argus {

// One span on one track of one rank, for the trace.
struct TraceSpan {
  std::string track;  // "GPU stream 7", "NCCL", "CUDA sync", "GPU idle"
  std::string name;
  uint64_t start_ns = 0;  // CLOCK_MONOTONIC
  uint64_t end_ns = 0;
  std::string category;  // "kernel", "nccl_kernel", "memcpy", "collective", "sync", "bubble", "idle"
  std::map<std::string, std::string> args;
};

struct TraceRank {
  int pid = 0;
  std::vector<TraceSpan> spans;
  size_t left_out = 0;  // spans of the asked interval left out by the answer's cap (the oldest)
};

namespace gpu {

// One step's kernel-duration summary (its sketch, gpu_timeline/sketch.h).
struct StepSummary {
  uint64_t start_ns = 0;
  std::vector<uint8_t> sketch;  // StepSketch::encode()
  // Closed by a step mark, or cut short: no mark in max_step_seconds ("time") or
  // max_step_kernels reached ("kernels").
  const char* closed_by = "step";
};

}  // namespace gpu

// A rank's last per-step kernel summaries, oldest first, and its kernel names.
struct StepHistory {
  std::vector<gpu::StepSummary> steps;
  std::map<uint32_t, std::string> names;
};

}  // namespace argus
