// SeqAligner on recorded streams: ranks whose probes went live at different
// calls are numbered alike, whatever the job's shape.
#include "userspace/comms/seq_aligner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

namespace argus {
namespace {

constexpr uint64_t kMs = 1'000'000;

struct Rank {
  int pid;
  uint64_t missed;  // calls made before its probes went live (its BPF count starts after them)
  uint64_t lag_ns;  // how late it calls, every call
  bool anchored = false;
};

struct Arrival {
  uint64_t ts;
  int pid;
  uint64_t truth;  // the call's number on the communicator, from 1
  uint64_t own;    // its number in the rank's own (BPF) count
  CallSignature sig;
};

// `steps` steps of `step_ns`; each step's calls (signatures from `calls_of`)
// spaced `spacing_ns` apart from 60% of the step, every rank `lag_ns` late. Sorted by time.
template <class CallsOf>
std::vector<Arrival> job(const std::vector<Rank>& ranks, int steps, uint64_t step_ns, CallsOf calls_of,
                         uint64_t spacing_ns = 100'000) {
  std::vector<Arrival> out;
  for (const auto& r : ranks) {
    uint64_t truth = 0;
    for (int s = 0; s < steps; ++s) {
      const auto calls = calls_of(s);
      for (size_t i = 0; i < calls.size(); ++i) {
        ++truth;
        if (truth <= r.missed) continue;
        const uint64_t ts = 1000 * kMs + s * step_ns + step_ns * 6 / 10 + i * spacing_ns + r.lag_ns;
        out.push_back({ts, r.pid, truth, truth - r.missed, calls[i]});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const Arrival& a, const Arrival& b) { return a.ts < b.ts; });
  return out;
}

struct Outcome {
  std::map<int, std::set<int64_t>> offsets;  // pid -> (numbered seq - truth) seen
  std::map<int, size_t> passed;
};

Outcome feed(SeqAligner& al, const std::vector<Rank>& ranks, const std::vector<Arrival>& arrivals) {
  std::map<int, bool> anchored;
  for (const auto& r : ranks) anchored[r.pid] = r.anchored;
  Outcome o;
  for (const auto& a : arrivals) {
    auto got = al.on_arrival("job:j", a.pid, anchored[a.pid], a.own, a.ts, a.sig);
    if (!got) continue;
    EXPECT_EQ(got->ts_ns, a.ts);
    o.offsets[a.pid].insert(static_cast<int64_t>(got->seq) - static_cast<int64_t>(a.truth));
    ++o.passed[a.pid];
  }
  return o;
}

// Every rank numbered, and alike: one offset from the truth for all of them.
void expect_alike(const Outcome& o, const std::vector<Rank>& ranks, std::optional<int64_t> exact = std::nullopt) {
  std::set<int64_t> all;
  for (const auto& r : ranks) {
    ASSERT_TRUE(o.offsets.count(r.pid)) << "pid " << r.pid << " never numbered";
    EXPECT_EQ(o.offsets.at(r.pid).size(), 1u) << "pid " << r.pid << " numbered inconsistently";
    all.insert(o.offsets.at(r.pid).begin(), o.offsets.at(r.pid).end());
  }
  EXPECT_EQ(all.size(), 1u) << "ranks numbered apart";
  if (exact && !all.empty()) {
    EXPECT_EQ(*all.begin(), *exact);
  }
}

// The sim's shape: several collectives a step whose sizes change from step to step.
std::vector<CallSignature> varied(int s) {
  return {{0, 4096u * (4 + s % 4)}, {0, 2048u * (3 + s % 3)}, {1, 1024u * (1 + s % 2)}, {2, 512u * (2 + s % 2)}};
}
// DDP's shape: the same buckets every step.
std::vector<CallSignature> same_buckets(int) { return {{0, 25u << 20}, {0, 25u << 20}, {0, 9u << 20}}; }

TEST(SeqAligner, AnchoredRanksPassAtOnceWithTheirOwnCount) {
  SeqAligner al;
  std::vector<Rank> ranks = {{10, 0, 0, true}, {11, 0, 2 * kMs, true}};
  auto o = feed(al, ranks, job(ranks, 5, 20 * kMs, varied));
  expect_alike(o, ranks, 0);
  EXPECT_EQ(o.passed[10], 20u);
  EXPECT_EQ(o.passed[11], 20u);
  EXPECT_EQ(al.settled(Numbering::kAnchored), 2u);
  EXPECT_EQ(al.held_dropped(), 0u);
}

// The agent (re)started mid-job: every rank's count began at a different call.
TEST(SeqAligner, RanksAttachedMidJobAreNumberedAlike) {
  for (auto shape : {&varied, &same_buckets}) {
    SeqAligner al;
    std::vector<Rank> ranks = {{1, 40, 0}, {2, 41, 1 * kMs}, {3, 47, 6 * kMs}, {4, 44, 0}, {5, 40, 3 * kMs}};
    auto o = feed(al, ranks, job(ranks, 200, 16 * kMs, shape));
    expect_alike(o, ranks);
    EXPECT_EQ(al.settled(Numbering::kReference), 1u);
    EXPECT_EQ(al.settled(Numbering::kMatched), 4u);
    EXPECT_EQ(al.settled(Numbering::kTimeOnly), 0u);
    EXPECT_GT(al.held_dropped(), 0u);
  }
}

// Against an anchored rank a late one's shift is what it made before its probes went live.
TEST(SeqAligner, AShiftAgainstAnAnchoredRankIsTheCallsMissed) {
  SeqAligner al;
  std::vector<Rank> ranks = {{1, 0, 0, true}, {2, 13, 4 * kMs}, {3, 9, 0}};
  auto o = feed(al, ranks, job(ranks, 200, 16 * kMs, varied));
  expect_alike(o, ranks, 0);
  EXPECT_EQ(al.shift("job:j", 2), 13);
  EXPECT_EQ(al.shift("job:j", 3), 9);
  EXPECT_EQ(al.settled(Numbering::kMatched), 2u);
}

// A straggler 70% of a step behind: the nearest call in time is the next
// step's, but only the right shift makes the sizes agree.
TEST(SeqAligner, SignaturesOverruleTheNearestCallInTime) {
  SeqAligner al;
  std::vector<Rank> ranks = {{1, 0, 0, true}, {2, 8, 14 * kMs}};
  auto calls = [](int s) { return std::vector<CallSignature>{{0, 1000u + static_cast<uint64_t>(s % 7)}}; };
  auto o = feed(al, ranks, job(ranks, 300, 20 * kMs, calls));
  expect_alike(o, ranks, 0);
  EXPECT_EQ(al.shift("job:j", 2), 8);
}

// With the same signature every step, time decides: a rank less than half a step late.
TEST(SeqAligner, IdenticalStepsAreMatchedByTime) {
  SeqAligner al;
  std::vector<Rank> ranks = {{1, 0, 0, true}, {2, 5, 7 * kMs}, {3, 6, 0}};
  auto o = feed(al, ranks, job(ranks, 300, 20 * kMs, same_buckets));
  expect_alike(o, ranks, 0);
  EXPECT_EQ(al.shift("job:j", 2), 5);
  EXPECT_EQ(al.shift("job:j", 3), 6);
}

// DDP with every bucket alike (4 a step, 2 ms apart through the backward of a
// 20 ms step), ranks up to 8 ms late: the nearest calls in time are other
// buckets of the same step, but only the right shift keeps each rank's lag
// the same from call to call (a shift by a bucket or two pairs some calls
// across the gap between two steps' bursts).
TEST(SeqAligner, IdenticalBucketsAreNumberedByAConsistentLag) {
  auto four_alike = [](int) { return std::vector<CallSignature>(4, CallSignature{0, 25u << 20}); };
  for (uint64_t lag : {3 * kMs, 5 * kMs, 8 * kMs}) {
    SCOPED_TRACE(lag);
    SeqAligner al;
    std::vector<Rank> ranks = {{1, 0, 0, true}, {2, 5, lag}, {3, 6, 0}, {4, 9, lag / 2}};
    auto o = feed(al, ranks, job(ranks, 300, 20 * kMs, four_alike, 2 * kMs));
    expect_alike(o, ranks, 0);
    EXPECT_EQ(al.shift("job:j", 2), 5);
    EXPECT_EQ(al.shift("job:j", 3), 6);
    EXPECT_EQ(al.shift("job:j", 4), 9);
  }
}

// Ranks whose calls never agree (not one job's communicator, a bad reading):
// after 10 s they are numbered by time only, counted as such, never held forever.
TEST(SeqAligner, DisagreeingSignaturesFallBackToTimeAfterTenSeconds) {
  SeqAligner al;
  const uint64_t step = 20 * kMs;
  uint64_t passed = 0;
  for (int s = 0; s < 800; ++s) {
    const uint64_t ts = 1000 * kMs + s * step;
    al.on_arrival("c", 1, true, s + 1, ts, {0, 64});
    if (al.on_arrival("c", 2, false, s + 1, ts + kMs, {0, 128})) ++passed;
  }
  EXPECT_EQ(al.settled(Numbering::kTimeOnly), 1u);
  EXPECT_FALSE(al.holding("c", 2));
  // Held 16 calls, then 10 s (500 steps) more: the rest passed.
  EXPECT_EQ(passed, 800u - SeqAligner::kProbeCalls - 500u + 1);
}

// The reference is the first late rank to make kProbeCalls calls; one that
// lags it (by 3/4 of a step here) can have begun counting a call earlier. Its
// calls before the reference's first get no number (never seq 0, which is p2p).
TEST(SeqAligner, ARankThatBeganCountingBeforeTheReferenceIsNumberedFromIt) {
  SeqAligner al;
  std::vector<Rank> ranks = {{1, 10, 0}, {2, 9, 15 * kMs}};
  auto o = feed(al, ranks, job(ranks, 100, 20 * kMs, varied));
  expect_alike(o, ranks, -10);  // numbered from the reference's first call
  EXPECT_EQ(al.shift("job:j", 1), 0);
  EXPECT_EQ(al.shift("job:j", 2), -1);
  EXPECT_EQ(al.settled(Numbering::kReference), 1u);
}

// Two communicators of one process that the agent cannot tell apart (no init
// seen, both named for the job) interleave two counts: no crash, no hold
// forever, and the reference's history stays in seq order.
TEST(SeqAligner, TwoCountsUnderOneNameAreBoundedNotTrusted) {
  SeqAligner al;
  uint64_t passed = 0;
  for (uint64_t i = 1; i <= 1500; ++i) {
    const uint64_t ts = 1000 * kMs + i * 10 * kMs;
    al.on_arrival("c", 1, false, i, ts, {0, 8});         // the reference
    al.on_arrival("c", 1, false, i, ts + kMs, {0, 16});  // its second count
    if (al.on_arrival("c", 2, false, (i + 1) / 2, ts + 2 * kMs, {0, 8})) ++passed;
  }
  EXPECT_EQ(al.settled(Numbering::kReference), 1u);
  EXPECT_FALSE(al.holding("c", 2));
  EXPECT_GT(passed, 0u);
}

TEST(SeqAligner, AProcessThatEndsWhileHeldIsForgotten) {
  SeqAligner al;
  for (uint64_t s = 1; s <= 5; ++s) EXPECT_FALSE(al.on_arrival("c", 7, false, s, s * kMs, {0, 1}).has_value());
  EXPECT_TRUE(al.holding("c", 7));
  al.forget(7);
  EXPECT_FALSE(al.holding("c", 7));
  EXPECT_EQ(al.held_dropped(), 5u);
  EXPECT_FALSE(al.shift("c", 7).has_value());
}

}  // namespace
}  // namespace argus
