// What libargus-cupti.so costs the training process: CPU to convert and batch
// CUPTI activity records (hand-built buffers of CUDA 13's own record structs,
// ~200 distinct kernel names) and to fire the USDT probes that hand batches to
// the agent. Everything runs on the thread CUPTI completes buffers on, never on
// a launching thread; nothing here needs a GPU.
//
//   cupti_inject_bench [benchmark flags]        the benchmarks below
//   cupti_inject_bench --fire-batches N [--lib PATH] [--names K] [--start-after-ms MS]
//       fire N batches of 256 kernel records through argus_cupti_process_buffer
//       of the real library (ARGUS_BUILD_DIR/lib/libargus-cupti.so), print
//       ns per batch and the library's counters; time it with and without an
//       agent attached to compare. --start-after-ms: wait first (untimed), so
//       that an agent has found and tracked the process: it takes only the
//       batches of processes it tracks, and a run lasts a few milliseconds.
//
// Benchmarks:
//   BM_ConvertBatch/100000      convert + batch, in process, a no-op sink: pure logic
//   BM_SoProcessBuffer/100000   the library's buffer-completed path (+ USDT sites, unattached)
//   BM_SoProcessBuffer/256      one batch's worth: the per-batch cost
//   BM_UsdtFireBatch            STAP_PROBE3 with a batch's arguments, nobody attached
//   BM_NoopBatch                the same arguments through an empty asm: the baseline
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <sys/sdt.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bpf/argus_gpu_wire.h"

#ifdef ARGUS_HAVE_CUPTI
#include "gpu/cupti_convert.h"
#include "gpu/cupti_hooks.h"

namespace {

using namespace argus::gpu;

std::string g_lib = std::string(ARGUS_BUILD_DIR) + "/lib/libargus-cupti.so";
argus_cupti_process_buffer_fn g_process = nullptr;
argus_cupti_stats_fn g_stats = nullptr;

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// ~200 names shaped like a real training step's: ATen elementwise/reduce
// templates, cuBLAS/cutlass GEMMs, flash attention, NCCL.
const std::vector<std::string>& kernel_names(size_t k) {
  static std::vector<std::string> names;
  static size_t made = 0;
  if (made == k) return names;
  names.clear();
  const char* stems[] = {"vectorized_elementwise_kernel", "reduce_kernel", "unrolled_elementwise_kernel",
                         "index_elementwise_kernel", "cunn_SoftMaxForward", "layer_norm_kernel"};
  for (size_t i = 0; names.size() < k; ++i) {
    std::string s;
    switch (i % 5) {
      case 0:
      case 1: {
        std::string stem = std::string(stems[i % 6]) + std::to_string(i);
        s = "_ZN2at6native" + std::to_string(stem.size()) + stem +
            "ILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_";
        break;
      }
      case 2:
        s = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
            "kernel__5x_cublas_" + std::to_string(i);
        break;
      case 3:
        s = "_ZN5flash" + std::to_string(18 + std::to_string(i).size()) + "flash_fwd_kernel_v" +
            std::to_string(i) + "ILb1ELb0ELb0EEEvNS_16Flash_fwd_paramsE";
        break;
      default: {
        const char* ops[] = {"AllReduce_Sum_bf16_RING_LL", "ReduceScatter_Sum_bf16_RING_LL", "AllGather_RING_LL",
                             "SendRecv"};
        std::string id = std::string("ncclDevKernel_") + ops[i % 4] + "_" + std::to_string(i);
        s = "_Z" + std::to_string(id.size()) + id + "24ncclDevKernelArgsStorageILm4096EE";
      }
    }
    names.push_back(s);
  }
  made = k;
  return names;
}

// n kernel records (and a memcpy every 16th), names cycling over k.
PackedBuffer make_buffer(size_t n, size_t k) {
  const auto& names = kernel_names(k);
  PackedBuffer buf;
  uint64_t t = 1796222604392989656ull;  // CUPTI's default clock is CLOCK_REALTIME
  for (size_t i = 0; i < n; ++i) {
    if (i % 16 == 15) {
      MemcpyRecord m{};
      m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
      m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
      m.bytes = 1 << 20;
      m.start = t;
      m.end = t + 9000;
      m.streamId = 7;
      m.correlationId = static_cast<uint32_t>(i + 1);
      buf.add(m);
    } else {
      KernelRecord r{};
      r.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      r.name = names[(i * 7) % names.size()].c_str();
      r.start = t;
      r.end = t + 4000;
      r.streamId = 7;
      r.correlationId = static_cast<uint32_t>(i + 1);
      r.gridX = 1024;
      r.blockX = 256;
      buf.add(r);
    }
    t += 5000;
  }
  return buf;
}

struct NullSink final : Sink {
  uint64_t n = 0;
  void on_name(uint32_t id, const char*) noexcept override { n += id; }
  void on_batch(const argus_gpu_rec* recs, uint32_t count, uint64_t) noexcept override {
    benchmark::DoNotOptimize(recs);
    n += count;
  }
};

bool load_lib() {
  if (g_process) return true;
  void* h = dlopen(g_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "cupti_inject_bench: %s\n", dlerror());
    return false;
  }
  g_process = reinterpret_cast<argus_cupti_process_buffer_fn>(dlsym(h, "argus_cupti_process_buffer"));
  g_stats = reinterpret_cast<argus_cupti_stats_fn>(dlsym(h, "argus_cupti_stats"));
  return g_process && g_stats;
}

void BM_ConvertBatch(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  PackedBuffer buf = make_buffer(n, 200);
  NameTable names;
  Converter conv(names);
  conv.set_clock(ClockMap{-1796222600000000000ll});
  NullSink sink;
  process_buffer(conv, &packed_next_record, buf.data(), buf.size(), 0, sink);  // names seen: steady state
  for (auto _ : state) {
    auto r = process_buffer(conv, &packed_next_record, buf.data(), buf.size(), 0, sink);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_ConvertBatch)->Arg(100000)->Unit(benchmark::kMicrosecond);

void BM_SoProcessBuffer(benchmark::State& state) {
  if (!load_lib()) {
    state.SkipWithError("libargus-cupti.so not loadable");
    return;
  }
  const size_t n = static_cast<size_t>(state.range(0));
  PackedBuffer buf = make_buffer(n, 200);
  PackedBuffer warm = make_buffer(2000, 200);
  g_process(warm.data(), warm.size());
  for (auto _ : state) benchmark::DoNotOptimize(g_process(buf.data(), buf.size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_SoProcessBuffer)->Arg(100000)->Arg(256)->Unit(benchmark::kMicrosecond);

// The fire itself: with nobody attached a USDT site is a nop, plus whatever it
// takes to have its arguments in registers.
alignas(64) argus_gpu_rec g_batch[ARGUS_GPU_BATCH_MAX];

void BM_UsdtFireBatch(benchmark::State& state) {
  uint32_t n = ARGUS_GPU_BATCH_MAX;
  uint64_t dropped = 0;
  for (auto _ : state) {
    const argus_gpu_rec* recs = g_batch;
    benchmark::DoNotOptimize(recs);
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(dropped);
    // A provider of its own: this binary is not a producer the agent attaches to.
    STAP_PROBE3(argus_bench, gpu_batch, recs, n, dropped);
  }
}
BENCHMARK(BM_UsdtFireBatch);

void BM_NoopBatch(benchmark::State& state) {
  uint32_t n = ARGUS_GPU_BATCH_MAX;
  uint64_t dropped = 0;
  for (auto _ : state) {
    const argus_gpu_rec* recs = g_batch;
    benchmark::DoNotOptimize(recs);
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(dropped);
    asm volatile("" ::"r"(recs), "r"(n), "r"(dropped));
  }
}
BENCHMARK(BM_NoopBatch);

int fire_batches(long n, size_t names, long start_after_ms) {
  if (!load_lib()) return 2;
  if (start_after_ms > 0) {
    const timespec ts{start_after_ms / 1000, (start_after_ms % 1000) * 1000000L};
    nanosleep(&ts, nullptr);
  }
  PackedBuffer buf = make_buffer(ARGUS_GPU_BATCH_MAX, names);
  g_process(buf.data(), buf.size());  // names announced once, outside the timing
  struct argus_cupti_stats before{};
  g_stats(&before, sizeof before);
  uint64_t t0 = now_ns();
  long converted = 0;
  for (long i = 0; i < n; ++i) converted += g_process(buf.data(), buf.size());
  uint64_t dt = now_ns() - t0;
  struct argus_cupti_stats after{};
  g_stats(&after, sizeof after);
  std::printf("lib=%s\nbatches_requested=%ld\nrecords_per_batch=%d\nelapsed_ns=%llu\nns_per_batch=%.1f\n"
              "ns_per_record=%.2f\nbatches_fired=%llu\nrecords_fired=%llu\nnames_fired=%llu\n",
              g_lib.c_str(), n, ARGUS_GPU_BATCH_MAX, static_cast<unsigned long long>(dt),
              n ? static_cast<double>(dt) / static_cast<double>(n) : 0.0,
              converted ? static_cast<double>(dt) / static_cast<double>(converted) : 0.0,
              static_cast<unsigned long long>(after.batches - before.batches),
              static_cast<unsigned long long>(after.records - before.records),
              static_cast<unsigned long long>(after.names));
  return converted == n * static_cast<long>(ARGUS_GPU_BATCH_MAX) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  long fire = -1, start_after_ms = 0;
  size_t names = 200;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--fire-batches") == 0 && i + 1 < argc) {
      fire = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--lib") == 0 && i + 1 < argc) {
      g_lib = argv[++i];
    } else if (std::strcmp(argv[i], "--start-after-ms") == 0 && i + 1 < argc) {
      start_after_ms = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--names") == 0 && i + 1 < argc) {
      names = static_cast<size_t>(std::atol(argv[++i]));
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (fire >= 0) return fire_batches(fire, names ? names : 1, start_after_ms);
  int rargc = static_cast<int>(rest.size());
  benchmark::Initialize(&rargc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rargc, rest.data())) return 1;
  benchmark::AddCustomContext("cupti_lib", g_lib);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#else  // no CUPTI headers where this was built

int main() {
  std::printf("cupti_inject_bench: built without CUPTI headers (libargus-cupti.so not built); nothing to measure\n");
  return 0;
}

#endif
