// Hangs in jobs with several communicators per rank and point-to-point
// traffic, on recorded streams with injected time: a synchronize is charged to
// what its process has pending, a missing rank that is busy is said to be, a
// collective whose data still moves is not stuck, the threshold grows with the
// longest stall the job recovered from, and a pipeline receive that never gets
// its send names both ranks.
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

RankInfoForHang alive(int rank) { return {"j", rank, false, ExitReason::kNone, 0, 0.1}; }

// 8 ranks, TP groups of 2 (tp0..tp3), DP groups of 4 (dp0: even ranks, dp1:
// odd). 50 steps: 8 TP all-reduces then one DP all-reduce each. At step 51
// rank 3 stops before its first collective (async NCCL: the others issue
// everything and sit in their step-end synchronize).
struct TpDpHang {
  CollectiveTracker t{TrackerOptions{.window_seconds = 10}};
  std::map<int, RankInfoForHang> facts;
  std::map<std::string, uint64_t> seq;
  uint64_t now = 0;
  int pid(int r) const { return 100 + r; }
  std::string tp(int r) const { return "tp" + std::to_string(r / 2); }
  std::string dp(int r) const { return "dp" + std::to_string(r % 2); }
  TpDpHang() {
    for (int r = 0; r < 8; ++r) {
      t.add_member(tp(r), pid(r), 2, r % 2);
      t.add_member(dp(r), pid(r), 4, r / 2);
      facts[pid(r)] = alive(r);
    }
    for (int s = 0; s < 50; ++s) step(-1);
  }
  // Each hang event's communicator and the rank it names.
  static std::map<std::string, int> named_by_comm(const std::vector<DetectedEvent>& ev) {
    std::map<std::string, int> out;
    for (const auto& e : ev) out[e.evidence.at("comm")] = e.rank;
    return out;
  }
  // Every rank but `stopped` waits in its step-end synchronize since `since`.
  std::vector<InflightWait> syncing_all_but(int stopped, uint64_t since) const {
    std::vector<InflightWait> out;
    for (int r = 0; r < 8; ++r)
      if (r != stopped) out.push_back({pid(r), "", true, "cuStreamSynchronize", since});
    return out;
  }
  // The next collective of `comm`, issued by its members but `stopped` (whose
  // count then stays behind).
  void issue(const std::string& comm, std::vector<int> members, int stopped) {
    const uint64_t n = ++seq[comm];
    for (int r : members)
      if (r != stopped) t.on_arrival(comm, pid(r), n, now + static_cast<uint64_t>(r) * 1000);
  }
  void step(int stopped) {
    for (int l = 0; l < 8; ++l) {
      now += 10 * kMs;
      for (int g = 0; g < 4; ++g) issue("tp" + std::to_string(g), {2 * g, 2 * g + 1}, stopped);
    }
    now += 10 * kMs;
    for (int d = 0; d < 2; ++d) issue("dp" + std::to_string(d), {d, d + 2, d + 4, d + 6}, stopped);
    now += 10 * kMs;
  }
};

TEST(HangLayouts, ASynchronizeIsChargedToWhatItsProcessHasPending) {
  TpDpHang job;
  job.step(3);
  const uint64_t stop = job.now;
  const auto inflight = job.syncing_all_but(3, stop);
  HangDetector h;
  const auto ev = h.evaluate(job.t.comms(), inflight, job.facts, stop + 11'000 * kMs, 0);
  // tp1 (ranks 2, 3) and dp1 (ranks 1, 3, 5, 7) wait for rank 3; tp0, tp2, tp3
  // and dp0 completed everything here: their members' synchronize is not theirs.
  EXPECT_EQ(TpDpHang::named_by_comm(ev), (std::map<std::string, int>{{"tp1", 3}, {"dp1", 3}}));
  for (const auto& e : ev) EXPECT_EQ(e.evidence.at("cause"), "missing_rank") << e.summary;
}

// Rank 3 stops; rank 2, its tensor-parallel peer, sits in its synchronize
// (its GPU waits in tp1's all-reduce) and so never issues dp0's next
// all-reduce, which ranks 0, 4 and 6 did. dp0 waits for rank 2, which waits
// for rank 3: one chain, named by its root. Only tp1 and dp1 report, naming
// rank 3; rank 2 is in their ranks' states, not an event of its own.
TEST(HangLayouts, AChainOfWaitsIsNamedByItsRoot) {
  TpDpHang job;
  job.step(3);
  job.now += 10 * kMs;
  job.issue("dp0", {0, 4, 6}, -1);  // the next step's first DP all-reduce, without rank 2
  const uint64_t stop = job.now;
  const auto inflight = job.syncing_all_but(3, stop);
  HangDetector h;
  const auto ev = h.evaluate(job.t.comms(), inflight, job.facts, stop + 11'000 * kMs, 0);
  EXPECT_EQ(TpDpHang::named_by_comm(ev), (std::map<std::string, int>{{"tp1", 3}, {"dp1", 3}}));
  EXPECT_TRUE(h.missing(job.pid(3)));
  EXPECT_FALSE(h.missing(job.pid(2)));  // a link: argus_hang_missing_rank stays 0
  // Rank 0's pipeline send to rank 2, never received (rank 2 sits in its
  // synchronize): a link too, no event of its own.
  job.t.add_member("pp", job.pid(0), 2, 0);
  job.t.add_member("pp", job.pid(2), 2, 1);
  const std::vector<P2pPending> send{{"pp", job.pid(0), true, 1, stop, 1}};
  HangDetector hp;
  for (const auto& e : hp.evaluate(job.t.comms(), inflight, job.facts, stop + 11'000 * kMs, 0, send))
    EXPECT_EQ(e.rank, 3) << e.summary;

  // With no free root (rank 3 blocked in a call of its own too: a GPU hung
  // inside a kernel), every communicator says what it sees: dp0 names rank 2.
  auto all_blocked = inflight;
  all_blocked.push_back({job.pid(3), "", true, "cuStreamSynchronize", stop});
  HangDetector h2;
  const auto every = TpDpHang::named_by_comm(h2.evaluate(job.t.comms(), all_blocked, job.facts, stop + 11'000 * kMs, 0));
  EXPECT_EQ(every.count("dp0") ? every.at("dp0") : -1, 2) << ::testing::PrintToString(every);
  HangDetector hp2;
  bool p2p_named = false;
  for (const auto& e : hp2.evaluate(job.t.comms(), all_blocked, job.facts, stop + 11'000 * kMs, 0, send))
    p2p_named = p2p_named || (e.evidence.at("cause") == "peer_never_sent" && e.rank == 2);
  EXPECT_TRUE(p2p_named);
}

TEST(HangLayouts, AMissingRankThatIsBusyIsSaidToBeWithItsCpuAndIo) {
  TpDpHang job;
  job.step(3);
  const uint64_t stop = job.now;
  const auto inflight = job.syncing_all_but(3, stop);
  job.facts[job.pid(3)].offcpu_valid = true;
  job.facts[job.pid(3)].oncpu_share = 0.15;
  job.facts[job.pid(3)].io_share = 0.70;  // writing a checkpoint
  HangDetector h;
  const auto ev = h.evaluate(job.t.comms(), inflight, job.facts, stop + 11'000 * kMs, 0);
  ASSERT_FALSE(ev.empty());
  for (const auto& e : ev) {
    EXPECT_EQ(e.evidence.at("cause"), "rank_busy") << e.summary;
    EXPECT_EQ(e.evidence.at("missing").at(0).at("state"), "busy");
    EXPECT_NE(e.summary.find("busy outside NCCL and CUDA (on CPU 15%, in I/O 70% of the time)"), std::string::npos)
        << e.summary;
  }
  // The same rank idle (no CPU, no I/O) is missing, not busy.
  job.facts[job.pid(3)].oncpu_share = 0;
  job.facts[job.pid(3)].io_share = 0;
  HangDetector h2;
  for (const auto& e : h2.evaluate(job.t.comms(), inflight, job.facts, stop + 11'000 * kMs, 0)) {
    EXPECT_EQ(e.evidence.at("cause"), "missing_rank");
    EXPECT_NE(e.summary.find("in no collective or CUDA call, idle"), std::string::npos) << e.summary;
  }
}

// Two ranks, both issued collective #10 and wait; the GPU layer still sees
// their kernels complete (a big collective that moves slowly): not stuck,
// until the GPU goes quiet for the threshold.
TEST(HangLayouts, ACollectiveWhoseDataStillMovesIsNotStuck) {
  CollectiveTracker t{TrackerOptions{.window_seconds = 10}};
  t.add_member("c", 1, 2);
  t.add_member("c", 2, 2);
  for (uint64_t s = 1; s <= 10; ++s)
    for (int p : {1, 2}) t.on_arrival("c", p, s, s * 100 * kMs + static_cast<uint64_t>(p));
  const uint64_t issued = 1'000 * kMs + 2;
  std::vector<InflightWait> inflight{{1, "c", false, "all_reduce", issued}, {2, "c", false, "all_reduce", issued}};
  std::map<int, RankInfoForHang> facts{{1, alive(0)}, {2, alive(1)}};
  HangDetector h;
  for (int sec = 1; sec <= 30; ++sec) {
    const uint64_t now = issued + static_cast<uint64_t>(sec) * 1000 * kMs;
    for (auto& [pid, f] : facts) f.gpu_last_activity_ns = static_cast<double>(now - 500 * kMs);
    EXPECT_TRUE(h.evaluate(t.comms(), inflight, facts, now, sec).empty()) << sec;
  }
  // Quiet from here on: stuck once the threshold passes.
  const uint64_t quiet_from = issued + 30'000 * kMs - 500 * kMs;
  std::vector<DetectedEvent> ev;
  for (int sec = 31; sec <= 42 && ev.empty(); ++sec)
    ev = h.evaluate(t.comms(), inflight, facts, issued + static_cast<uint64_t>(sec) * 1000 * kMs, sec);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].evidence.at("cause"), "collective_stuck");
  EXPECT_GE(ev[0].evidence.at("stalled_seconds").get<double>(), 10.0);
  (void)quiet_from;
}

// Rank 0 writes a checkpoint every so often while rank 1 waits in the next
// collective: an 8-s stall that recovers is healthy, and the threshold grows
// past it; a stall well beyond it is still a hang.
TEST(HangLayouts, TheThresholdGrowsWithTheLongestStallTheJobRecoveredFrom) {
  CollectiveTracker t{TrackerOptions{.window_seconds = 10}};
  t.add_member("c", 1, 2);
  t.add_member("c", 2, 2);
  std::map<int, RankInfoForHang> facts{{1, alive(0)}, {2, alive(1)}};
  HangDetector h;  // 10 s by default
  uint64_t now = 100 * kMs;
  uint64_t seq = 0;
  auto healthy_steps = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ++seq;
      for (int p : {1, 2}) t.on_arrival("c", p, seq, now + static_cast<uint64_t>(p));
      now += 100 * kMs;
      EXPECT_TRUE(h.evaluate(t.comms(), {}, facts, now, 0).empty());
    }
  };
  auto stall = [&](double seconds) {  // rank 1 issued the next one, rank 0 is away
    ++seq;
    t.on_arrival("c", 2, seq, now);
    std::vector<DetectedEvent> events;
    const uint64_t from = now;
    for (; now < from + static_cast<uint64_t>(seconds * 1000) * kMs; now += 500 * kMs)
      for (auto& e : h.evaluate(t.comms(), {}, facts, now, 0)) events.push_back(std::move(e));
    t.on_arrival("c", 1, seq, now);
    now += 100 * kMs;
    h.evaluate(t.comms(), {}, facts, now, 0);
    return events;
  };
  healthy_steps(20);
  EXPECT_TRUE(stall(8).empty());
  healthy_steps(20);
  // Seen last at 7.5 s (evaluations every 0.5 s): the limit is now 1.5 x 7.5 = 11.25 s.
  EXPECT_TRUE(stall(11).empty());
  healthy_steps(20);
  const auto ev = stall(30);  // seen last at 10.5 s: 1.5 x 10.5 = 15.75 s
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].rank, 0);
  EXPECT_NEAR(ev[0].evidence.at("stall_threshold_seconds").get<double>(), 15.75, 1e-9);
  EXPECT_NEAR(ev[0].evidence.at("stalled_seconds").get<double>(), 16.0, 1e-9);
}

// A two-stage pipeline on communicator "pp": stage 1 (rank 1, comm rank 1)
// posts its receive from stage 0 (comm rank 0); stage 0 never sends.
TEST(HangLayouts, APipelineReceiveThatNeverGetsItsSendNamesBothRanks) {
  CollectiveTracker t{TrackerOptions{.window_seconds = 10}};
  t.add_member("pp", 10, 2, 0);
  t.add_member("pp", 11, 2, 1);
  std::map<int, RankInfoForHang> facts{{10, alive(0)}, {11, alive(1)}};
  uint64_t now = 0;
  for (int i = 0; i < 20; ++i) {  // healthy: send then receive, matched
    now += 100 * kMs;
    t.on_p2p("pp", 10, true, 1, now);
    t.on_p2p("pp", 11, false, 0, now + kMs);
  }
  EXPECT_TRUE(t.p2p().pending().empty());
  now += 100 * kMs;
  t.on_p2p("pp", 11, false, 0, now);  // waits; rank 0 is stuck elsewhere
  std::vector<InflightWait> inflight{{11, "", true, "cuStreamSynchronize", now + kMs}};
  HangDetector h;
  EXPECT_TRUE(h.evaluate(t.comms(), inflight, facts, now + 5'000 * kMs, 0, t.p2p().pending()).empty());
  const auto ev = h.evaluate(t.comms(), inflight, facts, now + 11'000 * kMs, 1, t.p2p().pending());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].rank, 0);
  EXPECT_EQ(ev[0].evidence.at("cause"), "peer_never_sent");
  EXPECT_EQ(ev[0].evidence.at("waiting").at("rank"), 1);
  EXPECT_EQ(ev[0].evidence.at("missing").at("rank"), 0);
  EXPECT_EQ(ev[0].summary,
            "rank 1 of job j has waited 11 s for its point-to-point receive from rank 0 (it is alive and in no collective or "
            "CUDA call): it never sent it");
  // Reported once; gone once the send comes.
  EXPECT_TRUE(h.evaluate(t.comms(), inflight, facts, now + 12'000 * kMs, 2, t.p2p().pending()).empty());
  t.on_p2p("pp", 10, true, 1, now + 12'500 * kMs);
  EXPECT_TRUE(t.p2p().pending().empty());
}

}  // namespace
}  // namespace argus

namespace argus {
namespace {

// The agent started while the job hung: it heard no call of any rank. Three
// ranks sit inside libcuda since (seen on their stacks); rank 3 sits in none.
TEST(HangLayouts, AHangInProgressWhenTheAgentStartedIsStillReported) {
  std::map<int, RankInfoForHang> facts;
  for (int r = 0; r < 4; ++r) {
    facts[10 + r] = alive(r);
    facts[10 + r].heard = false;
  }
  const uint64_t seen = 1'000 * kMs;
  std::vector<InflightWait> inflight;
  for (int r = 0; r < 3; ++r) {
    InflightWait w;
    w.pid = 10 + r;
    w.sync = true;
    w.api = "inside libcuda.so.1";
    w.start_ns = seen;
    w.before_agent = true;
    inflight.push_back(w);
  }
  HangDetector h;
  EXPECT_TRUE(h.evaluate({}, inflight, facts, seen + 5'000 * kMs, 0).empty());
  const auto ev = h.evaluate({}, inflight, facts, seen + 11'000 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].rank, 3);
  EXPECT_EQ(ev[0].evidence.at("cause"), "missing_rank");
  EXPECT_EQ(ev[0].evidence.at("seen_from"), "stacks");
  EXPECT_EQ(ev[0].evidence.at("waiting").size(), 3u);
  EXPECT_NE(ev[0].summary.find("3 of its 4 ranks here have been blocked inside NCCL or CUDA since before the agent started"),
            std::string::npos)
      << ev[0].summary;
  EXPECT_NE(ev[0].summary.find("they wait for rank 3 (it is alive and in no collective or CUDA call)"), std::string::npos)
      << ev[0].summary;
  EXPECT_TRUE(h.evaluate({}, inflight, facts, seen + 12'000 * kMs, 2).empty());  // once
  // A job the agent heard from is judged by its calls, not this way.
  facts[10].heard = true;
  HangDetector h2;
  EXPECT_TRUE(h2.evaluate({}, inflight, facts, seen + 11'000 * kMs, 1).empty());
}

}  // namespace
}  // namespace argus
