// GET /api/v1/trace: the node's recent timeline as Chrome trace-event JSON
// (opens in Perfetto and chrome://tracing). One process per rank ("rank 3 of
// job X"), one thread per track: NCCL calls, CUDA synchronize, each GPU stream,
// GPU copies, GPU idle (bubbles named). Detected events are instant markers.
// Spans on one track never partly overlap (the format needs them well nested):
// an overlapping span is clipped to start where the previous one ended.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/model/event.h"
#include "userspace/model/trace.h"
#include "userspace/model/snapshot.h"

namespace argus {

struct TraceRequest {
  uint64_t end_ns = 0;          // CLOCK_MONOTONIC end of the trace
  double end_unix = 0;          // the same instant on the wall clock (for events)
  double seconds = 10;
};

// The answer's text, written straight from the spans (no JSON document in
// between). otherData says whether the answer was capped: "capped" and
// "spans_left_out" (the oldest spans of the ranks over their share of
// NodeTimelineOptions::max_trace_spans).
std::string trace_json_text(const std::vector<TraceRank>& ranks, const std::vector<RankSnapshot>& identities,
                            const std::vector<DetectedEvent>& events, const TraceRequest& req);
// The same, parsed (tests).
nlohmann::json trace_json(const std::vector<TraceRank>& ranks, const std::vector<RankSnapshot>& identities,
                          const std::vector<DetectedEvent>& events, const TraceRequest& req);

// The agent keeps the last 60 s of the timeline (NodeTimelineOptions).
inline constexpr double kTraceMaxSeconds = 60;

// ?seconds=N: above 0 and at most kTraceMaxSeconds, default 10; a message on a bad value.
struct TraceSecondsParse {
  bool ok = false;
  double seconds = 10;
  std::string error;
};
TraceSecondsParse parse_trace_seconds(const std::string& value, bool present);

}  // namespace argus
