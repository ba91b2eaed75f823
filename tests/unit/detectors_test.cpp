// Straggler and hang detection on recorded event streams with injected time:
// every figure below is exact, none depends on the machine.
#include "detect/detectors.h"

#include <gtest/gtest.h>

#include <random>

#include "detect/collective_tracker.h"
#include "detect/event_log.h"

namespace argus {
namespace {

constexpr uint64_t kMs = 1'000'000;

// A job of `ranks` ranks on one communicator: each step every rank computes
// step_ms (times its slowness), then enters `per_step` collectives; the first
// waits for the slowest rank, the rest follow together.
struct Replay {
  CollectiveTracker tracker{TrackerOptions{10, 512, 0.001, 10}};
  std::map<int, double> slowness;  // pid -> factor
  int ranks = 8;
  uint64_t now = 1'000 * kMs;
  uint64_t seq = 0;
  double step_ms = 100;
  int per_step = 4;

  void join() {
    for (int p = 0; p < ranks; ++p) tracker.add_member("c0", 100 + p, ranks);
  }
  void step() {
    uint64_t latest = now;
    std::map<int, uint64_t> arrive;
    for (int p = 0; p < ranks; ++p) {
      const double f = slowness.count(100 + p) ? slowness[100 + p] : 1.0;
      arrive[100 + p] = now + static_cast<uint64_t>(step_ms * f * kMs);
      latest = std::max(latest, arrive[100 + p]);
    }
    ++seq;
    for (const auto& [pid, t] : arrive) tracker.on_arrival("c0", pid, seq, t);
    for (int k = 1; k < per_step; ++k) {
      ++seq;
      for (int p = 0; p < ranks; ++p) tracker.on_arrival("c0", 100 + p, seq, latest + k * 100'000 + p * 10'000);
    }
    now = latest + per_step * kMs;
  }
  // The wait ratio each rank would show: its wait for the slowest, over the step.
  std::vector<RankSignal> signals() const {
    double slowest = 1;
    for (const auto& [pid, f] : slowness) slowest = std::max(slowest, f);
    std::vector<RankSignal> out;
    for (int p = 0; p < ranks; ++p) {
      const double f = slowness.count(100 + p) ? slowness.at(100 + p) : 1.0;
      RankSignal s;
      s.pid = 100 + p;
      s.job_id = "llm-7";
      s.rank = p;
      s.wait_ratio = (slowest - f) / slowest;
      s.coverage = 1;
      s.lag = tracker.lag_stats(100 + p, now);
      out.push_back(s);
    }
    return out;
  }
};

TEST(Detectors, ArrivalLagAndStepFromTheCollectiveStream) {
  Replay r;
  r.slowness[105] = 1.4;
  r.join();
  for (int i = 0; i < 50; ++i) r.step();
  const auto slow = r.tracker.lag_stats(105, r.now);
  const auto fine = r.tracker.lag_stats(101, r.now);
  EXPECT_NEAR(slow.median_lag_s, 0.040, 1e-9);  // 40 ms behind the earliest, at every step
  EXPECT_DOUBLE_EQ(slow.late_fraction, 1.0);
  EXPECT_DOUBLE_EQ(fine.late_fraction, 0.0);
  EXPECT_NEAR(fine.median_lag_s, 0.0, 1e-9);
  // Step = 140 ms of compute + 4 ms of collectives.
  EXPECT_NEAR(slow.step_seconds, 0.144, 1e-9);
  EXPECT_NEAR(fine.step_seconds, 0.144, 1e-9);
}

TEST(Detectors, StragglerNamedAloneAfterTwoEvaluationsWithEvidence) {
  Replay r;
  r.slowness[105] = 2.9;
  r.join();
  StragglerDetector d;
  std::vector<DetectedEvent> events;
  for (int i = 0; i < 20; ++i) r.step();
  auto ev1 = d.evaluate(r.signals(), 1000);
  EXPECT_TRUE(ev1.empty());  // one evaluation is not enough: noise must not flap it
  EXPECT_FALSE(d.state(105).straggler);
  auto ev2 = d.evaluate(r.signals(), 1001);
  ASSERT_EQ(ev2.size(), 1u);
  EXPECT_TRUE(d.state(105).straggler);
  for (int p = 0; p < 8; ++p) {
    if (p != 5) {
      EXPECT_FALSE(d.state(100 + p).straggler) << p;
    }
  }
  EXPECT_EQ(ev2[0].kind, "straggler");
  EXPECT_EQ(ev2[0].rank, 5);
  EXPECT_NE(ev2[0].summary.find("rank 5 of job llm-7 is 2.9x slower than the median of 8 ranks"), std::string::npos)
      << ev2[0].summary;
  EXPECT_NE(ev2[0].summary.find("late at 100% of collectives"), std::string::npos) << ev2[0].summary;
  EXPECT_NEAR(d.state(105).score, 1.9, 1e-9);
  EXPECT_EQ(ev2[0].evidence["peers"].size(), 8u);
  EXPECT_EQ(ev2[0].evidence["window_seconds"], 10);
  // The flag holds while it is slow, without repeating the event.
  EXPECT_TRUE(d.evaluate(r.signals(), 1002).empty());
  // Recovered: the flag falls after three clean evaluations.
  r.slowness.clear();
  for (int i = 0; i < 100; ++i) r.step();
  for (int i = 0; i < 2; ++i) d.evaluate(r.signals(), 1003 + i);
  EXPECT_TRUE(d.state(105).straggler);
  d.evaluate(r.signals(), 1006);
  EXPECT_FALSE(d.state(105).straggler);
}

TEST(Detectors, SeveralStragglersAtOnce) {
  Replay r;
  r.slowness[102] = 2.0;
  r.slowness[106] = 3.0;
  r.join();
  for (int i = 0; i < 30; ++i) r.step();
  StragglerDetector d;
  d.evaluate(r.signals(), 1);
  auto ev = d.evaluate(r.signals(), 2);
  // The slowest waits least: it is named first; the 2x rank waits for it at the
  // first collective, yet it still waits far less than the healthy median.
  EXPECT_TRUE(d.state(106).straggler);
  EXPECT_TRUE(d.state(102).straggler);
  EXPECT_EQ(ev.size(), 2u);
  for (int p : {100, 101, 103, 104, 105, 107}) EXPECT_FALSE(d.state(p).straggler) << p;
}

TEST(Detectors, NoiseNeverFlagsAnyone) {
  StragglerDetector d;
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> noise(-0.05, 0.05);
  for (int i = 0; i < 600; ++i) {  // ten minutes of one-second evaluations
    std::vector<RankSignal> sig;
    for (int p = 0; p < 8; ++p) {
      RankSignal s;
      s.pid = p + 1;
      s.job_id = "clean";
      s.rank = p;
      s.wait_ratio = 0.3 + noise(rng);
      s.coverage = 1;
      s.lag.spread_samples = 50;
      s.lag.late_fraction = 0.125 + noise(rng);
      s.lag.median_lag_s = 0.0005;
      sig.push_back(s);
    }
    EXPECT_TRUE(d.evaluate(sig, i).empty()) << "evaluation " << i;
  }
}

TEST(Detectors, NeverFlagsLateStartersTooFewPeersOrWaiters) {
  StragglerDetector d;
  std::vector<RankSignal> sig;
  for (int p = 0; p < 4; ++p) {
    RankSignal s;
    s.pid = p + 1;
    s.job_id = "j";
    s.rank = p;
    s.wait_ratio = p == 0 ? 0.95 : 0.5;  // rank 0 waits on everyone: never a straggler
    s.coverage = 1;
    sig.push_back(s);
  }
  RankSignal late;  // joined a moment ago: waits little so far, but is not judged yet
  late.pid = 9;
  late.job_id = "j";
  late.rank = 4;
  late.wait_ratio = 0.0;
  late.coverage = 0.2;
  sig.push_back(late);
  RankSignal alone;  // the only rank of its job here: the cross-node rules judge it
  alone.pid = 10;
  alone.job_id = "solo";
  alone.rank = 0;
  alone.wait_ratio = 0.0;
  alone.coverage = 1;
  sig.push_back(alone);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(d.evaluate(sig, i).empty());
  for (int pid : {1, 2, 3, 4, 9, 10}) EXPECT_FALSE(d.state(pid).straggler) << pid;
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
  }
  const auto c = t.comms().at(0);
  EXPECT_LT(c.newest_seq, 10u);  // past the wrap, and still the newest
  auto lag = t.lag_stats(2, ts);
  EXPECT_EQ(lag.samples, 12u);
  EXPECT_NEAR(lag.median_lag_s, 0.002, 1e-9);
}

TEST(Detectors, DifferentWorldSizesAndRestartedRanksDoNotBreakIt) {
  CollectiveTracker t({10, 64, 0.001, 10});
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
  std::map<int, RankInfoForHang> facts{{1, {"j", 0, false, "", 0, 0.01}}, {3, {"j", 1, false, "", 0, 0.01}}};
  // Nobody sits in a collective: moving, not hung, whatever the numbers say.
  auto ev = h.evaluate(t.comms(), {}, facts, 500 * kMs, 0);
  EXPECT_TRUE(ev.empty());
  EXPECT_FALSE(h.health().at("c").hung);
  EXPECT_EQ(h.health().at("c").stalled_seconds, 0);
}

TEST(Detectors, HangNamesTheRankThatNeverArrivedAndAnExitedOne) {
  CollectiveTracker t;
  for (int p = 1; p <= 4; ++p) t.add_member("c", p, 4);
  for (uint64_t s = 1; s <= 99; ++s)
    for (int p = 1; p <= 4; ++p) t.on_arrival("c", p, s, s * 100 * kMs + p);
  // Seq 100: ranks 1, 2 (pids 1, 2) arrive and sit in it; pid 3 hangs before it; pid 4 exits.
  const uint64_t t100 = 100 * 100 * kMs;
  t.on_arrival("c", 1, 100, t100);
  t.on_arrival("c", 2, 100, t100 + kMs);
  t.on_exit(4);
  std::map<int, RankInfoForHang> facts{{1, {"j", 0, false, "", 0, 0.1}},
                                        {2, {"j", 1, false, "", 0, 0.1}},
                                        {3, {"j", 2, false, "", 0, 0.1}},
                                        {4, {"j", 3, true, "signal", 9, 0.1}}};
  std::vector<InflightCollective> inflight{{1, "c", t100}, {2, "c", t100 + kMs}};
  HangDetector h(HangOptions{10, 5});
  EXPECT_TRUE(h.evaluate(t.comms(), inflight, facts, t100 + 5'000 * kMs, 0).empty());
  EXPECT_NEAR(h.health().at("c").stalled_seconds, 5.0, 1e-9);
  EXPECT_FALSE(h.missing(3));
  auto ev = h.evaluate(t.comms(), inflight, facts, t100 + 10'000 * kMs, 1);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_TRUE(h.missing(3));
  EXPECT_TRUE(h.missing(4));
  EXPECT_FALSE(h.missing(1));
  EXPECT_EQ(ev[0].kind, "hang");
  EXPECT_EQ(ev[0].rank, 2);
  EXPECT_NE(ev[0].summary.find("collective #100 of job j has waited 10 s for rank 2, rank 3 (exited: signal 9)"),
            std::string::npos)
      << ev[0].summary;
  EXPECT_EQ(ev[0].evidence["missing"].size(), 2u);
  // Still hung, same ranks missing: no second event.
  EXPECT_TRUE(h.evaluate(t.comms(), inflight, facts, t100 + 12'000 * kMs, 2).empty());
  // Moving again: stalled back to zero.
  t.on_arrival("c", 3, 100, t100 + 12'500 * kMs);
  EXPECT_TRUE(h.evaluate(t.comms(), {}, facts, t100 + 13'000 * kMs, 3).empty());
  EXPECT_EQ(h.health().at("c").stalled_seconds, 0);
  EXPECT_FALSE(h.missing(3));
}

TEST(Detectors, EventsAsTheContractShapesThem) {
  EventLog log(3);
  for (int i = 0; i < 5; ++i) {
    DetectedEvent e;
    e.time = 1700000000.25 + i;
    e.kind = "straggler";
    e.job_id = "j";
    e.rank = i;
    e.summary = "s";
    log.add(e);
  }
  EXPECT_EQ(log.dropped(), 2u);
  auto since = log.since(1700000003);
  ASSERT_EQ(since.size(), 2u);
  auto j = event_to_json(since[0]);
  EXPECT_EQ(j["time"], "2023-11-14T22:13:23.250Z");
  EXPECT_EQ(j["kind"], "straggler");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_TRUE(j["device"].is_null());
  EXPECT_TRUE(j.contains("evidence"));
}

}  // namespace
}  // namespace argus
