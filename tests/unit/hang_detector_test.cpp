// The hang detector on recorded collective streams with injected time: a
// collective that stops moving, the rank it waits for and how that rank died,
// and what is not a hang. Every figure below is exact, none depends on the
// machine.
#include "userspace/detect/hang_detector.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/unit/detector_test_util.h"
#include "userspace/comms/collective_tracker.h"

namespace argus {
namespace {

using detect_testutil::kMs;

TEST(Detectors, DifferentWorldSizesAndRestartedRanksDoNotBreakIt) {
  CollectiveTracker t({10, 64, 0.001});
  t.add_member("c", 1, 4);
  t.add_member("c", 2, 8);  // a rank that reports another world size
  EXPECT_EQ(t.comms().at(0).nranks, 8);
  for (uint64_t s = 1; s <= 50; ++s) {
    t.on_arrival("c", 1, s, s * kMs);
    t.on_arrival("c", 2, s, s * kMs);
  }
  // Rank 2 restarts: the old process ends, a new one counts from 1 again.
  t.on_exit(2);
  t.add_member("c", 3, 8);
  for (uint64_t s = 51; s <= 400; ++s) t.on_arrival("c", 1, s, s * kMs);
  for (uint64_t s = 1; s <= 10; ++s) t.on_arrival("c", 3, s, (400 + s) * kMs);
  HangDetector h;
  std::map<int, RankInfoForHang> facts{{1, {"j", 0, false, ExitReason::kNone, 0, 0.01}}, {3, {"j", 1, false, ExitReason::kNone, 0, 0.01}}};
  // The newest collective moves: not hung, whatever the numbers say.
  auto ev = h.evaluate(t.comms(), {}, facts, 500 * kMs, 0);
  EXPECT_TRUE(ev.empty());
  EXPECT_FALSE(h.health().at("c").hung);
  EXPECT_NEAR(h.health().at("c").stalled_seconds, 0.1, 1e-9);  // since #400, 100 ms ago
}

// Four ranks did 99 collectives together; at #100 pids 1 and 2 issue it, pid 3
// never does, pid 4 exits (killed).
struct HangReplay {
  CollectiveTracker t;
  uint64_t t100 = 100 * 100 * kMs;
  std::map<int, RankInfoForHang> facts{{1, {"j", 0, false, ExitReason::kNone, 0, 0.1}},
                                        {2, {"j", 1, false, ExitReason::kNone, 0, 0.1}},
                                        {3, {"j", 2, false, ExitReason::kNone, 0, 0.1}},
                                        {4, {"j", 3, true, ExitReason::kSignal, 9, 0.1}}};
  HangReplay() {
    for (int p = 1; p <= 4; ++p) t.add_member("c", p, 4);
    for (uint64_t s = 1; s <= 99; ++s)
      for (int p = 1; p <= 4; ++p) t.on_arrival("c", p, s, s * 100 * kMs + p);
  }
};

TEST(Detectors, HangSaysHowTheMissingRankDied) {
  HangReplay r;
  r.t.on_arrival("c", 1, 100, r.t100);
  r.t.on_arrival("c", 2, 100, r.t100 + kMs);
  r.t.on_arrival("c", 3, 100, r.t100 + kMs);
  r.t.on_exit(4);
  r.facts[4].exit_summary = "killed by SIGKILL from pid 900 (`kill`)";
  r.facts[4].exit_cause = {{"signal", 9}, {"signal_name", "SIGKILL"}, {"sender", {{"pid", 900}, {"comm", "kill"}}}};
  HangDetector h(HangOptions{10, 5});
  auto ev = h.evaluate(r.t.comms(), {}, r.facts, r.t100 + 10'000 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(h.missing(4));
  EXPECT_EQ(ev[0].rank, 3);
  EXPECT_NE(ev[0].summary.find("rank 3 (it died: killed by SIGKILL from pid 900 (`kill`)) never issued it"),
            std::string::npos)
      << ev[0].summary;
  const auto& missing = ev[0].evidence["missing"];
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0]["exited"], true);
  EXPECT_EQ(missing[0]["died"], "killed by SIGKILL from pid 900 (`kill`)");
  EXPECT_EQ(missing[0]["exit_cause"]["sender"]["pid"], 900);
}

TEST(Detectors, AsyncHangNamesTheRankThatNeverIssuedItWhileItsPeersSitInSynchronize) {
  HangReplay r;
  r.t.on_arrival("c", 1, 100, r.t100);
  r.t.on_arrival("c", 2, 100, r.t100 + kMs);
  r.t.on_exit(4);
  // Real NCCL: the calls returned at once; the hosts wait in their next synchronize.
  std::vector<InflightWait> inflight{{1, "", true, "cuStreamSynchronize", r.t100 + 2 * kMs},
                                     {2, "", true, "cuStreamSynchronize", r.t100 + 3 * kMs}};
  HangDetector h(HangOptions{10, 5});
  EXPECT_TRUE(h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 5'000 * kMs, 0).empty());
  EXPECT_NEAR(h.health().at("c").stalled_seconds, 5.0, 1e-9);  // since #100 was first issued
  EXPECT_FALSE(h.missing(3));
  auto ev = h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 10'000 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(h.missing(3));
  EXPECT_TRUE(h.missing(4));
  EXPECT_FALSE(h.missing(1));
  EXPECT_EQ(ev[0].kind, EventKind::kHang);
  EXPECT_EQ(ev[0].rank, 2);
  EXPECT_NE(ev[0].summary.find("collective #100 of job j has not moved for 10 s: rank 2 (it is alive and in no collective or CUDA call), rank 3 "
                               "(it died: signal 9) never issued it; its peers here: 2 wait in a CUDA synchronize"),
            std::string::npos)
      << ev[0].summary;
  EXPECT_EQ(ev[0].evidence["cause"], "missing_rank");
  EXPECT_EQ(ev[0].evidence["missing"].size(), 2u);
  const auto& states = ev[0].evidence["ranks"];
  ASSERT_EQ(states.size(), 4u);
  EXPECT_EQ(states[0]["state"], "in_synchronize");
  EXPECT_EQ(states[0]["call"], "cuStreamSynchronize");
  EXPECT_EQ(states[2]["state"], "running");  // the missing rank: in no call at all
  EXPECT_EQ(states[3]["state"], "exited");
  // Still hung, same ranks missing: no second event.
  EXPECT_TRUE(h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 12'000 * kMs, 2).empty());
  // The dead rank's grace is over and the late one arrives: moving again.
  r.t.forget(4);
  r.t.on_arrival("c", 3, 100, r.t100 + 12'500 * kMs);
  EXPECT_TRUE(h.evaluate(r.t.comms(), {}, r.facts, r.t100 + 13'000 * kMs, 3).empty());
  EXPECT_EQ(h.health().at("c").stalled_seconds, 0);
  EXPECT_FALSE(h.missing(3));
}

// What the hang detector remembers of a communicator goes with it (no state per
// communicator ever seen): one that comes back is new, and its hang reported again.
TEST(Detectors, AHangDetectorForgetsCommunicatorsTheTrackerForgot) {
  HangReplay r;
  r.t.on_arrival("c", 1, 100, r.t100);
  r.t.on_arrival("c", 2, 100, r.t100 + kMs);
  r.t.on_exit(4);
  std::vector<InflightWait> inflight{{1, "", true, "cuStreamSynchronize", r.t100 + 2 * kMs},
                                     {2, "", true, "cuStreamSynchronize", r.t100 + 3 * kMs}};
  HangDetector h(HangOptions{10, 5});
  EXPECT_EQ(h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 10'000 * kMs, 1).size(), 1u);
  EXPECT_TRUE(h.evaluate({}, inflight, r.facts, r.t100 + 11'000 * kMs, 2).empty());
  EXPECT_TRUE(h.health().empty());
  EXPECT_EQ(h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 12'000 * kMs, 3).size(), 1u);
}

TEST(Detectors, BlockingHangNamesTheMissingRankWhileItsPeersSitInTheCall) {
  HangReplay r;
  r.facts[4].exited = false;
  for (int p : {1, 2, 4}) r.t.on_arrival("c", p, 100, r.t100 + p * kMs);
  std::vector<InflightWait> inflight{{1, "c", false, "all_reduce", r.t100 + kMs},
                                     {2, "c", false, "all_reduce", r.t100 + 2 * kMs},
                                     {4, "c", false, "all_reduce", r.t100 + 4 * kMs}};
  HangDetector h(HangOptions{10, 5});
  auto ev = h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 11'000 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].rank, 2);
  EXPECT_NE(ev[0].summary.find("rank 2 (it is alive and in no collective or CUDA call) never issued it; its peers here: 3 in the collective call"), std::string::npos)
      << ev[0].summary;
}

// A framework's group is named as users know it, with its members' job ranks.
TEST(Detectors, AHangOnAFrameworkGroupNamesTheGroupAndItsRanks) {
  HangReplay r;
  r.facts[4].exited = false;
  r.t.set_label("c", "tp");
  for (int p : {1, 2, 4}) r.t.on_arrival("c", p, 100, r.t100 + p * kMs);
  HangDetector h(HangOptions{10, 5});
  auto ev = h.evaluate(r.t.comms(), {}, r.facts, r.t100 + 11'000 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_NE(ev[0].summary.find("collective #100 on tp (ranks 0-3) of job j"), std::string::npos) << ev[0].summary;
  EXPECT_EQ(ev[0].evidence["group"], "tp");
  EXPECT_EQ(ev[0].evidence["group_ranks"], nlohmann::json({0, 1, 2, 3}));
}

TEST(Detectors, EqualCountsHangSaysTheCollectiveItselfIsStuck) {
  HangReplay r;
  r.facts[4].exited = false;
  for (auto& [pid, f] : r.facts) f.gpu_last_activity_ns = static_cast<double>(r.t100 + 5 * kMs);
  for (int p = 1; p <= 4; ++p) r.t.on_arrival("c", p, 100, r.t100 + p * kMs);
  std::vector<InflightWait> inflight;
  for (int p = 1; p <= 4; ++p) inflight.push_back({p, "", true, "cuStreamSynchronize", r.t100 + (10 + p) * kMs});
  HangDetector h(HangOptions{10, 5});
  // Stalled since the last rank got blocked (t100 + 14 ms).
  EXPECT_TRUE(h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 10'013 * kMs, 0).empty());
  auto ev = h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 10'014 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].rank, -1);  // nobody is missing
  EXPECT_EQ(ev[0].evidence["cause"], "collective_stuck");
  EXPECT_NE(ev[0].summary.find("every rank issued it and none finished (4 wait in a CUDA synchronize); no rank is "
                               "missing: the collective itself is stuck"),
            std::string::npos)
      << ev[0].summary;
  EXPECT_NEAR(ev[0].evidence["ranks"][0]["gpu_idle_seconds"].get<double>(), 10.009, 1e-9);
  for (int p = 1; p <= 4; ++p) EXPECT_FALSE(h.missing(p));
  // A bigger communicator than this node's ranks: it may be a rank elsewhere.
  CollectiveTracker wide;
  for (int p = 1; p <= 4; ++p) wide.add_member("c", p, 16);
  for (int p = 1; p <= 4; ++p) wide.on_arrival("c", p, 7, r.t100 + p * kMs);
  HangDetector h2(HangOptions{10, 5});
  auto ev2 = h2.evaluate(wide.comms(), inflight, r.facts, r.t100 + 20'000 * kMs, 1);
  ASSERT_EQ(ev2.size(), 1u);
  EXPECT_EQ(ev2[0].evidence["cause"], "no_local_rank_missing");
}

// Every rank issued #100 and pid 4 died inside it (real NCCL: its kernel went
// with its CUDA context, so the peers wait forever): it is named, not "stuck".
TEST(Detectors, ARankThatDiedInsideTheCollectiveIsNamedNotTheCollective) {
  HangReplay r;
  for (int p = 1; p <= 4; ++p) r.t.on_arrival("c", p, 100, r.t100 + p * kMs);
  r.t.on_exit(4);
  r.facts[4].exit_summary = "killed by SIGKILL from pid 900 (`kill`)";
  std::vector<InflightWait> inflight;
  for (int p = 1; p <= 3; ++p) inflight.push_back({p, "", true, "cuStreamSynchronize", r.t100 + (10 + p) * kMs});
  HangDetector h(HangOptions{10, 5});
  auto ev = h.evaluate(r.t.comms(), inflight, r.facts, r.t100 + 10'013 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].rank, 3);
  EXPECT_EQ(ev[0].evidence["cause"], "rank_died");
  EXPECT_NE(ev[0].summary.find("rank 3 (it died: killed by SIGKILL from pid 900 (`kill`)) issued it and died before it "
                               "finished; its peers here: 3 wait in a CUDA synchronize"),
            std::string::npos)
      << ev[0].summary;
  ASSERT_EQ(ev[0].evidence["missing"].size(), 1u);
  EXPECT_EQ(ev[0].evidence["missing"][0]["issued_newest"], true);
  EXPECT_TRUE(h.missing(4));
  EXPECT_FALSE(h.missing(1));
  // One that never issued it and one that died in it: both named, each as what it did.
  HangReplay r2;
  for (int p : {1, 2, 4}) r2.t.on_arrival("c", p, 100, r2.t100 + p * kMs);
  r2.t.on_exit(4);
  HangDetector h2(HangOptions{10, 5});
  auto ev2 = h2.evaluate(r2.t.comms(), inflight, r2.facts, r2.t100 + 10'001 * kMs, 1);
  ASSERT_EQ(ev2.size(), 1u);
  EXPECT_EQ(ev2[0].rank, 2);
  EXPECT_EQ(ev2[0].evidence["cause"], "missing_rank");
  EXPECT_NE(ev2[0].summary.find("rank 2 (it waits in cuStreamSynchronize) never issued it; rank 3 (it died: signal 9) issued it and died before it finished"),
            std::string::npos)
      << ev2[0].summary;
  // One that issued it and exited cleanly (exit 0) did its part: it is not who the peers wait for.
  HangReplay r3;
  for (int p = 1; p <= 4; ++p) r3.t.on_arrival("c", p, 100, r3.t100 + p * kMs);
  r3.t.on_exit(4);
  r3.facts[4] = {"j", 3, true, ExitReason::kExit, 0, 0.1};
  HangDetector h3(HangOptions{10, 5});
  auto ev3 = h3.evaluate(r3.t.comms(), inflight, r3.facts, r3.t100 + 10'013 * kMs, 1);
  ASSERT_EQ(ev3.size(), 1u);
  // Nor is the collective known stuck: the rest may wait on work of their own.
  EXPECT_EQ(ev3[0].evidence["cause"], "peers_exited");
  EXPECT_NE(ev3[0].summary.find("every rank here issued it; 1 of the 4 then exited cleanly (exit 0) and the rest are "
                                "blocked (3 wait in a CUDA synchronize)"),
            std::string::npos)
      << ev3[0].summary;
  EXPECT_FALSE(h3.missing(4));
}

// A job that ended (every rank here exited) waits for nothing: no hang, however
// long its exited ranks stay visible.
TEST(Detectors, AJobWhoseRanksAllExitedIsNotAHang) {
  HangReplay r;
  for (int p = 1; p <= 4; ++p) r.t.on_arrival("c", p, 100, r.t100 + p * kMs);
  for (int p = 1; p <= 4; ++p) {
    r.t.on_exit(p);
    r.facts[p] = {"j", p - 1, true, ExitReason::kExit, 0, 0.1};
  }
  HangDetector h(HangOptions{10, 5});
  EXPECT_TRUE(h.evaluate(r.t.comms(), {}, r.facts, r.t100 + 120'000 * kMs, 0).empty());
  EXPECT_EQ(h.health().at("c").stalled_seconds, 0);
  EXPECT_FALSE(h.missing(1));
}

TEST(Detectors, AnIdleJobIsNotAHang) {
  HangReplay r;
  for (int p = 1; p <= 4; ++p) r.t.on_arrival("c", p, 100, r.t100 + p * kMs);
  // Every rank issued #100 and then went on computing (no collective or
  // synchronize call in flight): evaluation, checkpointing, the end of a job.
  std::vector<InflightWait> some{{1, "", true, "cuStreamSynchronize", r.t100 + 10 * kMs}};
  HangDetector h(HangOptions{10, 5});
  EXPECT_TRUE(h.evaluate(r.t.comms(), some, r.facts, r.t100 + 60'000 * kMs, 0).empty());
  EXPECT_EQ(h.health().at("c").stalled_seconds, 0);
}

}  // namespace
}  // namespace argus
