// Stragglers in jobs laid out as people train them: tensor parallel groups
// inside data parallel ones, gradient accumulation, both NCCL semantics, and
// per-rank compute that varies from step to step. Each case injects one fault
// into the replay (tests/unit/layout_replay.h) and asserts the rank it
// injected, alone, with a reason of the right kind; healthy jobs name nobody.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "tests/unit/layout_replay.h"
#include "userspace/detect/straggler_detector.h"

namespace argus {
namespace {

using detect_testutil::LayoutReplay;

enum class Fault { kHostSlow, kGpuSlowSyncFirst, kCpuStarved };

struct LayoutCase {
  int tp;
  int accum;
  bool blocking;
  double jitter;
  Fault fault;
};

std::string name_of(const testing::TestParamInfo<LayoutCase>& i) {
  const auto& c = i.param;
  const char* fault = c.fault == Fault::kHostSlow ? "host" : c.fault == Fault::kGpuSlowSyncFirst ? "gpu_sync" : "cpu";
  return "tp" + std::to_string(c.tp) + "_accum" + std::to_string(c.accum) + (c.blocking ? "_blocking" : "_async") +
         "_jitter" + std::to_string(static_cast<int>(c.jitter * 100)) + "_" + fault;
}

class LayoutStragglers : public testing::TestWithParam<LayoutCase> {};

TEST_P(LayoutStragglers, NamesTheInjectedRankAloneWithItsKindOfReason) {
  const LayoutCase c = GetParam();
  LayoutReplay job;
  job.tp = c.tp;
  job.accum = c.accum;
  job.blocking = c.blocking;
  job.jitter = c.jitter;
  constexpr int kSlow = 5;
  std::set<StragglerReason> right;
  switch (c.fault) {
    case Fault::kHostSlow:
      job.host[kSlow] = 1.6;
      right = {StragglerReason::kHost};
      break;
    case Fault::kGpuSlowSyncFirst:  // loss.item() before the collectives: its host waits for its slow GPU
      job.gpu[kSlow] = 2.0;
      job.sync_before_coll = true;
      job.with_gpu_layer = true;
      right = {StragglerReason::kGpu, StragglerReason::kSync};
      break;
    case Fault::kCpuStarved:  // a higher-priority spinner shares its CPU: runnable, not running
      job.runqueue_ms[kSlow] = 40;
      job.with_kernel = true;
      right = {StragglerReason::kCpuContention};
      break;
  }
  job.join();
  StragglerDetector d(StragglerOptions{}, 10);
  const auto events = job.run(d, 10);
  std::set<int> named;
  for (const auto& ev : events) named.insert(ev.rank);
  EXPECT_EQ(named, std::set<int>{kSlow});
  for (const auto& ev : events)
    EXPECT_TRUE(right.count(d.state(job.pid(ev.rank)).reason)) << ev.summary;
  for (int r = 0; r < job.ranks; ++r)
    EXPECT_EQ(d.state(job.pid(r)).straggler, r == kSlow) << "rank " << r;
}

std::vector<LayoutCase> layout_cases() {
  std::vector<LayoutCase> v;
  for (int tp : {1, 2, 4})
    for (int accum : {1, 4})
      for (bool blocking : {false, true})
        for (double jitter : {0.0, 0.15})
          for (Fault f : {Fault::kHostSlow, Fault::kGpuSlowSyncFirst, Fault::kCpuStarved})
            v.push_back({tp, accum, blocking, jitter, f});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Layouts, LayoutStragglers, testing::ValuesIn(layout_cases()), name_of);

// Healthy jobs whose ranks' compute varies independently from step to step, as
// sequence lengths make it: some rank is always last, never the same one.
class HealthyJitter : public testing::TestWithParam<std::tuple<int, bool, double>> {};

TEST_P(HealthyJitter, NamesNobodyInTenMinutes) {
  const auto [tp, blocking, jitter] = GetParam();
  LayoutReplay job;
  job.tp = tp;
  job.blocking = blocking;
  job.jitter = jitter;
  job.seed = 11;
  job.join();
  StragglerDetector d(StragglerOptions{}, 10);
  // 6,000 steps of 100 ms, evaluated every second.
  const auto events = job.run(d, 600);
  for (const auto& ev : events) ADD_FAILURE() << ev.summary;
}

INSTANTIATE_TEST_SUITE_P(Layouts, HealthyJitter,
                         testing::Combine(testing::Values(1, 2), testing::Bool(), testing::Values(0.3, 0.4)));

// Half the job slow on its own hosts (a slow node: ranks 0-3, TP inside it):
// each of its ranks is late on its DP group and waits less than its peers, so
// each is named. With TP 4 its ranks meet at every layer, and the one last at
// each tensor-parallel call (here rank 2, also short of CPU) has the shortest
// NCCL kernels of the late ranks: the GPU layer must not make the others its
// victims, since their own hosts are busy too (it did, and one rank of four
// was named).
class HalfANodeSlow : public testing::TestWithParam<std::tuple<int, bool, bool>> {};

TEST_P(HalfANodeSlow, IsNamedRankByRank) {
  const auto [tp, gpu_layer, blocking] = GetParam();
  LayoutReplay job;
  job.tp = tp;
  job.jitter = 0.1;
  job.blocking = blocking;
  job.with_gpu_layer = gpu_layer;
  for (int r : {0, 1, 2, 3}) job.host[r] = 1.5;
  job.host[2] = 1.65;
  job.join();
  StragglerDetector d(StragglerOptions{}, 10);
  std::set<int> named;
  for (const auto& ev : job.run(d, 10)) named.insert(ev.rank);
  EXPECT_EQ(named, (std::set<int>{0, 1, 2, 3}));
}

INSTANTIATE_TEST_SUITE_P(Layouts, HalfANodeSlow, testing::Combine(testing::Values(2, 4), testing::Bool(), testing::Bool()),
                         [](const auto& i) {
                           return "tp" + std::to_string(std::get<0>(i.param)) +
                                  (std::get<1>(i.param) ? "_gpu_layer" : "") +
                                  (std::get<2>(i.param) ? "_blocking" : "_async");
                         });

TEST(LayoutStragglers, ATwoRankGroupHasAStragglerToo) {
  LayoutReplay job;
  job.ranks = 2;
  job.tp = 2;
  job.jitter = 0.15;
  job.host[1] = 1.4;
  job.join();
  StragglerDetector d(StragglerOptions{}, 10);
  std::set<int> named;
  for (const auto& ev : job.run(d, 10)) named.insert(ev.rank);
  EXPECT_EQ(named, std::set<int>{1});
}

// Its TP peer waits for it (blocking: in the call, then late on its own DP
// group): the event names the straggler, and the peer as one that waits for it.
TEST(LayoutStragglers, TheVictimIsNamedAsWaitingNotAsTheStraggler) {
  LayoutReplay job;
  job.tp = 2;
  job.blocking = true;
  job.host[5] = 1.6;
  job.join();
  StragglerDetector d(StragglerOptions{}, 10);
  const auto events = job.run(d, 10);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].rank, 5);
  bool peer_waits = false;
  for (const auto& w : events[0].evidence.at("waited_for_by")) peer_waits |= w.at("rank") == 4;
  EXPECT_TRUE(peer_waits) << events[0].evidence.dump();
  EXPECT_NE(events[0].summary.find("rank 4 waits for it"), std::string::npos) << events[0].summary;
}

// A slow GPU behind a loss.item(), without the GPU layer: its tensor-parallel
// peers' GPUs wait for it in every TP all-reduce, so their synchronize before
// the DP all-reduce lasts as long as its own, and they are late on their own DP
// groups just as it is. The hosts' times cannot tell them apart; it is named,
// and a peer named with it counts the slow rank among those late alike.
TEST(LayoutStragglers, ASlowGpusTensorPeersLateAlikeSayItWithoutTheGpuLayer) {
  for (int tp : {2, 4})
    for (bool blocking : {false, true}) {
      SCOPED_TRACE("tp " + std::to_string(tp) + (blocking ? " blocking" : " async"));
      LayoutReplay job;
      job.tp = tp;
      job.blocking = blocking;
      job.jitter = 0.1;
      job.gpu[5] = 2.5;
      job.sync_before_coll = true;
      job.join();
      StragglerDetector d(StragglerOptions{}, 10);
      const auto events = job.run(d, 10);
      std::set<int> named;
      for (const auto& ev : events) named.insert(ev.rank);
      EXPECT_TRUE(named.count(5));
      for (const auto& ev : events) {
        EXPECT_EQ(ev.rank / tp, 5 / tp) << ev.summary;  // the slow rank or a TP peer of it
        EXPECT_EQ(ev.evidence.at("reason"), "sync") << ev.summary;
        if (ev.rank == 5) continue;
        const auto alike = ev.evidence.at("late_alike_ranks").get<std::vector<int>>();
        EXPECT_NE(std::find(alike.begin(), alike.end(), 5), alike.end()) << ev.evidence.dump();
        EXPECT_NE(ev.summary.find("or that of rank "), std::string::npos) << ev.summary;
      }
    }
}

// Steps from 2 ms to a minute: the margin is a share of the step, not milliseconds.
TEST(LayoutStragglers, ShortAndLongStepsAlike) {
  for (double step_ms : {2.0, 60'000.0}) {
    SCOPED_TRACE(step_ms);
    LayoutReplay job;
    job.tp = 2;
    job.step_ms = step_ms;
    job.jitter = 0.1;
    job.host[3] = 1.5;
    job.tracker = CollectiveTracker(TrackerOptions{.window_seconds = step_ms * 30 / 1000});
    job.join();
    StragglerDetector d(StragglerOptions{}, step_ms * 30 / 1000);
    std::set<int> named;
    for (const auto& ev : job.run(d, 10)) named.insert(ev.rank);
    EXPECT_EQ(named, std::set<int>{3});
  }
}

}  // namespace
}  // namespace argus
