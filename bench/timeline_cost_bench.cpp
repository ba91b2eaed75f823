// What the agent pays per GPU activity record: the per-rank timeline (gaps,
// bubbles, per-step sketches, recent records for the trace) fed in batches as
// the USDT producers send them, and the window figures computed per scrape.
// Also the same steps folded by the producer (gpu/gpu_fold.h): the agent's cost
// per kernel then, and what folding costs the producer per kernel.
// Run: build/bin/timeline_cost_bench  (no root, no GPU)
#include <benchmark/benchmark.h>

#include <vector>

#include "gpu/gpu_fold.h"
#include "userspace/gpu_timeline/timeline.h"

#include <memory>
#include <random>

namespace {

constexpr uint64_t kUs = 1000;

// One step of a rank: `kernels` compute kernels of `names` kinds, back to back
// with small gaps, then 8 NCCL kernels. Without `rng` the durations are harsh
// (each name's spread ~3x over 17 values); with it each name has its own shape,
// +-3% from call to call (the realistic case).
std::vector<argus_gpu_rec> make_step(uint64_t t0, int kernels, int names, std::mt19937* rng = nullptr) {
  std::uniform_int_distribution<int> jitter(0, 60);
  std::vector<argus_gpu_rec> v;
  uint64_t t = t0;
  for (int i = 0; i < kernels + 8; ++i) {
    argus_gpu_rec r{};
    const bool nccl = i >= kernels;
    const auto name = static_cast<uint32_t>(i % names);
    const uint64_t compute = rng ? (20 + (name % 17) * 3) * kUs / 10 * (970 + static_cast<uint64_t>(jitter(*rng))) / 1000
                                 : (20 + (i % 17) * 3) * kUs / 10;
    r.start_ns = t;
    r.end_ns = t + (nccl ? 40 * kUs : compute);
    r.name_id = nccl ? 1000 + (i - kernels) : 1 + name;
    r.stream_id = nccl ? 9 : 7;
    r.kind = ARGUS_GPU_KERNEL;
    r.flags = nccl ? ARGUS_GPU_F_NCCL : 0;
    r.correlation_id = static_cast<uint32_t>(i);
    v.push_back(r);
    t = r.end_ns + 2 * kUs;
  }
  return v;
}

struct FoldOut {
  std::vector<std::vector<argus_gpu_rec>> batches;
  uint64_t kernels = 0;
};
void collect(void* ctx, const argus_gpu_rec* recs, uint32_t n, uint64_t) {
  static_cast<FoldOut*>(ctx)->batches.emplace_back(recs, recs + n);
}

// The agent's side: 300 steps prepared before the clock runs, then fed to the
// timeline one step per iteration. Arg 1: 0 = the harsh durations of make_step,
// 1 = shaped names. Arg 2: 1 = folded by the producer in 4096-record buffers (as
// CUPTI completes them), 0 = every record sent, in batches of 256.
void BM_TimelineAddFolded(benchmark::State& state) {
  const int kernels = static_cast<int>(state.range(0));
  const bool shaped = state.range(1) != 0;
  const bool fold = state.range(2) != 0;
  constexpr int kSteps = 300;
  std::mt19937 rng(11);
  std::vector<FoldOut> steps(kSteps);
  std::vector<uint64_t> marks;
  auto folder = std::make_unique<argus_gpu_folder>();
  uint64_t t0 = 1'000'000'000'000ull, crossed = 0;
  for (auto& st : steps) {
    argus_fold_init(folder.get(), &collect, &st);
    marks.push_back(t0);
    auto recs = make_step(t0, kernels, 150, shaped ? &rng : nullptr);
    for (size_t off = 0; !fold && off < recs.size(); off += ARGUS_GPU_BATCH_MAX)
      st.batches.emplace_back(recs.begin() + static_cast<long>(off),
                              recs.begin() + static_cast<long>(std::min(recs.size(), off + ARGUS_GPU_BATCH_MAX)));
    for (size_t off = 0; fold && off < recs.size(); off += ARGUS_GPU_BATCH_MAX) {
      argus_fold_add(folder.get(), recs.data() + off, std::min<size_t>(ARGUS_GPU_BATCH_MAX, recs.size() - off), 0);
      if (off % 4096 == 4096 - ARGUS_GPU_BATCH_MAX) argus_fold_flush(folder.get());
    }
    if (fold) argus_fold_flush(folder.get());
    folder->frontier_ns = 0;  // each step is its own buffer here; the gap between steps is outside them
    st.kernels = recs.size();
    for (const auto& b : st.batches) crossed += b.size();
    t0 = recs.back().end_ns + 1000 * kUs;
  }
  argus::gpu::Timeline tl(argus::gpu::TimelineOptions{10, 60, 200000});
  size_t i = 0, fed = 0;
  for (auto _ : state) {
    auto& st = steps[i % kSteps];
    if (i < kSteps) tl.mark_step(marks[i]);
    for (auto& b : st.batches) tl.add_batch(b, 0, 0.1);  // a copy, as the decoder hands it over
    fed += st.kernels;
    ++i;
  }
  state.counters["ns_per_kernel"] =
      benchmark::Counter(static_cast<double>(fed), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["records_per_kernel"] = static_cast<double>(crossed) / static_cast<double>(kSteps * (kernels + 8));
  state.counters["sketch_bytes_per_step"] = tl.mean_step_bytes(100);
}
BENCHMARK(BM_TimelineAddFolded)
    ->ArgNames({"kernels", "shaped", "fold"})
    ->ArgsProduct({{200, 2000}, {0, 1}, {0, 1}})
    ->Iterations(300);

// What folding costs the producer per kernel (on the thread that completes CUPTI
// buffers, never one that launches work): argus_fold_add + a flush per 4096.
void BM_FoldKernels(benchmark::State& state) {
  std::mt19937 rng(5);
  auto recs = make_step(1'000'000'000'000ull, 4096 - 8, 150, &rng);
  auto folder = std::make_unique<argus_gpu_folder>();
  FoldOut sink;
  argus_fold_init(folder.get(), [](void*, const argus_gpu_rec*, uint32_t, uint64_t) {}, &sink);
  std::vector<argus_gpu_rec> chunk(ARGUS_GPU_BATCH_MAX);
  uint64_t shift = 0;
  size_t kernels = 0;
  for (auto _ : state) {
    for (size_t off = 0; off < recs.size(); off += ARGUS_GPU_BATCH_MAX) {
      const size_t n = std::min<size_t>(ARGUS_GPU_BATCH_MAX, recs.size() - off);
      for (size_t j = 0; j < n; ++j) {
        chunk[j] = recs[off + j];
        chunk[j].start_ns += shift;
        chunk[j].end_ns += shift;
      }
      argus_fold_add(folder.get(), chunk.data(), n, 0);
    }
    argus_fold_flush(folder.get());
    shift += recs.back().end_ns - recs.front().start_ns + 1000 * kUs;
    kernels += recs.size();
  }
  state.counters["ns_per_kernel"] =
      benchmark::Counter(static_cast<double>(kernels), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_FoldKernels);

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
