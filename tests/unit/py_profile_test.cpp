// The sampled Python profile: decoding the sampler's records, folding, the
// retention and count caps, and the straggler's frames against its peers'.
#include <gtest/gtest.h>

#include <cstring>

#include "userspace/probes/bpf_loader.h"
#include "userspace/python/py_profile.h"

namespace argus::python {
namespace {

PyFrame fr(const std::string& q, int line, const std::string& file = "job.py") { return {q, q, file, line}; }

// Innermost first, as the sampler sends them.
std::vector<PyFrame> stack_of(std::initializer_list<PyFrame> root_first) {
  std::vector<PyFrame> v(root_first);
  return {v.rbegin(), v.rend()};
}

constexpr uint64_t kSec = 1'000'000'000;

TEST(PyProfile, FoldsRootFirstWithCountsSortedByStack) {
  ProfileStore store;
  const auto inner = stack_of({fr("<module>", 30), fr("outer", 5), fr("middle", 9), fr("inner", 14)});
  const auto other = stack_of({fr("<module>", 30), fr("outer", 6)});
  for (int i = 0; i < 3; ++i) store.add(7, 10 * kSec + i, inner, false);
  store.add(7, 11 * kSec, other, false);
  EXPECT_EQ(store.folded(7, 0),
            "<module> (job.py:30);outer (job.py:5);middle (job.py:9);inner (job.py:14) 3\n"
            "<module> (job.py:30);outer (job.py:6) 1\n");
  // Only the samples since the cut-off.
  EXPECT_EQ(store.folded(7, 11 * kSec), "<module> (job.py:30);outer (job.py:6) 1\n");
  EXPECT_EQ(store.folded(8, 0), "");
}

TEST(PyProfile, NewestSampleOfAProcessRootFirst) {
  ProfileStore store;
  EXPECT_FALSE(store.newest(7));
  store.add(7, 10 * kSec, stack_of({fr("<module>", 30), fr("outer", 5)}), false);
  store.add(7, 11 * kSec, stack_of({fr("<module>", 30), fr("alloc", 8)}), false);
  store.add(8, 12 * kSec, stack_of({fr("<module>", 1)}), false);
  auto n = store.newest(7);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->ts_ns, 11 * kSec);
  EXPECT_EQ(n->frames, (std::vector<std::string>{"<module> (job.py:30)", "alloc (job.py:8)"}));
  store.retain({8});
  EXPECT_FALSE(store.newest(7));
}

TEST(PyProfile, LabelsKeepTheFormatsSeparatorsOut) {
  EXPECT_EQ(frame_label(PyFrame{"f", "A.f", "/a;b.py", 3}), "A.f (/a_b.py:3)");
  EXPECT_EQ(frame_label(PyFrame{"f", "", "x.py", 0}), "f (x.py)");  // line unknown
  EXPECT_EQ(function_label(PyFrame{"f", "A.f", "x\n.py", 9}), "A.f (x_.py)");
}

TEST(PyProfile, TruncatedStacksGetAMarkedRoot) {
  ProfileStore store;
  store.add(1, 1, stack_of({fr("deep", 1), fr("deeper", 2)}), true);
  EXPECT_EQ(store.folded(1, 0), "[truncated];deep (job.py:1);deeper (job.py:2) 1\n");
}

TEST(PyProfile, CountCapDropsTheOldestAndCountsIt) {
  AgentCounters caps;
  ProfileStore store(ProfileOptions{.retention_seconds = 300, .max_samples_per_rank = 4, .caps = &caps});
  for (int i = 0; i < 4; ++i) store.add(1, i, stack_of({fr("old", 1)}), false);
  for (int i = 4; i < 7; ++i) store.add(1, i, stack_of({fr("new", 2)}), false);
  EXPECT_EQ(store.folded(1, 0), "new (job.py:2) 3\nold (job.py:1) 1\n");
  EXPECT_EQ(caps.get(Cap::kPythonSamples), 3u);
  EXPECT_STREQ(label_of(Cap::kPythonSamples), "python_samples");
}

TEST(PyProfile, RetentionExpiresOldSamplesAndEmptyRanks) {
  ProfileStore store(ProfileOptions{.retention_seconds = 60, .max_samples_per_rank = 100, .caps = nullptr});
  store.add(1, 10 * kSec, stack_of({fr("a", 1)}), false);
  store.add(1, 50 * kSec, stack_of({fr("b", 1)}), false);
  store.add(2, 10 * kSec, stack_of({fr("c", 1)}), false);
  store.expire(100 * kSec);  // keeps what is newer than 40 s
  EXPECT_EQ(store.folded(1, 0), "b (job.py:1) 1\n");
  EXPECT_FALSE(store.has(2));
  store.retain({});
  EXPECT_FALSE(store.has(1));
}

TEST(PyProfile, InclusiveFunctionCountsCountEachSampleOnce) {
  ProfileStore store;
  // Recursion: f appears twice in one stack but counts once per sample.
  store.add(1, 1, stack_of({fr("main", 1), fr("f", 3), fr("f", 4)}), false);
  store.add(1, 2, stack_of({fr("main", 1), fr("g", 8)}), false);
  std::map<std::string, uint64_t> counts;
  EXPECT_EQ(store.function_counts(1, 0, &counts), 2u);
  EXPECT_EQ(counts["main (job.py)"], 2u);
  EXPECT_EQ(counts["f (job.py)"], 1u);
  EXPECT_EQ(counts["g (job.py)"], 1u);
}

TEST(PyProfile, StragglerFramesAgainstPeers) {
  const std::map<std::string, uint64_t> rank = {{"train (t.py)", 100}, {"DataLoader.__next__ (d.py)", 38},
                                                {"step (t.py)", 60}, {"rare (t.py)", 2}};
  const std::map<std::string, uint64_t> peers = {{"train (t.py)", 300}, {"DataLoader.__next__ (d.py)", 6},
                                                 {"step (t.py)", 290}};
  const auto top = compare_with_peers(rank, 100, peers, 300, 5, 0.05);
  ASSERT_EQ(top.size(), 1u);  // train and step: no more than on the peers; rare: under 5%
  EXPECT_EQ(top[0].frame, "DataLoader.__next__ (d.py)");
  EXPECT_DOUBLE_EQ(top[0].share, 0.38);
  EXPECT_DOUBLE_EQ(top[0].peers_share, 0.02);
  EXPECT_EQ(frame_share_sentence(top[0]), "38% of its samples are in DataLoader.__next__ (d.py), against 2% on its peers");
  EXPECT_TRUE(compare_with_peers(rank, 100, peers, 0).empty());
  EXPECT_TRUE(compare_with_peers(rank, 0, peers, 300).empty());
}

TEST(PyProfile, LargestGapFirstAndTopBound) {
  const std::map<std::string, uint64_t> rank = {{"a", 50}, {"b", 90}, {"c", 30}};
  const std::map<std::string, uint64_t> peers = {{"a", 10}, {"b", 80}};
  const auto top = compare_with_peers(rank, 100, peers, 100, 2, 0.05);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].frame, "a");  // +40
  EXPECT_EQ(top[1].frame, "c");  // +30; b (+10) is cut by top = 2
}

class FakeResolver : public FrameResolver {
 public:
  std::optional<PyFrame> resolve(uint64_t code, uint64_t tag, uint64_t instr) override {
    if (tag != code + 1) return std::nullopt;  // a tag that no longer matches
    return PyFrame{"f" + std::to_string(code), "f" + std::to_string(code), "m.py", static_cast<int>(instr)};
  }
};

std::vector<char> record(uint32_t tgid, uint64_t ts, std::vector<argus_py_sample_frame> frames, uint16_t flags = 0) {
  argus_py_sample s{};
  s.tgid = tgid;
  s.tid = tgid;
  s.ts_ns = ts;
  s.nframes = static_cast<uint16_t>(frames.size());
  s.flags = flags;
  if (!frames.empty()) std::memcpy(s.frames, frames.data(), frames.size() * sizeof(frames[0]));  // data() may be null
  std::vector<char> out(sizeof(s));
  std::memcpy(out.data(), &s, sizeof(s));
  return out;
}

TEST(PyProfile, SamplerDecodesNamesAndCountsWhatItCannot) {
  ProfileStore store;
  PySampler sampler(store);
  sampler.add_process(42, std::make_unique<FakeResolver>());
  auto ok = record(42, 5, {{3, 4, 30}, {1, 2, 10}});  // innermost f3, root f1
  sampler.on_record(ok.data(), ok.size());
  auto stale = record(42, 6, {{3, 99, 30}, {1, 2, 10}}, ARGUS_PY_SAMPLE_TRUNCATED);
  sampler.on_record(stale.data(), stale.size());
  auto stranger = record(43, 7, {{1, 2, 10}});
  sampler.on_record(stranger.data(), stranger.size());
  sampler.on_record(ok.data(), 10);  // short
  auto bad = record(42, 8, {});
  reinterpret_cast<argus_py_sample*>(bad.data())->nframes = ARGUS_PY_SAMPLE_MAX_FRAMES + 1;
  sampler.on_record(bad.data(), bad.size());

  EXPECT_EQ(store.folded(42, 0),
            "[truncated];f1 (m.py:10);[unknown] (?) 1\n"
            "f1 (m.py:10);f3 (m.py:30) 1\n");
  EXPECT_EQ(sampler.stats().samples, 2u);
  EXPECT_EQ(sampler.stats().unresolved_frames, 1u);
  EXPECT_EQ(sampler.stats().truncated, 1u);
  EXPECT_EQ(sampler.stats().unknown_process, 1u);
  EXPECT_EQ(sampler.stats().malformed, 2u);
  sampler.forget(42);
  EXPECT_FALSE(sampler.has_process(42));
}

TEST(PyProfile, StragglerEventCarriesItsFramesAgainstItsPeers) {
  ProfileStore store;
  // Rank 1 (pid 10) spends 4 of 10 samples in the data loader; its peers (pids
  // 20, 30) 1 of 20 all together.
  const auto loader = stack_of({fr("train", 5, "t.py"), fr("DataLoader.__next__", 40, "d.py")});
  const auto step = stack_of({fr("train", 6, "t.py"), fr("step", 9, "t.py")});
  for (int i = 0; i < 4; ++i) store.add(10, 100 + i, loader, false);
  for (int i = 0; i < 6; ++i) store.add(10, 200 + i, step, false);
  store.add(20, 100, loader, false);
  for (int i = 0; i < 9; ++i) store.add(20, 200 + i, step, false);
  for (int i = 0; i < 10; ++i) store.add(30, 200 + i, step, false);
  store.add(10, 1, stack_of({fr("old", 1)}), false);  // before the window: not counted

  DetectedEvent ev;
  ev.summary = "rank 1 of job j: its host is slow";
  add_python_evidence(ev, store, {10}, {20, 30}, 50);
  ASSERT_TRUE(ev.evidence.contains("python_profile")) << ev.evidence.dump();
  const auto& top = ev.evidence["python_profile"];
  ASSERT_GE(top.size(), 1u);
  EXPECT_EQ(top[0]["frame"], "DataLoader.__next__ (d.py)");
  EXPECT_DOUBLE_EQ(top[0]["share"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(top[0]["peers_share"].get<double>(), 0.05);
  EXPECT_EQ(ev.evidence["python_samples"]["rank"], 10);
  EXPECT_EQ(ev.evidence["python_samples"]["peers"], 20);
  EXPECT_EQ(ev.summary,
            "rank 1 of job j: its host is slow; 40% of its samples are in DataLoader.__next__ (d.py), against 5% on "
            "its peers");

  DetectedEvent lonely;  // no peer samples: nothing to compare, nothing added
  add_python_evidence(lonely, store, {10}, {99}, 50);
  EXPECT_FALSE(lonely.evidence.contains("python_profile"));
  EXPECT_TRUE(lonely.summary.empty());
}

TEST(PyProfile, OnlineCpuListParses) {
  EXPECT_EQ(argus::parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(argus::parse_cpu_list("0"), (std::vector<int>{0}));
  EXPECT_TRUE(argus::parse_cpu_list("3-1").empty());
  EXPECT_TRUE(argus::parse_cpu_list("a-b").empty());
  EXPECT_TRUE(argus::parse_cpu_list("").empty());
}

}  // namespace
}  // namespace argus::python
