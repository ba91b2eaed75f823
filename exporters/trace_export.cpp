#include "exporters/trace_export.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace argus {
namespace {

using nlohmann::json;

// Track order inside a rank: host first, then the GPU.
int track_order(const std::string& track) {
  if (track == "NCCL calls") return 0;
  if (track == "CUDA synchronize") return 1;
  if (track == "GPU idle") return 3;
  if (track == "GPU copies") return 4;
  return 2;  // GPU streams
}

std::string process_name(int pid, const std::vector<RankSnapshot>& ids) {
  for (const auto& r : ids)
    if (r.pid == pid && r.identified())
      return "rank " + std::to_string(r.rank) + " (job " + r.job_id + ", pid " + std::to_string(pid) + ")";
  return "pid " + std::to_string(pid);
}

int sort_key(int pid, const std::vector<RankSnapshot>& ids) {
  for (const auto& r : ids)
    if (r.pid == pid && r.identified()) return r.rank;
  return 1 << 30;
}

}  // namespace

TraceSecondsParse parse_trace_seconds(const std::string& value, bool present) {
  TraceSecondsParse p;
  if (!present) {
    p.ok = true;
    return p;
  }
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end == nullptr || *end != '\0' || !std::isfinite(v) || v <= 0 || v > kTraceMaxSeconds) {
    p.error = "seconds must be a number above 0 and at most 60 (the agent keeps the last 60 s), got '" + value + "'";
    return p;
  }
  p.ok = true;
  p.seconds = v;
  return p;
}

json trace_json(const std::vector<TraceRank>& ranks, const std::vector<RankSnapshot>& identities,
                const std::vector<DetectedEvent>& events, const TraceRequest& req) {
  json out = json::array();
  const uint64_t from_ns = req.end_ns > static_cast<uint64_t>(req.seconds * 1e9)
                               ? req.end_ns - static_cast<uint64_t>(req.seconds * 1e9)
                               : 0;
  // Timestamps in µs from the start of the trace: small numbers, exact in a double.
  auto us = [&](uint64_t ns) { return static_cast<double>(static_cast<int64_t>(ns - from_ns)) / 1e3; };
  for (const auto& tr : ranks) {
    const int pid = tr.pid;
    out.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0},
                   {"args", {{"name", process_name(pid, identities)}}}});
    out.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0},
                   {"args", {{"sort_index", sort_key(pid, identities)}}}});
    // Tracks -> tids, and spans per track sorted by start.
    std::map<std::string, std::vector<const TraceSpan*>> tracks;
    for (const auto& s : tr.spans) {
      if (s.end_ns < from_ns || s.start_ns > req.end_ns) continue;
      tracks[s.track].push_back(&s);
    }
    std::vector<std::string> names;
    for (const auto& [name, _] : tracks) names.push_back(name);
    std::stable_sort(names.begin(), names.end(),
                     [](const std::string& a, const std::string& b) { return track_order(a) < track_order(b); });
    int tid = 1;
    for (const auto& name : names) {
      auto& spans = tracks[name];
      out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
      out.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
      std::stable_sort(spans.begin(), spans.end(), [](const TraceSpan* a, const TraceSpan* b) {
        return a->start_ns != b->start_ns ? a->start_ns < b->start_ns : a->end_ns > b->end_ns;
      });
      uint64_t frontier = from_ns;
      for (const auto* s : spans) {
        uint64_t start = std::max(s->start_ns, from_ns);
        const uint64_t end = std::min(s->end_ns, req.end_ns);
        // One track = one timeline: an overlapping span starts where the previous ended.
        if (start < frontier) start = frontier;
        if (end < start) continue;
        frontier = end;
        json args = json::object();
        for (const auto& [k, v] : s->args) args[k] = v;
        out.push_back({{"ph", "X"}, {"name", s->name}, {"cat", s->category}, {"pid", pid}, {"tid", tid},
                       {"ts", us(start)}, {"dur", static_cast<double>(end - start) / 1e3}, {"args", args}});
      }
      ++tid;
    }
  }
  // Detected events in the window, as global instant markers.
  const double from_unix = req.end_unix - req.seconds;
  for (const auto& ev : events) {
    if (ev.time < from_unix || ev.time > req.end_unix) continue;
    const double ts = (ev.time - from_unix) * 1e6;
    out.push_back({{"ph", "i"}, {"s", "g"}, {"name", ev.kind + (ev.rank >= 0 ? " rank " + std::to_string(ev.rank) : "")},
                   {"cat", "event"}, {"pid", 0}, {"tid", 0}, {"ts", ts}, {"args", {{"summary", ev.summary}}}});
  }
  json doc = json::object();
  doc["traceEvents"] = std::move(out);
  doc["displayTimeUnit"] = "ms";
  doc["otherData"] = {{"source", "argus-agent"}, {"seconds", req.seconds}};
  return doc;
}

}  // namespace argus
