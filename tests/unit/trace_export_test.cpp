// Chrome trace export: valid JSON, one process per rank, tracks well nested.
#include "exporters/trace_export.h"
#include "userspace/trace/node_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>

namespace argus {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kEnd = 5'000'000 * kMs;

argus_gpu_rec kernel(uint64_t start_ms_before_end, uint64_t dur_ms, uint32_t name, uint8_t flags, uint32_t stream) {
  argus_gpu_rec r{};
  r.start_ns = kEnd - start_ms_before_end * kMs;
  r.end_ns = r.start_ns + dur_ms * kMs;
  r.name_id = name;
  r.stream_id = stream;
  r.kind = ARGUS_GPU_KERNEL;
  r.flags = flags;
  return r;
}

void fill_sample(NodeTimeline& t) {
  for (int pid : {41, 42}) {
    t.on_gpu_name(pid, 1, "sim_gemm_fwd");
    t.on_gpu_name(pid, 2, "ncclDevKernel_SendRecv");
    std::vector<argus_gpu_rec> recs = {
        kernel(900, 50, 1, 0, 7), kernel(840, 10, 2, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P, 7),
        kernel(835, 30, 1, 0, 7),  // partly overlaps the previous one: clipped on export
        kernel(700, 5, 1, 0, 9)};
    t.on_gpu_batch(pid, recs, 0, 0.1);
    t.on_call(pid, true, "all_reduce", "c0ffee", kEnd - 850 * kMs, kEnd - 840 * kMs, 0);
    t.on_call(pid, false, "cuStreamSynchronize", "", kEnd - 830 * kMs, kEnd - 800 * kMs, 0);
  }
}

TEST(TraceExport, ChromeTraceWithRanksTracksAndWellNestedSpans) {
  NodeTimeline t;
  fill_sample(t);
  std::vector<RankSnapshot> ids(2);
  ids[0].pid = 41;
  ids[0].job_id = "job-a";
  ids[0].rank = 1;
  ids[1].pid = 42;
  ids[1].job_id = "job-a";
  ids[1].rank = 0;
  TraceRequest req{kEnd, 2000.0, 10};
  DetectedEvent ev;
  ev.time = 1995.0;
  ev.kind = EventKind::kStraggler;
  ev.rank = 1;
  ev.summary = "rank 1 is slow";
  const auto doc = trace_json(t.trace(kEnd - 10'000 * kMs, kEnd), ids, {ev}, req);
  // A real parser reads it back.
  const auto text = doc.dump();
  const auto parsed = nlohmann::json::parse(text);
  ASSERT_TRUE(parsed["traceEvents"].is_array());
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> tracks;
  std::map<std::string, int> names;
  bool has_bubble = false, has_event = false;
  for (const auto& e : parsed["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "process_name") names[e["args"]["name"]] = e["pid"];
    if (ph == "i") has_event = e["name"] == "straggler rank 1";
    if (ph != "X") continue;
    EXPECT_GE(e["dur"].get<double>(), 0);
    EXPECT_GE(e["ts"].get<double>(), 0);
    if (e["name"] == "pipeline bubble") has_bubble = true;
    tracks[{e["pid"], e["tid"]}].push_back({e["ts"], e["ts"].get<double>() + e["dur"].get<double>()});
  }
  EXPECT_EQ(names.count("rank 1 (job job-a, pid 41)"), 1u);
  EXPECT_EQ(names.count("rank 0 (job job-a, pid 42)"), 1u);
  EXPECT_TRUE(has_bubble);
  EXPECT_TRUE(has_event);
  // Per track: every two spans are disjoint or nested, never partly overlapping.
  size_t spans = 0;
  for (auto& [key, v] : tracks) {
    for (size_t i = 0; i < v.size(); ++i)
      for (size_t j = 0; j < v.size(); ++j) {
        if (i == j) continue;
        const auto& a = v[i];
        const auto& b = v[j];
        const bool disjoint = a.second <= b.first + 1e-9 || b.second <= a.first + 1e-9;
        const bool nested = (a.first >= b.first && a.second <= b.second) || (b.first >= a.first && b.second <= a.second);
        EXPECT_TRUE(disjoint || nested) << key.first << "/" << key.second;
      }
    spans += v.size();
  }
  // Per rank: 4 GPU spans, 1 collective, 1 sync, idle gaps (3 after clipping the overlap).
  EXPECT_GE(spans, 2u * 6);
}

// BPF sends a collective's return only when it failed or lasted ARGUS_SPAN_MIN_NS:
// its entry draws the call, a return event completes that same span (matched
// by its start), and a return whose entry was lost still shows.
TEST(TraceExport, CollectiveEntryDrawsTheCallAndItsReturnCompletesIt) {
  NodeTimeline t;
  const uint64_t quick = kEnd - 900 * kMs, slow = kEnd - 800 * kMs, orphan = kEnd - 700 * kMs;
  t.on_collective_call(41, "all_reduce", "c0ffee", quick);
  t.on_collective_call(41, "all_reduce", "c0ffee", slow);
  t.on_call(41, false, "cuStreamSynchronize", "", slow + kMs, slow + 2 * kMs, 0);  // between entry and return
  t.on_call(41, true, "all_reduce", "c0ffee", slow, slow + 5 * kMs, 3);
  t.on_call(41, true, "broadcast", "c0ffee", orphan, orphan + kMs, 0);
  const auto ranks = t.trace(kEnd - 10'000 * kMs, kEnd);
  ASSERT_EQ(ranks.size(), 1u);
  std::map<uint64_t, TraceSpan> calls;
  for (const auto& s : ranks[0].spans)
    if (s.category == "collective") calls[s.start_ns] = s;
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[quick].end_ns, quick);
  EXPECT_EQ(calls[quick].args.at("comm"), "c0ffee");
  EXPECT_EQ(calls[quick].args.at("return"), "within 50 us, or not yet");
  EXPECT_EQ(calls[slow].end_ns, slow + 5 * kMs);
  EXPECT_EQ(calls[slow].args.at("result"), "3");
  EXPECT_EQ(calls[slow].args.count("return"), 0u);
  EXPECT_EQ(calls[orphan].name, "broadcast");
  EXPECT_EQ(calls[orphan].end_ns, orphan + kMs);
}

TEST(TraceExport, SecondsParameterIsChecked) {
  EXPECT_TRUE(parse_trace_seconds("", false).ok);
  EXPECT_DOUBLE_EQ(parse_trace_seconds("", false).seconds, 10);
  EXPECT_DOUBLE_EQ(parse_trace_seconds("2.5", true).seconds, 2.5);
  EXPECT_TRUE(parse_trace_seconds("60", true).ok);
  for (const char* bad : {"", "0", "-1", "61", "301", "abc", "5s", "nan", "inf"})
    EXPECT_FALSE(parse_trace_seconds(bad, true).ok) << bad;
}

// An answer holds at most max_trace_spans, shared by the ranks, each keeping its
// newest; the answer says it was capped and how many spans it left out.
TEST(TraceExport, AnswersAreCappedKeepTheNewestAndSaySo) {
  AgentCounters caps;
  NodeTimelineOptions o;
  o.max_trace_spans = 20;
  o.caps = &caps;
  NodeTimeline t(o);
  for (int pid : {41, 42}) {
    t.on_gpu_name(pid, 1, "k");
    std::vector<argus_gpu_rec> recs;
    for (uint64_t i = 0; i < 30; ++i) recs.push_back(kernel(3000 - i * 10, 5, 1, 0, 7));  // 5 ms every 10 ms
    t.on_gpu_batch(pid, recs, 0, 1.0);
    for (uint64_t i = 0; i < 5; ++i)
      t.on_call(pid, true, "all_reduce", "c", kEnd - (2000 - i * 100) * kMs, kEnd - (1999 - i * 100) * kMs, 0);
  }
  const auto ranks = t.trace(kEnd - 10'000 * kMs, kEnd);
  ASSERT_EQ(ranks.size(), 2u);
  size_t left_out = 0;
  for (const auto& r : ranks) {
    // 30 kernels, 29 idle gaps, 5 calls: 64 spans, 10 kept.
    EXPECT_EQ(r.spans.size(), 10u);
    EXPECT_EQ(r.left_out, 54u);
    left_out += r.left_out;
    uint64_t oldest_end = UINT64_MAX;
    for (const auto& sp : r.spans) oldest_end = std::min(oldest_end, sp.end_ns);
    // The newest by end: the 5 calls (1999..1599 ms before the end), then the
    // newest GPU spans (kernels and gaps alternate, 5 ms each, the last ending 2705 ms before).
    EXPECT_GE(oldest_end, kEnd - 2755 * kMs);
  }
  EXPECT_EQ(caps.get(Cap::kTraceAnswerSpans), left_out);
  TraceRequest req{kEnd, 2000.0, 10};
  const auto doc = trace_json(ranks, {}, {}, req);
  EXPECT_EQ(doc["otherData"]["capped"], true);
  EXPECT_EQ(doc["otherData"]["spans_left_out"], left_out);
  // Uncapped: says so too.
  NodeTimeline small;
  fill_sample(small);
  const auto full = trace_json(small.trace(kEnd - 10'000 * kMs, kEnd), {}, {}, req);
  EXPECT_EQ(full["otherData"]["capped"], false);
  EXPECT_EQ(full["otherData"]["spans_left_out"], 0);
}

// The answer is written as text straight from the spans: names from outside
// (kernel names, labels) are escaped, bad UTF-8 replaced, and it parses back.
TEST(TraceExport, TextEscapesNamesAndParsesBack) {
  NodeTimeline t;
  t.on_gpu_name(7, 1, std::string("bad\"quote\\ \x01 \xff\xfe utf8 \xc3\xa9"));
  std::vector<argus_gpu_rec> recs = {kernel(100, 5, 1, 0, 3)};
  t.on_gpu_batch(7, recs, 0, 0);
  TraceRequest req{kEnd, 2000.0, 10};
  const std::string text = trace_json_text(t.trace(kEnd - 10'000 * kMs, kEnd), {}, {}, req);
  const auto doc = nlohmann::json::parse(text);
  bool found = false;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") {
      const std::string name = e["name"];
      EXPECT_EQ(name.rfind("bad\"quote\\ \x01 ", 0), 0u) << name;
      EXPECT_NE(name.find("utf8 \xc3\xa9"), std::string::npos);
      found = true;
    }
  EXPECT_TRUE(found);
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
}

}  // namespace
}  // namespace argus
