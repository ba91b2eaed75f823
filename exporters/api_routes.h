// Every HTTP route of the agent (GET /metrics, /api/v1/*, /healthz) in one
// place, against a small read-only seam: the routes never see BPF, maps or the
// runtime's threads, so they are tested with a hand-made source.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <prometheus/metric_family.h>

#include "exporters/http_server.h"
#include "userspace/model/api_source.h"

namespace argus {

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
