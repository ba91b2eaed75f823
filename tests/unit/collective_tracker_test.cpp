// The collective tracker on recorded event streams with injected time: each
// rank's arrival lag and step from the collective stream, sequence numbers
// that wrap, and its bounds. Every figure below is exact, none depends on the
// machine.
#include "userspace/comms/collective_tracker.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "tests/unit/detector_test_util.h"

namespace argus {
namespace {

using detect_testutil::kMs;
using detect_testutil::Mode;
using detect_testutil::Replay;

TEST(Detectors, ArrivalLagAndStepFromTheCollectiveStream) {
  Replay r;
  r.host[105] = 1.4;
  r.join();
  for (int i = 0; i < 50; ++i) r.step();
  const auto slow = r.tracker.lag_stats(105, r.now);
  const auto fine = r.tracker.lag_stats(101, r.now);
  EXPECT_NEAR(slow.median_lag_s, 0.040, 1e-9);  // 40 ms behind the earliest, at every step
  EXPECT_DOUBLE_EQ(slow.late_fraction, 1.0);
  EXPECT_DOUBLE_EQ(slow.late_sync_share, 0.0);  // none of it in its own synchronize calls
  EXPECT_DOUBLE_EQ(fine.late_fraction, 0.0);
  EXPECT_NEAR(fine.median_lag_s, 0.0, 1e-9);
  // Step = 140 ms of host compute + 4 ms of collectives + 1 ms.
  EXPECT_NEAR(slow.step_seconds, 0.145, 1e-9);
  EXPECT_NEAR(fine.step_seconds, 0.145, 1e-9);
}

// A healthy job: the ranks spread out only now and then (one host a little
// slow at a few irregular steps). The step is the period of each rank's own
// bursts, not the interval between those rare spread-out collectives, which is
// several steps (an 8-rank sim job read 1.36 s for a 0.107 s step).
TEST(Detectors, TheStepOfAHealthyJobIsNotTheIntervalOfItsRareSpreads) {
  // Asynchronous and blocking collectives, and a host that synchronizes before
  // communicating (its GPU, 60 ms a step, is never the later one here).
  for (const auto& [mode, sync_first] : {std::pair{Mode::Async, false}, {Mode::Blocking, false}, {Mode::Async, true}}) {
    SCOPED_TRACE(std::string(mode == Mode::Async ? "async" : "blocking") + (sync_first ? ", sync first" : ""));
    Replay r;
    r.mode = mode;
    r.sync_before_coll = sync_first;
    r.join();
    const std::set<int> slow_steps = {3, 11, 12, 29, 41, 44, 58};
    for (int i = 0; i < 70; ++i) {
      r.host.clear();
      if (slow_steps.count(i)) r.host[r.pid(i % r.ranks)] = 1.1;
      r.step();
    }
    // A normal step: 100 ms of host compute, 4 ms of collectives, 1 ms.
    for (int rank = 0; rank < r.ranks; ++rank)
      EXPECT_NEAR(r.tracker.lag_stats(r.pid(rank), r.now).step_seconds, 0.105, 0.001) << rank;
  }
}

TEST(Detectors, LagSpentInItsOwnSynchronizeIsSync) {
  Replay r;
  r.gpu[103] = 2.0;  // 120 ms of GPU work on a 100 ms host step
  r.sync_before_coll = true;
  r.join();
  for (int i = 0; i < 30; ++i) r.step();
  const auto slow = r.tracker.lag_stats(103, r.now);
  EXPECT_NEAR(slow.median_lag_s, 0.020, 1e-9);
  EXPECT_DOUBLE_EQ(slow.late_fraction, 1.0);
  EXPECT_NEAR(slow.late_sync_share, 1.0, 0.01);
}

TEST(Detectors, SingleRankCommunicatorHasNoLag) {
  CollectiveTracker t;
  t.add_member("solo", 1, 1);
  for (uint64_t s = 1; s <= 100; ++s) t.on_arrival("solo", 1, s, s * 10 * kMs);
  auto lag = t.lag_stats(1, 1000 * kMs);
  EXPECT_EQ(lag.samples, 0u);
  EXPECT_EQ(t.comms().at(0).newest_seq, 100u);
}

TEST(Detectors, SequenceNumbersThatWrap) {
  CollectiveTracker t;
  t.add_member("w", 1, 2);
  t.add_member("w", 2, 2);
  uint64_t seq = UINT64_MAX - 5;
  uint64_t ts = 1000 * kMs;
  for (int i = 0; i < 12; ++i, ++seq, ts += 10 * kMs) {
    if (seq == 0) ++seq;  // 0 means p2p: BPF never hands it out for a collective
    t.on_arrival("w", 1, seq, ts);
    t.on_arrival("w", 2, seq, ts + 2 * kMs);
    t.update(ts + 3 * kMs);  // as the stats pass: the step the offsets are grouped by
  }
  const auto c = t.comms().at(0);
  EXPECT_LT(c.newest_seq, 10u);  // past the wrap, and still the newest
  auto lag = t.lag_stats(2, ts);
  EXPECT_EQ(lag.samples, 12u);
  EXPECT_NEAR(lag.median_lag_s, 0.002, 1e-9);
}

// The tracker follows at most max_comms communicators and max_samples arrivals
// per rank; what the bounds refuse or drop is counted.
TEST(Detectors, CommunicatorsAndSamplesAreCapped) {
  AgentCounters caps;
  TrackerOptions o;
  o.max_comms = 2;
  o.max_samples = 50;
  o.max_open_seqs = 8;
  o.caps = &caps;
  CollectiveTracker t(o);
  t.add_member("a", 1, 2);
  t.add_member("a", 2, 2);
  t.add_member("b", 1, 2);
  t.add_member("b", 2, 2);
  t.add_member("c", 1, 2);  // a third communicator: refused
  for (uint64_t seq = 1; seq <= 100; ++seq) {
    t.on_arrival("a", 1, seq, seq * kMs);
    t.on_arrival("a", 2, seq, seq * kMs + 1);
    t.on_arrival("c", 1, seq, seq * kMs);  // refused each time
    t.on_arrival("b", 1, seq, seq * kMs);  // its peer never comes: open collectives pile up
  }
  EXPECT_EQ(t.comms().size(), 2u);
  EXPECT_EQ(caps.get(Cap::kCommunicators), 101u);
  EXPECT_EQ(caps.get(Cap::kOpenCollectives), 92u);  // 100 open on "b", 8 kept
  // Pid 1 arrived 200 times (a and b), pid 2 100 times, each with 100 lag samples:
  // 50 of each kept per rank.
  EXPECT_EQ(caps.get(Cap::kCollectiveSamples), 150u + 50 + 50 + 50);
  EXPECT_EQ(t.lag_stats(2, 100 * kMs).samples, 50u);
}

}  // namespace
}  // namespace argus

namespace argus {
namespace {

// A send whose receiver is on another node (or whose ranks are not known
// here) is never paired: counted on argus_agent_p2p_unpaired_total, and never
// left waiting for a receive this node cannot see.
TEST(Detectors, SendsToAnotherNodeAreCountedUnpairedNotLeftPending) {
  AgentCounters counters;
  CollectiveTracker t(TrackerOptions{.window_seconds = 10, .caps = &counters});
  t.add_member("pp", 1, 4, 0);  // ranks 1 and 3 of "pp" are on another node
  t.add_member("pp", 2, 4, 2);
  t.on_p2p("pp", 1, true, 1, 1000);   // to rank 1: elsewhere
  t.on_p2p("pp", 2, false, 3, 2000);  // from rank 3: elsewhere
  t.add_member("x", 5, 2);            // its rank unknown
  t.add_member("x", 6, 2, 1);
  t.on_p2p("x", 5, true, 1, 3000);
  EXPECT_EQ(counters.get(AgentCount::kP2pUnpaired), 3u);
  EXPECT_TRUE(t.p2p().pending().empty());
  t.on_p2p("pp", 1, true, 2, 4000);  // to rank 2: here, and it waits for the receive
  EXPECT_EQ(t.p2p().pending().size(), 1u);
  t.on_p2p("pp", 2, false, 0, 5000);
  EXPECT_TRUE(t.p2p().pending().empty());
  EXPECT_EQ(counters.get(AgentCount::kP2pUnpaired), 3u);
}

}  // namespace
}  // namespace argus
