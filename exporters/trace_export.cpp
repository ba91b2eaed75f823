#include "exporters/trace_export.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string_view>
#include <type_traits>

#include "exporters/query_params.h"

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
  const auto v = parse_number_param(value);
  if (!v || *v <= 0 || *v > kTraceMaxSeconds) {
    p.error = "seconds must be a number above 0 and at most 60 (the agent keeps the last 60 s), got '" + value + "'";
    return p;
  }
  p.ok = true;
  p.seconds = *v;
  return p;
}

namespace {

// Appends JSON text: the answer is written once, with no document in between.
class JsonOut {
 public:
  explicit JsonOut(std::string& out) : out_(out) {}
  JsonOut& raw(std::string_view s) {
    out_ += s;
    return *this;
  }
  // A JSON string: escaped, invalid UTF-8 replaced (kernel names come from outside).
  JsonOut& str(const std::string& s) {
    bool plain = true;
    for (unsigned char c : s)
      if (c < 0x20 || c == '"' || c == '\\' || c >= 0x80) {
        plain = false;
        break;
      }
    if (plain) {
      out_ += '"';
      out_ += s;
      out_ += '"';
    } else {
      out_ += json(s).dump(-1, ' ', false, json::error_handler_t::replace);
    }
    return *this;
  }
  JsonOut& num(double v) {
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof(buf), std::isfinite(v) ? v : 0.0);
    out_.append(buf, r.ptr);
    return *this;
  }
  JsonOut& num(long long v) { return raw(std::to_string(v)); }

 private:
  std::string& out_;
};

}  // namespace

std::string trace_json_text(const std::vector<TraceRank>& ranks, const std::vector<RankSnapshot>& identities,
                            const std::vector<DetectedEvent>& events, const TraceRequest& req) {
  std::string text;
  JsonOut o(text);
  bool first = true;
  auto next = [&] {
    if (!first) o.raw(",");
    first = false;
  };
  auto meta = [&](int pid, int tid, const char* name, const char* key, auto value) {
    next();
    o.raw("{\"ph\":\"M\",\"name\":\"").raw(name).raw("\",\"pid\":").num(static_cast<long long>(pid));
    o.raw(",\"tid\":").num(static_cast<long long>(tid)).raw(",\"args\":{\"").raw(key).raw("\":");
    if constexpr (std::is_same_v<decltype(value), std::string>)
      o.str(value);
    else
      o.num(static_cast<long long>(value));
    o.raw("}}");
  };
  o.raw("{\"traceEvents\":[");
  const uint64_t from_ns = req.end_ns > static_cast<uint64_t>(req.seconds * 1e9)
                               ? req.end_ns - static_cast<uint64_t>(req.seconds * 1e9)
                               : 0;
  // Timestamps in µs from the start of the trace: small numbers, exact in a double.
  auto us = [&](uint64_t ns) { return static_cast<double>(static_cast<int64_t>(ns - from_ns)) / 1e3; };
  size_t left_out = 0;
  for (const auto& tr : ranks) {
    const int pid = tr.pid;
    left_out += tr.left_out;
    meta(pid, 0, "process_name", "name", process_name(pid, identities));
    meta(pid, 0, "process_sort_index", "sort_index", sort_key(pid, identities));
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
      meta(pid, tid, "thread_name", "name", name);
      meta(pid, tid, "thread_sort_index", "sort_index", tid);
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
        next();
        o.raw("{\"ph\":\"X\",\"name\":").str(s->name).raw(",\"cat\":").str(s->category);
        o.raw(",\"pid\":").num(static_cast<long long>(pid)).raw(",\"tid\":").num(static_cast<long long>(tid));
        o.raw(",\"ts\":").num(us(start)).raw(",\"dur\":").num(static_cast<double>(end - start) / 1e3);
        o.raw(",\"args\":{");
        bool first_arg = true;
        for (const auto& [k, v] : s->args) {
          if (!first_arg) o.raw(",");
          first_arg = false;
          o.str(k).raw(":").str(v);
        }
        o.raw("}}");
      }
      ++tid;
    }
  }
  // Detected events in the window, as global instant markers.
  const double from_unix = req.end_unix - req.seconds;
  for (const auto& ev : events) {
    if (ev.time < from_unix || ev.time > req.end_unix) continue;
    next();
    o.raw("{\"ph\":\"i\",\"s\":\"g\",\"name\":")
        .str(label_of(ev.kind) + (ev.rank >= 0 ? " rank " + std::to_string(ev.rank) : ""));
    o.raw(",\"cat\":\"event\",\"pid\":0,\"tid\":0,\"ts\":").num((ev.time - from_unix) * 1e6);
    o.raw(",\"args\":{\"summary\":").str(ev.summary).raw("}}");
  }
  // Capped: the oldest spans of some ranks are left out (NodeTimeline::trace).
  o.raw("],\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"argus-agent\",\"seconds\":").num(req.seconds);
  o.raw(",\"capped\":").raw(left_out ? "true" : "false");
  o.raw(",\"spans_left_out\":").num(static_cast<long long>(left_out)).raw("}}");
  return text;
}

json trace_json(const std::vector<TraceRank>& ranks, const std::vector<RankSnapshot>& identities,
                const std::vector<DetectedEvent>& events, const TraceRequest& req) {
  return json::parse(trace_json_text(ranks, identities, events, req));
}

}  // namespace argus
