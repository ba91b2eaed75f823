// The straggler detector on recorded event streams with injected time: the
// rank the others wait for, named alone, and why (host, sync, GPU, GC, what on
// its host). Every figure below is exact, none depends on the machine.
#include "userspace/detect/straggler_detector.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <stdexcept>
#include <string>

#include "tests/unit/detector_test_util.h"

namespace argus {
namespace {

using detect_testutil::kMs;
using detect_testutil::Mode;
using detect_testutil::Replay;

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
  // (With the GPU layer, a verdict on the GPU alone waits a window, 10 s, of
  // evaluations 1 s apart.)
  auto events = r.run(d, c.gpu_layer ? 14 : 4);
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
  // Two DataLoader workers a rank; rank 5's busier on CPU (evidence, not the decision).
  for (int p = 0; p < 8; ++p) r.workers[100 + p] = {true, 2, 5.0, p == 5 ? 1.9 : 0.3, 2e6, p == 5 ? 8e6 : 0.0};
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

// The input as the reason: a rank whose main thread waits for its next batch
// (off CPU) longer than its peers' by at least half of its lateness is a
// dataloader straggler; the same wait on every rank never is; GC that
// explains more wins.
struct InputCase {
  const char* name;
  Mode mode;
  bool kernel;                          // the kernel layer follows the ranks
  double input_others_ms, input_slow_ms;  // per step: rank 5's peers, rank 5
  double host_slow;                     // rank 5's host factor besides its input
  double gc_slow_ms;                    // rank 5's GC per step (its peers' 0)
  bool looked;                          // the agent looks where the main threads are
  const char* reason;                   // "" = nobody
};
inline void PrintTo(const InputCase& c, std::ostream* os) { *os << c.name; }
class InputReason : public ::testing::TestWithParam<InputCase> {};

TEST_P(InputReason, DataloaderOnlyWhenItsInputWaitExplainsTheLag) {
  const InputCase c = GetParam();
  Replay r;
  r.mode = c.mode;
  r.with_kernel = c.kernel;
  r.with_gc = true;
  r.with_input = c.looked;
  for (int p = 0; p < 8; ++p) r.input_ms[100 + p] = c.input_others_ms;
  r.input_ms[105] = c.input_slow_ms;
  if (c.gc_slow_ms > 0) r.gc_ms[105] = c.gc_slow_ms;
  if (c.host_slow != 1.0) r.host[105] = c.host_slow;
  // Two DataLoader workers a rank; rank 5's busier on CPU (evidence, not the decision).
  for (int p = 0; p < 8; ++p) r.workers[100 + p] = {true, 2, 5.0, p == 5 ? 1.9 : 0.3, 2e6, p == 5 ? 8e6 : 0.0};
  r.join();
  StragglerDetector d;
  auto events = r.run(d, 4);
  if (*c.reason == '\0') {
    EXPECT_TRUE(events.empty()) << events.front().summary;
    return;
  }
  for (int p = 0; p < 8; ++p) EXPECT_EQ(d.state(100 + p).straggler, p == 5) << p;
  EXPECT_STREQ(label_of(d.state(105).reason), c.reason);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0].evidence["reason"], c.reason) << events[0].summary;
  if (std::string(c.reason) != "dataloader") return;
  const auto& input = events[0].evidence["host_cause"]["input"];
  EXPECT_EQ(events[0].evidence["host_cause"]["decided_by"], "input_excess");
  EXPECT_GE(input["explained_share"].get<double>(), 0.5);
  EXPECT_GT(input["in_dataloader_share"].get<double>(), input["peers_median_share"].get<double>());
  EXPECT_NEAR(input["excess_per_step_seconds"].get<double>(), (c.input_slow_ms - c.input_others_ms) / 1e3, 0.01);
  EXPECT_NE(events[0].summary.find("it waits for its input: its main thread was in its DataLoader's next batch at"),
            std::string::npos)
      << events[0].summary;
  EXPECT_EQ(input["workers"]["count"], 2);
  EXPECT_DOUBLE_EQ(input["workers"]["cpu_seconds_per_second"].get<double>(), 1.9);
  EXPECT_DOUBLE_EQ(input["workers"]["read_bytes_per_second"].get<double>(), 8e6);
  EXPECT_DOUBLE_EQ(input["peers_median_workers"]["cpu_seconds_per_second"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(input["peers_median_workers"]["read_bytes_per_second"].get<double>(), 0.0);
  EXPECT_NE(events[0].summary.find("its 2 DataLoader workers used 1.90 CPU-s/s (peers' 0.30) and read 2.0 MB/s (peers' 2.0)"),
            std::string::npos)
      << events[0].summary;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, InputReason,
    ::testing::Values(
        InputCase{"async_kernel_layer", Mode::Async, true, 1, 40, 1.0, 0, true, "dataloader"},
        InputCase{"blocking_kernel_layer", Mode::Blocking, true, 1, 40, 1.0, 0, true, "dataloader"},
        InputCase{"async_no_kernel_layer", Mode::Async, false, 1, 40, 1.0, 0, true, "dataloader"},
        // The same wait for input on every rank, and a slow host: never the input.
        InputCase{"equal_input_slow_host", Mode::Async, true, 20, 20, 1.5, 0, true, "compute"},
        // Equal input everywhere and nobody slow: nobody.
        InputCase{"equal_input_balanced", Mode::Async, true, 20, 20, 1.0, 0, true, ""},
        // GC explains more than its input (30 ms against 10): gc_pause.
        InputCase{"gc_larger_than_input", Mode::Async, true, 0, 10, 1.0, 30, true, "gc_pause"},
        // A rank 3 ms late a 25 ms step whose main thread was seen in its DataLoader at
        // 1 look of 25 (the healthy Gloo job that named one so): chance, not its input.
        InputCase{"one_look_is_chance", Mode::Async, true, 0, 1, 1.1, 0, true, "compute"},
        // The agent does not look (no Python layer): its wait is host time.
        InputCase{"not_looked", Mode::Async, true, 1, 40, 1.0, 0, false, "compute"}),
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
  // Its lag behind its peers' median arrival (at least the margin).
  EXPECT_NEAR(lag, std::max(ev.evidence["lag_margin_seconds"].get<double>(), ev.evidence["median_lag_seconds"].get<double>()),
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
      s.lag.step_seconds = 0.145;
      if (i == 1) detect_testutil::late_on(s, "c0", 0.040, 0.145);
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
            "rank 1 of job pair is late by 40 ms per step (step 145 ms; behind its peers at 100% of its last 20 steps): 29% "
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

// A slow GPU in a TP 2 x DP 4 job, no GPU layer, a loss.item() before the DP
// all-reduce (figures as the agent read them in the bench draw it missed).
// Its host is late on its TP pair, where no synchronize comes before a call
// (share 0.04); its synchronize before the DP all-reduce put it behind there
// (0.31, surely behind, not yet by the sign test's count). Its TP peer waits
// for it on the pair. It was called a victim of nobody, and never named.
TEST(Detectors, ASynchronizeThatShowsOnAnotherCommunicatorExplainsTheLag) {
  std::vector<RankSignal> sig(8);
  for (int i = 0; i < 8; ++i) {
    RankSignal& s = sig[i];
    s.pid = 600 + i;
    s.job_id = "tp";
    s.rank = i;
    s.coverage = 1;
    s.sync_wait_ratio = 0.20;
    s.lag.step_seconds = 0.085;
    for (const std::string& comm : {"tp" + std::to_string(i / 2), "dp" + std::to_string(i % 2)}) {
      CommLateness c;
      c.comm = comm;
      c.peers = comm.starts_with("tp") ? 1 : 3;
      c.bins = 40;
      c.late_share = c.early_share = 0.5;
      c.t_score = 0.3;
      c.offset_se_s = 0.001;
      s.lag.comms.push_back(c);
    }
  }
  auto comm = [&](int rank, const std::string& name) -> CommLateness& {
    for (auto& c : sig[rank].lag.comms)
      if (c.comm == name) return c;
    throw std::runtime_error("no " + name);
  };
  // Where a rank stands on a communicator: its median offset, t score,
  // sign-test chances, share of steps behind (or ahead) and synchronize excess.
  auto stands = [&](int rank, const std::string& name, double offset_s, double t, double p, double share,
                    double sync_excess) {
    CommLateness& c = comm(rank, name);
    c.median_offset_s = offset_s;
    c.t_score = t;
    (offset_s > 0 ? c.p_late : c.p_early) = p;
    (offset_s > 0 ? c.late_share : c.early_share) = share;
    c.late_sync_excess = sync_excess;
  };
  // Rank 6: late on its TP pair (tp3) by the tests, surely behind on dp0.
  stands(6, "tp3", 0.0064, 8.4, 7e-5, 0.88, 0.04);
  stands(6, "dp0", 0.0198, 7.2, 5e-4, 1, 0.31);
  sig[6].sync_wait_ratio = 0.23;
  // Rank 7 waits for it on the pair, and its own DP group waits for it in turn.
  stands(7, "tp3", -0.0064, -8.4, 1e-5, 0.88, 0);
  stands(7, "dp1", 0.0204, 8.6, 2e-4, 1, 0.52);
  sig[7].sync_wait_ratio = 0.22;

  StragglerDetector d;
  std::vector<DetectedEvent> events;
  for (int e = 0; e < 3; ++e)
    for (auto& x : d.evaluate(sig, 100 + e)) events.push_back(std::move(x));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].rank, 6) << events[0].summary;
  EXPECT_EQ(events[0].evidence.at("reason"), "sync") << events[0].summary;
  EXPECT_DOUBLE_EQ(events[0].evidence.at("late_sync_share").get<double>(), 0.31);
  EXPECT_EQ(events[0].evidence.at("late_sync_comm"), "dp0");
  EXPECT_NE(events[0].summary.find("it spent 31% of its lag on dp0 blocked in its own CUDA synchronize calls"),
            std::string::npos)
      << events[0].summary;
  EXPECT_NE(events[0].summary.find("rank 7 waits for it"), std::string::npos) << events[0].summary;
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
            "rank 3 of job llm-7 is late by 40 ms per step (step 145 ms; behind its peers at 100% of its last 40 steps): "
            "28% of its time runnable but waiting for a CPU (pid 812 `stress-ng` took it), peers 0%");
  EXPECT_EQ(summary([](Replay& r) {
              r.runqueue_ms[103] = 30;
              r.throttled_ms[103] = 30;
            }),
            "rank 3 of job llm-7 is late by 30 ms per step (step 135 ms; behind its peers at 100% of its last 40 steps): "
            "its cgroup /job/rank3 was throttled 22% of the time (CPU quota), peers 0%");
  EXPECT_EQ(summary([](Replay& r) { r.io_ms[103] = 40; }),
            "rank 3 of job llm-7 is late by 40 ms per step (step 145 ms; behind its peers at 100% of its last 40 steps): "
            "28% of its time blocked in block I/O, peers 0%");
  EXPECT_EQ(summary([](Replay& r) { r.host[103] = 2.0; }),
            "rank 3 of job llm-7 is late by 100 ms per step (step 205 ms; behind its peers at 100% of its last 40 steps): "
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
  EXPECT_NE(ev2[0].summary.find("rank 5 of job llm-7 arrives 190.0 ms behind its 7 peers on c0 at 100% of its last 26 "
                                "steps (step 295 ms): its host is slow"),
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
  detect_testutil::late_on(late, "c0", 0.5, 1.0, 4);
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

}  // namespace
}  // namespace argus
