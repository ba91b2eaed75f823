// What the agent pays per GPU activity record: the per-rank timeline (gaps,
// bubbles, per-step sketches, recent records for the trace) fed in batches as
// the USDT producers send them, and the window figures computed per scrape.
// Run: build/bin/timeline_cost_bench  (no root, no GPU)
#include <benchmark/benchmark.h>

#include <vector>

#include "userspace/gpu_timeline/timeline.h"

namespace {

constexpr uint64_t kUs = 1000;

// One step of a realistic rank: `kernels` compute kernels of `names` kinds,
// back to back with small gaps, then 8 NCCL kernels.
std::vector<argus_gpu_rec> make_step(uint64_t t0, int kernels, int names) {
  std::vector<argus_gpu_rec> v;
  uint64_t t = t0;
  for (int i = 0; i < kernels + 8; ++i) {
    argus_gpu_rec r{};
    const bool nccl = i >= kernels;
    r.start_ns = t;
    r.end_ns = t + (nccl ? 400 : 20 + (i % 17) * 3) * kUs / 10;
    r.name_id = nccl ? 1000 + (i - kernels) : 1 + static_cast<uint32_t>(i % names);
    r.stream_id = nccl ? 9 : 7;
    r.kind = ARGUS_GPU_KERNEL;
    r.flags = nccl ? ARGUS_GPU_F_NCCL : 0;
    r.correlation_id = static_cast<uint32_t>(i);
    v.push_back(r);
    t = r.end_ns + 2 * kUs;
  }
  return v;
}

// Records per second through add_batch (256-record batches, as producers send them).
void BM_TimelineAddRecords(benchmark::State& state) {
  const int kernels = static_cast<int>(state.range(0));
  argus::gpu::Timeline tl(argus::gpu::TimelineOptions{10, 60, 200000});
  uint64_t t0 = 1'000'000'000'000ull;
  size_t records = 0;
  for (auto _ : state) {
    tl.mark_step(t0);
    auto step = make_step(t0, kernels, 150);
    for (size_t off = 0; off < step.size(); off += ARGUS_GPU_BATCH_MAX) {
      const size_t n = std::min<size_t>(ARGUS_GPU_BATCH_MAX, step.size() - off);
      tl.add_batch(std::vector<argus_gpu_rec>(step.begin() + off, step.begin() + off + n), 0, 0.1);
    }
    records += step.size();
    t0 = step.back().end_ns + 1000 * kUs;
  }
  state.counters["records_per_s"] = benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
  state.counters["ns_per_record"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["sketch_bytes_per_step"] = tl.mean_step_bytes(100);
}
BENCHMARK(BM_TimelineAddRecords)->Arg(200)->Arg(2000);

// One window evaluation (per scrape and per detector round) over 10 s of records.
void BM_TimelineWindow(benchmark::State& state) {
  argus::gpu::Timeline tl(argus::gpu::TimelineOptions{10, 60, 200000});
  uint64_t t0 = 1'000'000'000'000ull;
  const int steps = static_cast<int>(state.range(0));
  for (int s = 0; s < steps; ++s) {
    auto step = make_step(t0, 200, 150);
    const uint64_t next = step.back().end_ns + 1000 * kUs;
    step.resize(std::min<size_t>(step.size(), ARGUS_GPU_BATCH_MAX));
    tl.add_batch(std::move(step), 0, 0.1);
    t0 = next;
  }
  for (auto _ : state) benchmark::DoNotOptimize(tl.window(t0));
}
BENCHMARK(BM_TimelineWindow)->Arg(100);

}  // namespace

BENCHMARK_MAIN();
