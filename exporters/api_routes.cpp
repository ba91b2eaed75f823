#include "exporters/api_routes.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>

#include "userspace/events/event_log.h"
#include "exporters/json_api.h"
#include "exporters/prometheus_exporter.h"
#include "exporters/query_params.h"
#include "exporters/trace_export.h"
#include "userspace/python/stack_groups.h"

namespace argus {
namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

HttpResponse bad_request(const std::string& why) { return HttpResponse::json(400, dump_json({{"error", why}})); }

// A decimal integer in [lo, hi] that is the whole text (exporters/query_params.h).
bool parse_int(const std::string& text, long lo, long hi, long& out) {
  const auto v = parse_int_param(text, lo, hi);
  if (v) out = *v;
  return v.has_value();
}

// The running process of (job, rank) on this node, else the newest one that ran.
const RankSnapshot* find_rank(const Snapshot& snap, const std::string& job, long rank) {
  const RankSnapshot* best = nullptr;
  for (const auto& r : snap.ranks) {
    if (r.job_id != job || r.rank != rank) continue;
    if (!best || (best->exited && !r.exited) || (best->exited == r.exited && r.first_seen_unix > best->first_seen_unix))
      best = &r;
  }
  return best;
}

HttpResponse debug_disabled(const std::string& pattern) {
  return HttpResponse::json(
      404, dump_json({{"error", pattern + " is disabled: it reveals process internals; start argus-agent with "
                                          "--debug-routes to enable it"},
                      {"disabled", true},
                      {"flag", "--debug-routes"}}));
}

// GET /api/v1/ranks/{job_id}/{rank}/python-stacks: read on the HTTP thread
// (never the event loop); a few ms a rank.
HttpResponse python_stacks_route(const ApiSource& src, const HttpRequest& req) {
  const std::string& job = req.params.at("job_id");
  long rank = 0;
  if (!parse_int(req.params.at("rank"), 0, 1 << 24, rank)) return bad_request("rank must be a non-negative integer");
  const auto snap = src.snapshot();
  const RankSnapshot* r = find_rank(snap, job, rank);
  if (!r) return HttpResponse::json(404, dump_json({{"error", "no such rank on this node"}}));
  if (r->exited) return HttpResponse::json(404, dump_json({{"error", "the rank has exited"}, {"pid", r->pid}}));
  auto d = src.python_stacks(r->pid);
  if (!d) {
    const LocateError why = d.failure().kind;
    const int status = why == LocateError::kNotPython ? 422 : why == LocateError::kUnsupportedPython ? 501 : 500;
    return HttpResponse::json(status, dump_json({{"error", d.error()}, {"pid", r->pid}}));
  }
  return HttpResponse::json(200, dump_json(python::stacks_json(job, static_cast<int>(rank), r->pid, *d)));
}

// GET /api/v1/ranks/{job_id}/{rank}/profile?seconds=N: folded stacks, text.
HttpResponse profile_route(const ApiSource& src, const HttpRequest& req) {
  long rank = 0;
  if (!parse_int(req.params.at("rank"), 0, 1 << 24, rank)) return bad_request("rank must be a non-negative integer");
  double seconds = 60;
  if (auto it = req.query.find("seconds"); it != req.query.end()) {
    const auto v = parse_number_param(it->second);
    if (!v || *v <= 0 || *v > 3600) return bad_request("seconds must be a number of seconds in (0, 3600]");
    seconds = *v;
  }
  const auto snap = src.snapshot();
  const RankSnapshot* r = find_rank(snap, req.params.at("job_id"), rank);
  if (!r) return HttpResponse::json(404, dump_json({{"error", "no such rank on this node"}}));
  auto folded = src.python_profile(r->pid, seconds);
  if (!folded.ok()) return HttpResponse::json(404, dump_json({{"error", folded.error()}, {"pid", r->pid}}));
  return HttpResponse::text(200, *folded);
}

}  // namespace

void debug_route(HttpServer& http, const ApiOptions& options, const std::string& pattern, HttpHandler handler) {
  if (options.debug_routes) {
    http.route("GET", pattern, std::move(handler));
  } else {
    http.route("GET", pattern, [pattern](const HttpRequest&) { return debug_disabled(pattern); });
  }
}

void register_api_routes(HttpServer& http, const ApiSource& src, ApiOptions options) {
  http.route("GET", "/metrics", [&src, &http, extra = options.extra_metrics](const HttpRequest&) {
    HttpResponse r;
    r.content_type = kPrometheusContentType;
    const auto snap = src.snapshot();
    auto families = collect_metrics(snap);
    if (extra)
      for (auto& f : extra(snap)) families.push_back(std::move(f));
    families.push_back(http_rejection_metrics(http.rejections()));
    r.body = serialize_metrics(families);
    return r;
  });
  http.route("GET", "/api/v1/ranks",
             [&src](const HttpRequest&) { return HttpResponse::json(200, render_ranks_json(src.snapshot())); });
  http.route("GET", "/api/v1/events", [&src](const HttpRequest& req) {
    double since = 0;
    if (auto it = req.query.find("since"); it != req.query.end()) {
      const auto v = parse_number_param(it->second);
      if (!v) return bad_request("since must be UNIX seconds");
      since = *v;
    }
    nlohmann::json list = nlohmann::json::array();
    for (const auto& ev : src.events_since(since)) list.push_back(event_to_json(ev));
    return HttpResponse::json(200, dump_json({{"events", list}}));
  });
  debug_route(http, options, "/api/v1/comms",
              [&src](const HttpRequest&) { return HttpResponse::json(200, dump_json(comms_json(src.snapshot()))); });
  debug_route(http, options, "/api/v1/trace", [&src](const HttpRequest& req) {
    auto it = req.query.find("seconds");
    const auto secs = parse_trace_seconds(it == req.query.end() ? "" : it->second, it != req.query.end());
    if (!secs.ok) return bad_request(secs.error);
    TraceRequest tr;
    tr.seconds = secs.seconds;
    auto spans = src.trace(secs.seconds, &tr.end_ns);
    tr.end_unix = unix_now();
    const auto snap = src.snapshot();
    return HttpResponse::json(200, trace_json_text(spans, snap.ranks, src.events_since(tr.end_unix - tr.seconds), tr));
  });
  http.route("GET", "/api/v1/ranks/{job_id}/{rank}/gpu-steps", [&src](const HttpRequest& req) {
    const std::string& job = req.params.at("job_id");
    long rank = 0, last = 20;
    if (!parse_int(req.params.at("rank"), 0, 1 << 24, rank)) return bad_request("rank must be a non-negative integer");
    if (auto it = req.query.find("last"); it != req.query.end() && !parse_int(it->second, 1, 600, last))
      return bad_request("last must be 1..600");
    const auto snap = src.snapshot();
    const RankSnapshot* r = find_rank(snap, job, rank);
    if (!r) return HttpResponse::json(404, dump_json({{"error", "no such rank on this node"}}));
    const auto hist = src.gpu_steps(r->pid, static_cast<size_t>(last));
    const double offset = unix_now() - static_cast<double>(src.monotonic_ns()) / 1e9;
    return HttpResponse::json(
        200, dump_json(gpu_steps_json(job, static_cast<int>(rank), r->pid, hist.steps, hist.names, offset)));
  });
  debug_route(http, options, kDebugRoutes[2], [&src](const HttpRequest& req) { return python_stacks_route(src, req); });
  debug_route(http, options, kDebugRoutes[3], [&src](const HttpRequest& req) { return profile_route(src, req); });
  http.route("GET", "/healthz", [&src, limit = options.heartbeat_limit_seconds](const HttpRequest&) {
    const double age = src.seconds_since_heartbeat();
    if (age > limit) return HttpResponse::text(503, "event loop stalled for " + std::to_string(age) + " s\n");
    return HttpResponse::text(200, "ok\n");
  });
}

}  // namespace argus
