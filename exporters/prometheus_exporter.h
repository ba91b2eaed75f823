// Snapshot -> Prometheus text exposition format (GET /metrics).
//
// Per-rank series carry job_id and rank; only identified ranks are exported per rank.
// When several processes share one (job_id, rank) — a restarted rank whose old process
// is still visible as exited — their counters are summed (a counter that drops when the
// old process leaves the snapshot reads to Prometheus as a reset) and gauges come from
// the running (else the newest) one, and so do argus_rank_info's labels (pid, ...).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "userspace/model/snapshot.h"

namespace argus {

// The Content-Type of render_metrics' output.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// Every family this exporter knows, in a stable order, with HELP and TYPE; a family
// with no series is still listed (HELP and TYPE lines only).
std::vector<prometheus::MetricFamily> collect_metrics(const Snapshot& snap);

// argus_agent_http_rejections_total{reason}: the HTTP server's refusals (HttpServer::rejections()).
prometheus::MetricFamily http_rejection_metrics(const std::map<std::string, uint64_t>& by_reason);

// Serializes families (ours and, later, other exporters') to the text format.
std::string serialize_metrics(const std::vector<prometheus::MetricFamily>& families);

// serialize_metrics(collect_metrics(snap)).
std::string render_metrics(const Snapshot& snap);

}  // namespace argus
