// Straggler and hang detection on recorded event streams with injected time:
// every figure below is exact, none depends on the machine.
#include "userspace/detect/detectors.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "userspace/comms/collective_tracker.h"
#include "userspace/events/event_log.h"

namespace argus {
namespace {

constexpr uint64_t kMs = 1'000'000;

enum class Mode { Async, Blocking };

// A job of `ranks` ranks on one communicator, replayed with the semantics of
// the real libraries (docs: REAL-SEMANTICS.md). Each step, rank r:
//   - computes on its host for step_ms x host[r], launching GPU work that takes
//     gpu_ms x gpu[r] on its GPU (the GPU starts with the step);
//   - optionally synchronizes its stream first (sync_before_coll: loss.item());
//   - issues `per_step` collectives. Async (real NCCL): the calls return at
//     once; the NCCL kernel ends when every rank's GPU has reached it. Blocking
//     (Gloo): the call returns when every rank has called it;
//   - synchronizes at the end of the step, until the collective's kernel ends.
// The tracker gets exactly the arrivals and synchronize spans the agent's
// probes would see; the signals are the wait shares the registry computes.
struct Replay {
  CollectiveTracker tracker{TrackerOptions{10, 512, 0.001, 10}};
  Mode mode = Mode::Async;
  std::map<int, double> host, gpu;  // pid -> slowness factor
  bool sync_before_coll = false;
  bool with_gpu_layer = false;
  // The hosts never synchronize: each runs ahead at its own pace (on a GPU node
  // it would block in a full launch queue, which no probe times).
  bool runs_ahead = false;
  std::map<int, uint64_t> host_clock;  // runs_ahead: each rank's own step start
  int ranks = 8;
  uint64_t now = 1'000 * kMs;
  uint64_t seq = 0;
  double step_ms = 100, gpu_ms = 60;
  int per_step = 4;
  std::map<int, double> coll_ns, sync_ns, nccl_kernel_ns;  // accumulated over the window
  uint64_t window_start = now;
  // Python GC: pid -> ms of collection per step (host time, before its collectives).
  std::map<int, double> gc_ms;
  bool with_gc = false;  // the ranks' collectors are probed
  std::map<int, double> gc_ns;
  std::map<int, uint64_t> gc_pauses;
  // Kernel layer (sched_switch, cgroup cpu.stat): pid -> ms per step its host
  // spends runnable but off CPU, blocked in block I/O, or with its cgroup
  // throttled (a throttled task is runnable too: count it in runqueue_ms as
  // well). Runqueue and I/O time delay its host by that much; of the rest of
  // its host time oncpu_share is on CPU, the remainder asleep.
  bool with_kernel = false;
  bool with_throttle = true;  // its cgroup's cpu.stat was read
  std::map<int, double> runqueue_ms, io_ms, throttled_ms;
  std::map<int, std::vector<CpuStealer>> stealers;
  double oncpu_share = 0.4;
  std::set<int> noisy;  // these ranks' runqueue and I/O time vary each step (0..2x, seeded)
  std::mt19937 noise_rng{7};
  std::map<int, double> oncpu_ns, runqueue_ns, io_ns, throttled_ns;

  int pid(int r) const { return 100 + r; }
  double f(const std::map<int, double>& m, int p) const { return m.count(p) ? m.at(p) : 1.0; }
  void join() {
    for (int r = 0; r < ranks; ++r) tracker.add_member("c0", pid(r), ranks);
  }
  void sync(int p, uint64_t from, uint64_t to) {
    if (to <= from) return;
    tracker.on_sync(p, from, to);
    sync_ns[p] += static_cast<double>(to - from);
  }
  void step() {
    if (runs_ahead) return step_without_sync();
    const uint64_t t0 = now;
    std::map<int, uint64_t> arrive, gpu_done;
    for (int r = 0; r < ranks; ++r) {
      const int p = pid(r);
      const double gc = gc_ms.count(p) ? gc_ms.at(p) : 0.0;
      const double k = noisy.count(p) ? std::uniform_real_distribution<double>(0.0, 2.0)(noise_rng) : 1.0;
      const double rq = (runqueue_ms.count(p) ? runqueue_ms.at(p) : 0.0) * k;
      const double io = (io_ms.count(p) ? io_ms.at(p) : 0.0) * k;
      oncpu_ns[p] += (step_ms * f(host, p) * oncpu_share + gc) * kMs;
      runqueue_ns[p] += rq * kMs;
      io_ns[p] += io * kMs;
      throttled_ns[p] += (throttled_ms.count(p) ? throttled_ms.at(p) : 0.0) * kMs;
      const uint64_t host_end = t0 + static_cast<uint64_t>((step_ms * f(host, p) + gc + rq + io) * kMs);
      if (gc > 0) {
        gc_ns[p] += gc * kMs;
        gc_pauses[p] += 1;
      }
      gpu_done[p] = t0 + static_cast<uint64_t>(gpu_ms * f(gpu, p) * kMs);
      arrive[p] = host_end;
      if (sync_before_coll && gpu_done[p] > host_end) {
        sync(p, host_end, gpu_done[p]);
        arrive[p] = gpu_done[p];
      }
    }
    uint64_t last_arrival = 0, last_ready = 0;
    for (const auto& [p, a] : arrive) {
      last_arrival = std::max(last_arrival, a);
      last_ready = std::max(last_ready, std::max(a, gpu_done[p]));
    }
    const uint64_t kernel_end = last_ready + per_step * kMs;
    for (int k = 0; k < per_step; ++k) {
      ++seq;
      for (const auto& [p, a] : arrive) {
        // Blocking: after the first call every rank leaves together.
        const uint64_t at = k == 0 || mode == Mode::Async ? a + k * 10'000 : last_arrival + k * 10'000 + p * 1'000;
        tracker.on_arrival("c0", p, seq, at);
      }
    }
    for (const auto& [p, a] : arrive) {
      uint64_t sync_from = a + per_step * 10'000;
      if (mode == Mode::Blocking) {
        coll_ns[p] += static_cast<double>(last_arrival - a);
        sync_from = last_arrival + per_step * 10'000;
      }
      sync(p, sync_from, kernel_end);
      nccl_kernel_ns[p] += static_cast<double>(kernel_end - std::max(a, gpu_done[p]));
    }
    now = kernel_end + kMs;
  }
  // Every host issues its step's collectives when its own compute ends and goes on.
  void step_without_sync() {
    for (int r = 0; r < ranks; ++r) {
      const int p = pid(r);
      if (!host_clock.count(p)) host_clock[p] = now;
      host_clock[p] += static_cast<uint64_t>(step_ms * f(host, p) * kMs);
    }
    for (int k = 0; k < per_step; ++k) {
      ++seq;
      for (int r = 0; r < ranks; ++r) tracker.on_arrival("c0", pid(r), seq, host_clock[pid(r)] + k * 10'000);
    }
    for (const auto& [p, t] : host_clock) now = std::max(now, t + per_step * 10'000);
  }
  std::vector<RankSignal> signals() {
    std::vector<RankSignal> out;
    const double span = static_cast<double>(now - window_start);
    for (int r = 0; r < ranks; ++r) {
      const int p = pid(r);
      RankSignal s;
      s.pid = p;
      s.job_id = "llm-7";
      s.rank = r;
      s.coll_wait_ratio = coll_ns[p] / span;
      s.sync_wait_ratio = sync_ns[p] / span;
      s.coverage = 1;
      s.lag = tracker.lag_stats(p, now);
      s.gpu_valid = with_gpu_layer;
      s.gpu_nccl_ratio = nccl_kernel_ns[p] / span;
      s.gc_valid = with_gc;
      s.gc_seconds = gc_ns[p] / 1e9;
      s.gc_span_s = span / 1e9;
      s.gc_pauses = gc_pauses[p];
      s.gc_max_pause_s = (gc_ms.count(p) ? gc_ms.at(p) : 0.0) / 1e3;
      s.offcpu_valid = with_kernel;
      if (with_kernel) {
        s.runqueue_share = runqueue_ns[p] / span;
        s.io_share = io_ns[p] / span;
        s.oncpu_share = oncpu_ns[p] / span;
        s.sleep_share = std::max(0.0, 1.0 - s.runqueue_share - s.io_share - s.oncpu_share);
        s.throttle_valid = with_throttle;
        s.throttled_share = with_throttle ? throttled_ns[p] / span : 0.0;
        s.cgroup = "/job/rank" + std::to_string(r);
        if (stealers.count(p)) s.stealers = stealers.at(p);
      }
      out.push_back(s);
    }
    oncpu_ns.clear();
    runqueue_ns.clear();
    io_ns.clear();
    throttled_ns.clear();
    gc_ns.clear();
    gc_pauses.clear();
    coll_ns.clear();
    sync_ns.clear();
    nccl_kernel_ns.clear();
    window_start = now;
    return out;
  }
  // Runs `steps` steps per evaluation and returns the events of `evals` evaluations.
  std::vector<DetectedEvent> run(StragglerDetector& d, int evals, int steps = 20) {
    std::vector<DetectedEvent> all;
    for (int e = 0; e < evals; ++e) {
      for (int i = 0; i < steps; ++i) step();
      for (auto& ev : d.evaluate(signals(), 1000 + e)) all.push_back(std::move(ev));
    }
    return all;
  }
};

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

// The matrix: NCCL mode x fault x GPU layer; each names the right rank alone
// with the right reason, or (where no signal can) nobody.
struct Case {
  const char* name;
  Mode mode;
  bool host_slow, gpu_slow, sync_before_coll, gpu_layer;
  const char* reason;  // "" = nobody may be named
  bool runs_ahead = false;
};
// gtest prints a case by its name (ctest lists the tests by it).
inline void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class StragglerMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(StragglerMatrix, NamesTheRankTheOthersWaitFor) {
  const Case c = GetParam();
  Replay r;
  r.mode = c.mode;
  r.sync_before_coll = c.sync_before_coll;
  r.with_gpu_layer = c.gpu_layer;
  r.runs_ahead = c.runs_ahead;
  if (c.host_slow) r.host[105] = 1.5;
  if (c.gpu_slow) r.gpu[105] = 2.5;
  r.join();
  StragglerDetector d;
  auto events = r.run(d, 4);
  if (*c.reason == '\0') {
    EXPECT_TRUE(events.empty()) << events.front().summary;
    for (int p = 0; p < 8; ++p) EXPECT_FALSE(d.state(100 + p).straggler) << p;
    return;
  }
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].rank, 5);
  EXPECT_EQ(events[0].evidence["reason"], c.reason) << events[0].summary;
  EXPECT_STREQ(label_of(d.state(105).reason), c.reason);
  for (int p = 0; p < 8; ++p)
    if (p != 5) {
      EXPECT_FALSE(d.state(100 + p).straggler) << p;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Semantics, StragglerMatrix,
    ::testing::Values(
        Case{"async_host", Mode::Async, true, false, false, false, "host"},
        Case{"blocking_host", Mode::Blocking, true, false, false, false, "host"},
        Case{"async_host_gpu_layer", Mode::Async, true, false, false, true, "host"},
        Case{"blocking_host_gpu_layer", Mode::Blocking, true, false, false, true, "host"},
        Case{"async_host_sync_before", Mode::Async, true, false, true, false, "host"},
        Case{"async_gpu_sync_before", Mode::Async, false, true, true, false, "sync"},
        Case{"blocking_gpu_sync_before", Mode::Blocking, false, true, true, false, "sync"},
        Case{"async_gpu_sync_before_gpu_layer", Mode::Async, false, true, true, true, "gpu"},
        Case{"async_gpu_gpu_layer", Mode::Async, false, true, false, true, "gpu"},
        Case{"blocking_gpu_gpu_layer", Mode::Blocking, false, true, false, true, "gpu"},
        // A slow GPU that no host waits for before its collectives: every rank's
        // synchronize waits the same; without the GPU layer nothing can name it.
        Case{"async_gpu_no_layer", Mode::Async, false, true, false, false, ""},
        Case{"blocking_gpu_no_layer", Mode::Blocking, false, true, false, false, ""},
        Case{"async_balanced", Mode::Async, false, false, false, true, ""},
        // No host synchronizes in the window: no waits to compare, issue order alone.
        Case{"async_host_runs_ahead_no_sync", Mode::Async, true, false, false, false, "host", true},
        Case{"async_balanced_runs_ahead_no_sync", Mode::Async, false, false, false, false, "", true},
        Case{"blocking_balanced", Mode::Blocking, false, false, true, false, ""}),
    [](const auto& info) { return std::string(info.param.name); });

// GC as the reason: a rank whose collector runs longer than its peers' by at
// least half of its lateness is a gc_pause straggler, with a gc_pause event;
// GC equal on every rank (or too small to explain the lag) never is.
struct GcCase {
  const char* name;
  Mode mode;
  double gc_others_ms, gc_slow_ms;  // per step: rank 5's peers, rank 5
  double host_slow;                 // rank 5's host factor besides its GC
  bool probed;                      // collectors probed (GC seconds known)
  const char* reason;               // "" = nobody
};
inline void PrintTo(const GcCase& c, std::ostream* os) { *os << c.name; }
class GcReason : public ::testing::TestWithParam<GcCase> {};

TEST_P(GcReason, GcPauseOnlyWhenItsGcExplainsTheLag) {
  const GcCase c = GetParam();
  Replay r;
  r.mode = c.mode;
  r.with_gc = c.probed;
  for (int p = 0; p < 8; ++p) r.gc_ms[100 + p] = c.gc_others_ms;
  r.gc_ms[105] = c.gc_slow_ms;
  if (c.host_slow != 1.0) r.host[105] = c.host_slow;
  r.join();
  StragglerDetector d;
  auto events = r.run(d, 4);
  if (*c.reason == '\0') {
    EXPECT_TRUE(events.empty()) << events.front().summary;
    for (int p = 0; p < 8; ++p) EXPECT_FALSE(d.state(100 + p).straggler) << p;
    return;
  }
  EXPECT_STREQ(label_of(d.state(105).reason), c.reason);
  for (int p = 0; p < 8; ++p) {
    if (p != 5) {
      EXPECT_FALSE(d.state(100 + p).straggler) << p;
    }
  }
  const bool gc = std::string(c.reason) == "gc_pause";
  ASSERT_EQ(events.size(), gc ? 2u : 1u);
  EXPECT_EQ(events[0].kind, EventKind::kStraggler);
  EXPECT_EQ(events[0].evidence["reason"], c.reason) << events[0].summary;
  if (!gc) return;
  const DetectedEvent& ev = events[1];
  EXPECT_EQ(ev.kind, EventKind::kGcPause);
  EXPECT_EQ(ev.rank, 5);
  EXPECT_EQ(ev.job_id, "llm-7");
  // Evidence: its GC this window against the peers' median, its pauses, the worst one.
  const double steps = ev.evidence["gc_pauses"].get<double>();
  EXPECT_GT(steps, 0);
  EXPECT_NEAR(ev.evidence["gc_seconds"].get<double>(), steps * c.gc_slow_ms / 1e3, 1e-9);
  EXPECT_NEAR(ev.evidence["peers_median_gc_seconds"].get<double>(), steps * c.gc_others_ms / 1e3, 1e-9);
  EXPECT_NEAR(ev.evidence["gc_worst_pause_seconds"].get<double>(), c.gc_slow_ms / 1e3, 1e-12);
  EXPECT_GE(ev.evidence["gc_explained_share"].get<double>(), 0.5);
  EXPECT_EQ(ev.evidence["peers"].size(), 7u);
  EXPECT_NE(ev.summary.find("rank 5 of job llm-7 is late because of garbage collection: its Python garbage collector ran"),
            std::string::npos)
      << ev.summary;
  EXPECT_NE(events[0].summary.find("its Python garbage collector"), std::string::npos) << events[0].summary;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GcReason,
    ::testing::Values(
        GcCase{"async_gc_heavy_rank", Mode::Async, 2, 45, 1.0, true, "gc_pause"},
        GcCase{"blocking_gc_heavy_rank", Mode::Blocking, 2, 45, 1.0, true, "gc_pause"},
        GcCase{"async_gc_only_on_the_slow_rank", Mode::Async, 0, 30, 1.0, true, "gc_pause"},
        // GC and a slow host together, GC the larger part (30 of 40 ms).
        GcCase{"async_gc_most_of_the_lag", Mode::Async, 0, 30, 1.1, true, "gc_pause"},
        // Equal GC on every rank: the slow host is the reason, never GC.
        GcCase{"async_equal_gc_slow_host", Mode::Async, 20, 20, 1.5, true, "host"},
        GcCase{"blocking_equal_gc_slow_host", Mode::Blocking, 20, 20, 1.5, true, "host"},
        // Equal GC everywhere and no slow rank: nobody.
        GcCase{"async_equal_gc_balanced", Mode::Async, 20, 20, 1.0, true, ""},
        // A little more GC (5 ms) on a rank 50 ms late: 10% of its lag, host.
        GcCase{"async_small_gc_excess", Mode::Async, 2, 7, 1.45, true, "host"},
        // Collectors not probed (GC seconds unknown): the lag is host time.
        GcCase{"async_gc_unprobed", Mode::Async, 2, 45, 1.0, false, "host"}),
    [](const auto& info) { return std::string(info.param.name); });

// What on its host makes a host straggler late, from the kernel layer: each
// cause's time above the peers' median, per step, against the lag per step.
struct KernelCase {
  const char* name;
  int ranks;
  Mode mode;
  double host_slow;  // the slow rank's host factor besides the causes below
  // ms per step: the slow rank's peers, the slow rank
  double rq_others, rq_slow, io_others, io_slow, thr_others, thr_slow, gc_others, gc_slow;
  bool kernel;        // the kernel layer follows the ranks
  bool noisy_peers;   // peers' runqueue and I/O vary each step (0..2x the given, seeded)
  const char* reason;  // "" = nobody
  const char* decided_by = "";
};
inline void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.name; }
class HostCause : public ::testing::TestWithParam<KernelCase> {};

TEST_P(HostCause, SaysWhatOnTheHostMakesItLate) {
  const KernelCase c = GetParam();
  Replay r;
  r.ranks = c.ranks;
  r.mode = c.mode;
  r.with_kernel = c.kernel;
  r.with_gc = c.gc_others > 0 || c.gc_slow > 0;
  const int slow = r.pid(c.ranks - 1);
  for (int i = 0; i < c.ranks; ++i) {
    const int p = r.pid(i);
    const bool me = p == slow;
    if (c.noisy_peers && !me) r.noisy.insert(p);
    r.runqueue_ms[p] = me ? c.rq_slow : c.rq_others;
    r.io_ms[p] = me ? c.io_slow : c.io_others;
    r.throttled_ms[p] = me ? c.thr_slow : c.thr_others;
    r.gc_ms[p] = me ? c.gc_slow : c.gc_others;
  }
  if (c.host_slow != 1.0) r.host[slow] = c.host_slow;
  r.stealers[slow] = {{812, "stress-ng", "/noisy", 1.5, 40}, {9, "kworker/0:1", "/", 0.01, 2}};
  r.join();
  StragglerDetector d;
  auto events = r.run(d, 4);
  if (*c.reason == '\0') {
    EXPECT_TRUE(events.empty()) << events.front().summary;
    for (int i = 0; i < c.ranks; ++i) EXPECT_FALSE(d.state(r.pid(i)).straggler) << i;
    return;
  }
  ASSERT_GE(events.size(), 1u);
  const DetectedEvent& ev = events[0];
  EXPECT_EQ(ev.kind, EventKind::kStraggler);
  EXPECT_EQ(ev.rank, c.ranks - 1);
  EXPECT_EQ(ev.evidence["reason"], c.reason) << ev.summary;
  EXPECT_STREQ(label_of(d.state(slow).reason), c.reason);
  EXPECT_EQ(events.size(), std::string(c.reason) == "gc_pause" ? 2u : 1u);
  for (int i = 0; i < c.ranks - 1; ++i) EXPECT_FALSE(d.state(r.pid(i)).straggler) << i;
  const auto& hc = ev.evidence["host_cause"];
  EXPECT_EQ(hc["decided_by"], c.decided_by) << hc.dump();
  EXPECT_EQ(hc["kernel_layer"], c.kernel);
  if (!c.kernel) {
    EXPECT_FALSE(hc.contains("shares"));
    EXPECT_NE(ev.summary.find("its host is slow"), std::string::npos) << ev.summary;
    return;
  }
  // The rank's shares and its peers' medians, for every cause, and what each explains.
  for (const char* k : {"runqueue", "io", "lock", "sleep", "oncpu", "throttled"}) {
    EXPECT_TRUE(hc["shares"].contains(k)) << k;
    EXPECT_TRUE(hc["peers_median_shares"].contains(k)) << k;
  }
  for (const char* k : {"throttled", "cpu_contention", "io", "gc_pause"}) EXPECT_TRUE(hc["explained_share"].contains(k)) << k;
  const double step = ev.evidence["step_seconds"].get<double>();
  const double lag = hc["lag_behind_peers_seconds"].get<double>();
  EXPECT_NEAR(lag,
              std::max(ev.evidence["lag_margin_seconds"].get<double>(),
                       ev.evidence["median_lag_seconds"].get<double>() - hc["peers_median_lag_seconds"].get<double>()),
              1e-12);
  const double rq_excess = hc["shares"]["runqueue"].get<double>() - hc["peers_median_shares"]["runqueue"].get<double>();
  EXPECT_NEAR(hc["explained_share"]["cpu_contention"].get<double>(), std::max(0.0, rq_excess) * step / lag, 1e-9);
  ASSERT_EQ(ev.evidence["stealers"].size(), 2u);
  EXPECT_EQ(ev.evidence["stealers"][0]["pid"], 812);
  EXPECT_EQ(ev.evidence["stealers"][0]["comm"], "stress-ng");
  EXPECT_EQ(ev.evidence["stealers"][0]["cgroup"], "/noisy");
  EXPECT_DOUBLE_EQ(ev.evidence["stealers"][0]["seconds"].get<double>(), 1.5);
  const std::string head = "rank " + std::to_string(c.ranks - 1) + " of job llm-7 is late by ";
  const std::string reason = c.reason;
  if (reason == "gc_pause") {
    EXPECT_NE(ev.summary.find("its Python garbage collector"), std::string::npos) << ev.summary;
    return;
  }
  EXPECT_EQ(ev.summary.rfind(head, 0), 0u) << ev.summary;
  EXPECT_EQ(ev.summary.find('\n'), std::string::npos);
  if (reason == "cpu_contention") {
    EXPECT_NE(ev.summary.find("of its time runnable but waiting for a CPU (pid 812 `stress-ng` took most of it), peers "),
              std::string::npos)
        << ev.summary;
    EXPECT_GE(hc["explained_share"]["cpu_contention"].get<double>(), 0.5);
  } else if (reason == "throttled") {
    EXPECT_NE(ev.summary.find("its cgroup /job/rank" + std::to_string(c.ranks - 1) + " was throttled "), std::string::npos)
        << ev.summary;
    EXPECT_GE(hc["explained_share"]["throttled"].get<double>(), 0.5);
  } else if (reason == "io") {
    EXPECT_NE(ev.summary.find("of its time blocked in block I/O, peers "), std::string::npos) << ev.summary;
    EXPECT_GE(hc["explained_share"]["io"].get<double>(), 0.5);
  } else {
    EXPECT_NE(ev.summary.find("it computes longer on its host: on CPU "), std::string::npos) << ev.summary;
    EXPECT_NE(ev.summary.find("no contention, throttling or I/O explains it"), std::string::npos) << ev.summary;
    for (const char* k : {"throttled", "cpu_contention", "io"}) EXPECT_LT(hc["explained_share"][k].get<double>(), 0.5) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, HostCause,
    ::testing::Values(
        // name, ranks, mode, host factor, rq others/slow, io others/slow, throttled others/slow, gc others/slow
        KernelCase{"contention_8_ranks", 8, Mode::Async, 1.0, 1, 40, 0, 0, 0, 0, 0, 0, true, false, "cpu_contention",
                   "runqueue_excess"},
        KernelCase{"contention_64_ranks", 64, Mode::Async, 1.0, 1, 40, 0, 0, 0, 0, 0, 0, true, false, "cpu_contention",
                   "runqueue_excess"},
        KernelCase{"contention_blocking", 8, Mode::Blocking, 1.0, 1, 40, 0, 0, 0, 0, 0, 0, true, false,
                   "cpu_contention", "runqueue_excess"},
        // Peers whose runqueue and I/O time vary each step (0..2x of 5 ms): the median holds.
        KernelCase{"contention_noisy_peers", 8, Mode::Async, 1.0, 5, 45, 5, 5, 0, 0, 0, 0, true, true, "cpu_contention",
                   "runqueue_excess"},
        KernelCase{"noisy_peers_nobody_slow", 8, Mode::Async, 1.0, 5, 5, 5, 5, 0, 0, 0, 0, true, true, ""},
        // Every rank waits 30 ms per step for a CPU: that is no reason for one of them to be late.
        KernelCase{"contention_on_every_rank_slow_host", 8, Mode::Async, 1.5, 30, 30, 0, 0, 0, 0, 0, 0, true, false,
                   "compute", "none_explains"},
        KernelCase{"contention_on_every_rank_64", 64, Mode::Async, 1.5, 30, 30, 0, 0, 0, 0, 0, 0, true, false,
                   "compute", "none_explains"},
        // Throttled (its runqueue time grows as well): throttled, asked first.
        KernelCase{"throttled", 8, Mode::Async, 1.0, 1, 40, 0, 0, 0, 40, 0, 0, true, false, "throttled",
                   "throttled_excess"},
        KernelCase{"throttled_everywhere_contention_here", 8, Mode::Async, 1.0, 20, 60, 0, 0, 20, 20, 0, 0, true,
                   false, "cpu_contention", "runqueue_excess"},
        KernelCase{"io", 8, Mode::Async, 1.0, 1, 1, 2, 42, 0, 0, 0, 0, true, false, "io", "io_excess"},
        KernelCase{"io_64_ranks", 64, Mode::Blocking, 1.0, 1, 1, 2, 42, 0, 0, 0, 0, true, true, "io", "io_excess"},
        KernelCase{"compute", 8, Mode::Async, 1.5, 1, 1, 1, 1, 0, 0, 0, 0, true, false, "compute", "none_explains"},
        KernelCase{"small_contention_excess", 8, Mode::Async, 1.4, 0, 10, 0, 0, 0, 0, 0, 0, true, false, "compute",
                   "none_explains"},
        // No kernel layer: the lag is host time, no more is known.
        KernelCase{"kernel_layer_absent", 8, Mode::Async, 1.5, 1, 1, 0, 0, 0, 0, 0, 0, false, false, "host",
                   "no_kernel_layer"},
        KernelCase{"kernel_layer_absent_contention", 8, Mode::Async, 1.0, 1, 40, 0, 0, 0, 0, 0, 0, false, false,
                   "host", "no_kernel_layer"},
        // GC explains the lag: gc_pause still, with the kernel layer too.
        KernelCase{"gc_with_kernel_layer", 8, Mode::Async, 1.0, 1, 1, 0, 0, 0, 0, 2, 45, true, false, "gc_pause",
                   "gc_excess"},
        KernelCase{"gc_most_some_contention", 8, Mode::Async, 1.0, 1, 11, 0, 0, 0, 0, 0, 30, true, false, "gc_pause",
                   "gc_excess"},
        // Contention most of the lag, a little GC: contention.
        KernelCase{"contention_most_some_gc", 8, Mode::Async, 1.0, 1, 41, 0, 0, 0, 0, 0, 5, true, false,
                   "cpu_contention", "runqueue_excess"}),
    [](const auto& info) { return std::string(info.param.name); });

// Two ranks on a node (the tracker names nobody late there: no median rank to
// be behind), from the signals a cross-node view would give: rank 1 issues 40
// ms late each 145 ms step, rank 0 waits for it.
TEST(Detectors, TwoRankJobSaysWhatFromItsSignals) {
  auto judge = [](const std::function<void(RankSignal&, RankSignal&)>& shape) {
    std::vector<RankSignal> sig(2);
    for (int i = 0; i < 2; ++i) {
      RankSignal& s = sig[i];
      s.pid = 10 + i;
      s.job_id = "pair";
      s.rank = i;
      s.coverage = 1;
      s.lag.spread_samples = 10;
      s.lag.step_seconds = 0.145;
      s.lag.late_fraction = i == 1 ? 1.0 : 0.0;
      s.lag.median_lag_s = i == 1 ? 0.040 : 0.0;
      s.sync_wait_ratio = i == 1 ? 0.0 : 0.27;
      s.offcpu_valid = true;
      s.throttle_valid = true;
      s.oncpu_share = 0.28;
      s.runqueue_share = 0.01;
    }
    shape(sig[0], sig[1]);
    StragglerDetector d;
    std::vector<DetectedEvent> ev;
    for (int e = 0; e < 2; ++e)
      for (auto& x : d.evaluate(sig, 100 + e)) ev.push_back(std::move(x));
    EXPECT_FALSE(d.state(10).straggler);
    return ev.size() == 1 ? ev[0] : DetectedEvent{};
  };
  DetectedEvent ev = judge([](RankSignal&, RankSignal& slow) {
    slow.runqueue_share = 0.29;  // 0.28 x 0.145 s = 41 ms of its 40 ms lag
    slow.stealers = {{812, "stress-ng", "/noisy", 1.2, 30}};
  });
  EXPECT_EQ(ev.evidence["reason"], "cpu_contention") << ev.summary;
  EXPECT_NEAR(ev.evidence["host_cause"]["explained_share"]["cpu_contention"].get<double>(), 0.28 * 0.145 / 0.040, 1e-9);
  EXPECT_EQ(ev.summary,
            "rank 1 of job pair is late by 40 ms per step (step 145 ms; it issues last at 100% of its collectives): 29% "
            "of its time runnable but waiting for a CPU (pid 812 `stress-ng` took it), peers 1%");
  ev = judge([](RankSignal&, RankSignal& slow) {
    slow.runqueue_share = 0.29;
    slow.throttled_share = 0.28;
    slow.cgroup = "/kubepods/pod1";
  });
  EXPECT_EQ(ev.evidence["reason"], "throttled") << ev.summary;
  EXPECT_NE(ev.summary.find("its cgroup /kubepods/pod1 was throttled 28% of the time (CPU quota), peers 0%"),
            std::string::npos)
      << ev.summary;
  // Both throttled alike (one cgroup): throttling is no reason for one of them.
  ev = judge([](RankSignal& fast, RankSignal& slow) {
    fast.throttled_share = slow.throttled_share = 0.28;
  });
  EXPECT_EQ(ev.evidence["reason"], "compute") << ev.summary;
  ev = judge([](RankSignal&, RankSignal& slow) { slow.io_share = 0.30; });
  EXPECT_EQ(ev.evidence["reason"], "io") << ev.summary;
  ev = judge([](RankSignal&, RankSignal& slow) { slow.oncpu_share = 0.56; });
  EXPECT_EQ(ev.evidence["reason"], "compute") << ev.summary;
  EXPECT_EQ(ev.evidence["host_cause"]["decided_by"], "none_explains");
  ev = judge([](RankSignal& fast, RankSignal& slow) {
    fast.offcpu_valid = slow.offcpu_valid = false;
    slow.runqueue_share = 0.29;
  });
  EXPECT_EQ(ev.evidence["reason"], "host") << ev.summary;
  EXPECT_EQ(ev.evidence["host_cause"]["decided_by"], "no_kernel_layer");
}

// The one line a person reads, exactly.
TEST(Detectors, HostCauseSummariesAreOneHumanLine) {
  auto summary = [](const std::function<void(Replay&)>& shape) {
    Replay r;
    r.with_kernel = true;
    shape(r);
    r.join();
    StragglerDetector d;
    auto ev = r.run(d, 3);
    return ev.empty() ? std::string("(none)") : ev[0].summary;
  };
  EXPECT_EQ(summary([](Replay& r) {
              r.runqueue_ms[103] = 40;
              r.stealers[103] = {{812, "stress-ng", "/noisy", 1.2, 30}};
            }),
            "rank 3 of job llm-7 is late by 40 ms per step (step 145 ms; it issues last at 100% of its collectives): "
            "28% of its time runnable but waiting for a CPU (pid 812 `stress-ng` took it), peers 0%");
  EXPECT_EQ(summary([](Replay& r) {
              r.runqueue_ms[103] = 30;
              r.throttled_ms[103] = 30;
            }),
            "rank 3 of job llm-7 is late by 30 ms per step (step 135 ms; it issues last at 100% of its collectives): "
            "its cgroup /job/rank3 was throttled 22% of the time (CPU quota), peers 0%");
  EXPECT_EQ(summary([](Replay& r) { r.io_ms[103] = 40; }),
            "rank 3 of job llm-7 is late by 40 ms per step (step 145 ms; it issues last at 100% of its collectives): "
            "28% of its time blocked in block I/O, peers 0%");
  EXPECT_EQ(summary([](Replay& r) { r.host[103] = 2.0; }),
            "rank 3 of job llm-7 is late by 100 ms per step (step 205 ms; it issues last at 100% of its collectives): "
            "it computes longer on its host: on CPU 39% vs peers 20%, no contention, throttling or I/O explains it "
            "(runqueue 0% vs 0%)");
}

TEST(Detectors, StragglerNamedAloneAfterTwoEvaluationsWithEvidence) {
  Replay r;
  r.host[105] = 2.9;
  r.join();
  StragglerDetector d;
  for (int i = 0; i < 20; ++i) r.step();
  auto ev1 = d.evaluate(r.signals(), 1000);
  EXPECT_TRUE(ev1.empty());  // one evaluation is not enough: noise must not flap it
  EXPECT_FALSE(d.state(105).straggler);
  for (int i = 0; i < 5; ++i) r.step();
  auto ev2 = d.evaluate(r.signals(), 1001);
  ASSERT_EQ(ev2.size(), 1u);
  EXPECT_TRUE(d.state(105).straggler);
  for (int p = 0; p < 8; ++p)
    if (p != 5) {
      EXPECT_FALSE(d.state(100 + p).straggler) << p;
    }
  EXPECT_EQ(ev2[0].kind, EventKind::kStraggler);
  EXPECT_EQ(ev2[0].rank, 5);
  EXPECT_NE(ev2[0].summary.find("rank 5 of job llm-7 issues its collectives 190 ms after the earliest rank at 100% of "
                                "them (step 295 ms): its host is slow"),
            std::string::npos)
      << ev2[0].summary;
  EXPECT_NEAR(d.state(105).score, 0.190 / 0.295, 1e-9);  // behind by 0.64 of a step
  EXPECT_EQ(ev2[0].evidence["peers"].size(), 8u);
  EXPECT_EQ(ev2[0].evidence["window_seconds"], 10);
  // The flag holds while it is slow, without repeating the event.
  for (int i = 0; i < 5; ++i) r.step();
  EXPECT_TRUE(d.evaluate(r.signals(), 1002).empty());
  // Recovered: the flag falls after three clean evaluations.
  r.host.clear();
  for (int e = 0; e < 2; ++e) {
    for (int i = 0; i < 30; ++i) r.step();
    d.evaluate(r.signals(), 1003 + e);
  }
  EXPECT_TRUE(d.state(105).straggler);
  for (int i = 0; i < 30; ++i) r.step();
  d.evaluate(r.signals(), 1006);
  EXPECT_FALSE(d.state(105).straggler);
}

TEST(Detectors, SeveralStragglersAtOnce) {
  Replay r;
  r.host[102] = 2.0;
  r.host[106] = 3.0;
  r.join();
  StragglerDetector d;
  auto ev = r.run(d, 3);
  // Both issue late at every collective (behind the median rank) and wait less than their peers.
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
      s.sync_wait_ratio = 0.3 + noise(rng);
      s.coverage = 1;
      s.lag.spread_samples = 10;
      s.lag.late_fraction = 0.125 + noise(rng);
      s.lag.median_lag_s = 0.0005;
      s.lag.step_seconds = 0.1;
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
    s.sync_wait_ratio = p == 0 ? 0.95 : 0.5;  // rank 0 waits on everyone: never a straggler
    s.coverage = 1;
    sig.push_back(s);
  }
  RankSignal late;  // joined a moment ago: waits little so far, but is not judged yet
  late.pid = 9;
  late.job_id = "j";
  late.rank = 4;
  late.sync_wait_ratio = 0.0;
  late.coverage = 0.2;
  late.lag.spread_samples = 10;
  late.lag.late_fraction = 1;
  late.lag.median_lag_s = 0.5;
  sig.push_back(late);
  RankSignal alone;  // the only rank of its job here: the cross-node rules judge it
  alone.pid = 10;
  alone.job_id = "solo";
  alone.rank = 0;
  alone.sync_wait_ratio = 0.0;
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
  EXPECT_NE(ev[0].summary.find("collective #100 of job j has not moved for 10 s: rank 2, rank 3 (it died: signal 9) "
                               "never issued it; its peers here: 2 wait in a CUDA synchronize"),
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
  EXPECT_NE(ev[0].summary.find("rank 2 never issued it; its peers here: 3 in the collective call"), std::string::npos)
      << ev[0].summary;
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
  EXPECT_NE(ev2[0].summary.find("rank 2 never issued it; rank 3 (it died: signal 9) issued it and died before it finished"),
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

TEST(Detectors, EventsAsTheContractShapesThem) {
  AgentCounters caps;
  EventLog log(3, &caps);
  for (int i = 0; i < 5; ++i) {
    DetectedEvent e;
    e.time = 1700000000.25 + i;
    e.kind = EventKind::kStraggler;
    e.job_id = "j";
    e.rank = i;
    e.summary = "s";
    log.add(e);
  }
  EXPECT_EQ(caps.get(Cap::kDetectedEvents), 2u);
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
