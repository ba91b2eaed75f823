// Every HTTP route of the agent (GET /metrics, /api/v1/*, /healthz) in one
// place, against a small read-only seam: the routes never see BPF, maps or the
// runtime's threads, so they are tested with a hand-made source.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <prometheus/metric_family.h>

#include "userspace/common/result.h"
#include "userspace/detect/detectors.h"
#include "exporters/http_server.h"
#include "userspace/trace/node_timeline.h"
#include "userspace/model.h"
#include "userspace/python/py_runtime.h"

namespace argus {

// What the routes read. AgentRuntime is one; tests have their own.
class ApiSource {
 public:
  virtual ~ApiSource() = default;
  virtual Snapshot snapshot() const = 0;
  virtual std::vector<DetectedEvent> events_since(double unix_seconds) const = 0;
  // The node's timeline over the last `seconds`, and the CLOCK_MONOTONIC time it ends at.
  virtual std::vector<TraceRank> trace(double seconds, uint64_t* end_ns) const = 0;
  virtual NodeTimeline::StepHistory gpu_steps(int pid, size_t last) const = 0;
  // Seconds since the event loop last went round (/healthz fails when it is stuck).
  virtual double seconds_since_heartbeat() const = 0;
  virtual uint64_t monotonic_ns() const = 0;
  // Every Python thread's stack of process `pid`, read now without stopping it
  // (GET .../python-stacks). Errors start "not python" (no interpreter) or
  // "unsupported python" (a refused build); anything else is a read failure.
  virtual Result<python::PyStackDump> python_stacks(int pid) const {
    return make_error("python stacks are not available from this source (pid " + std::to_string(pid) + ")");
  }
  // Folded Python stacks of the process's samples over the last `seconds`
  // (root first, ';' between frames, a space and the count); an error says
  // why there are none (sampling off, no interpreter located).
  virtual Result<std::string> python_profile(int /*pid*/, double /*seconds*/) const {
    return make_error("no Python profiles on this agent");
  }
};

struct ApiOptions {
  double heartbeat_limit_seconds = 5;  // /healthz answers 503 past this
  // --debug-routes: serve the routes that reveal process internals (kDebugRoutes).
  // Off, each answers 404 with a JSON error that names the flag.
  bool debug_routes = false;
  // Families /metrics adds to the ranks' and the agent's (the RDMA layer's).
  std::function<std::vector<prometheus::MetricFamily>(const Snapshot&)> extra_metrics;
};

// The routes that reveal process internals: the timeline (kernel names, call timing),
// the communicators, and (when they come) Python stacks and profiles.
inline constexpr const char* kDebugRoutes[] = {
    "/api/v1/trace",
    "/api/v1/comms",
    "/api/v1/ranks/{job_id}/{rank}/python-stacks",
    "/api/v1/ranks/{job_id}/{rank}/profile",
};

// Registers a route of kDebugRoutes: the handler when debug routes are on, else the
// 404 that says how to turn them on. Later routes (python-stacks, profile) use it too.
void debug_route(HttpServer& http, const ApiOptions& options, const std::string& pattern, HttpHandler handler);

// Every route; /metrics also reports http's own rejections.
void register_api_routes(HttpServer& http, const ApiSource& source, ApiOptions options = {});

}  // namespace argus
