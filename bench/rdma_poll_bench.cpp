// What one RdmaMonitor::poll() costs: 8 devices x 2 ports laid out by the simulator's IB
// fixture (sim/ib_fixture.h), the counters static while timing.
//
//   BM_RdmaPoll/reopen  open+read+close per file (what fixture trees get: their writers
//                       replace files by rename)
//   BM_RdmaPoll/hold    files held open, pread(0) per file (what the real /sys gets:
//                       FileMode::kAuto picks it on sysfs)
//   BM_RdmaSnapshot     snapshot() after a poll (what a scrape adds)
//
// The clock advances 1 s per poll, so rescans (every 10 s) and the slow counters (packets,
// hw_counters/: every 10th poll) come in at the rate they do at 1 Hz. The counter
// core_pct_at_1hz is CPU time per poll / 1 s, in percent of one core.
//
// Environment: ARGUS_BENCH_IB_DIR  where to lay the fixture (default: a new directory under
// /dev/shm, else the temp directory; removed at exit).
#include <benchmark/benchmark.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "sim/ib_fixture.h"
#include "rdma/rdma_monitor.h"
#include "userspace/common/clock.h"

namespace {

namespace fs = std::filesystem;

class StepClock : public argus::Clock {
 public:
  uint64_t monotonic_ns() const override { return ns; }
  double unix_seconds() const override { return 1.79e9 + static_cast<double>(ns) / 1e9; }
  uint64_t ns = 1'000'000'000'000ULL;
};

struct Fixture {
  std::string dir;
  bool owned = false;
  Fixture() {
    if (const char* d = std::getenv("ARGUS_BENCH_IB_DIR")) {
      dir = d;
    } else {
      const fs::path base = ::access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
      std::string tmpl = (base / "argus-rdma-bench-XXXXXX").string();
      if (::mkdtemp(tmpl.data())) dir = tmpl;
      owned = true;
    }
    argus::sim::IbFixture fx(dir, argus::sim::IbLayout::grid(8, 2), {});
    fx.lay_out();
    fx.advance(1.0, std::vector<uint64_t>(8, 300'000'000ULL));
    fx.write();
  }
  ~Fixture() {
    std::error_code ec;
    if (owned) fs::remove_all(dir, ec);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_RdmaPoll(benchmark::State& state) {
  StepClock clock;
  argus::rdma::MonitorOptions o;
  o.use_verbs = false;
  o.file_mode = state.range(0) ? argus::rdma::FileMode::kHold : argus::rdma::FileMode::kReopen;
  argus::rdma::RdmaMonitor m(fixture().dir, o, clock);
  m.poll();  // discovery, topology
  for (auto _ : state) {
    clock.ns += 1'000'000'000ULL;
    m.poll();
  }
  const auto snap = m.snapshot();
  if (snap.ports.size() != 16) state.SkipWithError("the fixture does not have 16 ports");
  state.SetLabel(state.range(0) ? "hold" : "reopen");
  state.counters["ports"] = static_cast<double>(snap.ports.size());
  // CPU seconds per poll at one poll a second, as % of a core.
  state.counters["core_pct_at_1hz"] =
      benchmark::Counter(static_cast<double>(state.iterations()) / 100.0,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_RdmaPoll)->Arg(0)->Arg(1)->MeasureProcessCPUTime()->Unit(benchmark::kMicrosecond);

void BM_RdmaSnapshot(benchmark::State& state) {
  StepClock clock;
  argus::rdma::MonitorOptions o;
  o.use_verbs = false;
  argus::rdma::RdmaMonitor m(fixture().dir, o, clock);
  m.poll();
  clock.ns += 1'000'000'000ULL;
  m.poll();
  for (auto _ : state) benchmark::DoNotOptimize(m.snapshot());
}
BENCHMARK(BM_RdmaSnapshot)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
