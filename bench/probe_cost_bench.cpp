// What a uprobe costs the traced process: cheap NCCL and CUDA API calls in the
// simulator's shims (libnccl.so.2, libcuda.so.1), timed in a loop, next to the
// two references that make the figure portable: a plain call through a
// function pointer and a getppid syscall. The binary never probes anything
// itself: bench/run.sh runs it unprobed, with argus-agent (default and deep
// probes), with bpftrace, and under an LD_PRELOAD interposer
// (bench/interpose_count.c), and computes the ratios between the runs. The
// measured calls are resolved through the global scope (RTLD_DEFAULT), as a
// program linked against the libraries would call them, so the interposer wins.
//
// Environment (read before the benchmarks run):
//   ARGUS_BENCH_NCCL_LIB     the NCCL library to dlopen (default: the shim in
//                            ARGUS_BUILD_DIR/lib/libnccl.so.2)
//   ARGUS_BENCH_CUDA_LIB     the CUDA driver library (default: the shim in
//                            ARGUS_BUILD_DIR/lib/libcuda.so.1)
//   ARGUS_BENCH_SETTLE_S     sleep this long after dlopen, before timing
//   ARGUS_BENCH_WAIT_PROBED  wait up to this many seconds until ncclAllReduce
//                            and cuStreamSynchronize are seen to be probed (a
//                            call costs far more than a plain call); exit 3 if not
//   ARGUS_BENCH_WAIT_LAUNCH=1  ... and cuLaunchKernel too (deep probes, bpftrace)
//   ARGUS_BENCH_EXPECT_UNPROBED=1  exit 3 if they look probed before the
//                            benchmarks or after them (another tracer, e.g. a
//                            node agent, found this process meanwhile)
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

// The C ABI of the few NCCL entry points used here (nccl.h of NCCL 2.28).
using ncclComm_t = void*;
using NcclGetVersionFn = int (*)(int*);
using NcclCommInitAllFn = int (*)(ncclComm_t*, int, const int*);
using NcclCommDestroyFn = int (*)(ncclComm_t);
using NcclAllReduceFn = int (*)(const void*, void*, size_t, int, int, ncclComm_t, void*);
using NcclGroupFn = int (*)();
constexpr int kNcclFloat32 = 7;
constexpr int kNcclSum = 0;

struct Nccl {
  void* handle = nullptr;
  std::string path;
  NcclGetVersionFn get_version = nullptr;
  NcclCommInitAllFn comm_init_all = nullptr;
  NcclCommDestroyFn comm_destroy = nullptr;
  NcclAllReduceFn all_reduce = nullptr;
  NcclGroupFn group_start = nullptr, group_end = nullptr;
  ncclComm_t comm = nullptr;  // a one-rank, in-process communicator: collectives never block
};
Nccl g_nccl;

// The CUDA driver API calls timed here (cuda.h's C ABI).
using CuInitFn = int (*)(unsigned);
using CuStreamSynchronizeFn = int (*)(void*);
using CuLaunchKernelFn = int (*)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                                 void**, void**);
struct Cuda {
  void* handle = nullptr;
  std::string path;
  CuStreamSynchronizeFn stream_synchronize = nullptr;
  CuLaunchKernelFn launch_kernel = nullptr;
};
Cuda g_cuda;

// Fake device buffers: the shim never touches them.
alignas(64) char g_send[64];
alignas(64) char g_recv[64];

__attribute__((noinline)) int noop_target(int x) {
  asm volatile("" ::: "memory");
  return x;
}
int (*volatile g_noop)(int) = noop_target;

// A symbol of `handle`, or (handle == RTLD_DEFAULT) of the global scope, where
// an LD_PRELOAD library comes first.
template <typename Fn>
Fn sym(void* handle, const std::string& path, const char* name) {
  void* p = dlsym(handle, name);
  if (p == nullptr) {
    std::fprintf(stderr, "probe_cost_bench: %s: no symbol %s\n", path.c_str(), name);
    std::exit(2);
  }
  return reinterpret_cast<Fn>(p);
}

void* open_global(const char* env_name, const std::string& fallback, std::string& path) {
  const char* env = std::getenv(env_name);
  path = (env != nullptr && *env != '\0') ? env : fallback;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    std::fprintf(stderr, "probe_cost_bench: cannot dlopen %s: %s\n", path.c_str(), dlerror());
    std::exit(2);
  }
  return h;
}

void load_cuda() {
  g_cuda.handle = open_global("ARGUS_BENCH_CUDA_LIB", std::string(ARGUS_BUILD_DIR) + "/lib/libcuda.so.1", g_cuda.path);
  if (sym<CuInitFn>(g_cuda.handle, g_cuda.path, "cuInit")(0) != 0) {
    std::fprintf(stderr, "probe_cost_bench: cuInit(0) failed in %s\n", g_cuda.path.c_str());
    std::exit(2);
  }
  g_cuda.stream_synchronize = sym<CuStreamSynchronizeFn>(RTLD_DEFAULT, g_cuda.path, "cuStreamSynchronize");
  g_cuda.launch_kernel = sym<CuLaunchKernelFn>(RTLD_DEFAULT, g_cuda.path, "cuLaunchKernel");
  if (g_cuda.stream_synchronize(nullptr) != 0) {
    std::fprintf(stderr, "probe_cost_bench: cuStreamSynchronize(0) failed in %s\n", g_cuda.path.c_str());
    std::exit(2);
  }
}

void load_nccl() {
  g_nccl.handle = open_global("ARGUS_BENCH_NCCL_LIB", std::string(ARGUS_BUILD_DIR) + "/lib/libnccl.so.2", g_nccl.path);
  g_nccl.get_version = sym<NcclGetVersionFn>(g_nccl.handle, g_nccl.path, "ncclGetVersion");
  g_nccl.comm_init_all = sym<NcclCommInitAllFn>(g_nccl.handle, g_nccl.path, "ncclCommInitAll");
  g_nccl.comm_destroy = sym<NcclCommDestroyFn>(g_nccl.handle, g_nccl.path, "ncclCommDestroy");
  g_nccl.all_reduce = sym<NcclAllReduceFn>(RTLD_DEFAULT, g_nccl.path, "ncclAllReduce");
  g_nccl.group_start = sym<NcclGroupFn>(RTLD_DEFAULT, g_nccl.path, "ncclGroupStart");
  g_nccl.group_end = sym<NcclGroupFn>(RTLD_DEFAULT, g_nccl.path, "ncclGroupEnd");
  const int dev = 0;
  if (g_nccl.comm_init_all(&g_nccl.comm, 1, &dev) != 0 || g_nccl.comm == nullptr) {
    std::fprintf(stderr, "probe_cost_bench: ncclCommInitAll(1 rank) failed\n");
    std::exit(2);
  }
  if (g_nccl.all_reduce(g_send, g_recv, 16, kNcclFloat32, kNcclSum, g_nccl.comm, nullptr) != 0) {
    std::fprintf(stderr, "probe_cost_bench: ncclAllReduce on a 1-rank communicator failed\n");
    std::exit(2);
  }
}

int all_reduce_once() {
  return g_nccl.all_reduce(g_send, g_recv, 16, kNcclFloat32, kNcclSum, g_nccl.comm, nullptr);
}

// The default stream, nothing queued: returns at once.
int stream_synchronize_once() { return g_cuda.stream_synchronize(nullptr); }

// A launch with an empty grid: refused (CUDA_ERROR_INVALID_VALUE) before
// anything is queued, so a loop of millions emulates no GPU work. The probes
// run the same path (the return probe records the error code).
int launch_kernel_once() {
  return g_cuda.launch_kernel(nullptr, 0, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
}

// ---- probe detection (a probed call costs a trap: orders of magnitude more) ----

template <typename F>
double best_ns_per_call(F&& f, int calls, int batches) {
  double best = 1e30;
  for (int b = 0; b < batches; b++) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; i++) f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / calls);
  }
  return best;
}

// Whether any uprobe has fired in this process: the kernel maps its
// out-of-line execution area, "[uprobes]", on the first hit. Exact, where
// timing is not (the sim's ncclAllReduce enqueues on an emulated stream and
// costs about a cheap syscall by itself).
bool uprobes_fired_here() {
  std::FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return false;
  char line[512];
  bool found = false;
  while (!found && std::fgets(line, sizeof(line), f) != nullptr) found = std::strstr(line, "[uprobes]") != nullptr;
  std::fclose(f);
  return found;
}

struct ProbeState {
  double threshold_ns, pair_threshold_ns, all_reduce_ns, sync_ns, launch_ns;
  bool fired = false;  // uprobes_fired_here()
  bool all_reduce() const { return all_reduce_ns > pair_threshold_ns; }
  bool sync() const { return sync_ns > pair_threshold_ns; }
  bool launch() const { return launch_ns > threshold_ns; }
  bool any() const { return fired || all_reduce() || sync() || launch(); }
  void say(const char* what) const {
    std::fprintf(stderr,
                 "probe_cost_bench: %s (ncclAllReduce %.0f ns, cuStreamSynchronize %.0f ns, cuLaunchKernel %.0f ns "
                 "per call; [uprobes] area %s)\n",
                 what, all_reduce_ns, sync_ns, launch_ns, fired ? "mapped" : "absent");
  }
};

ProbeState probe_state() {
  // A trap costs well above both a plain call (x100) and half a cheap syscall,
  // here and on bare metal; an unprobed shim call costs neither.
  const double noop = best_ns_per_call([] { benchmark::DoNotOptimize(g_noop(1)); }, 10000, 5);
  const double sys = best_ns_per_call([] { benchmark::DoNotOptimize(syscall(SYS_getppid)); }, 200, 5);
  ProbeState s{};
  s.threshold_ns = std::max(100 * noop, 0.5 * sys);
  // A probed ncclAllReduce or synchronize traps twice (entry and return):
  // several syscalls' worth; the shims' own work costs about one.
  s.pair_threshold_ns = std::max(s.threshold_ns, 4 * sys);
  s.all_reduce_ns = best_ns_per_call([] { benchmark::DoNotOptimize(all_reduce_once()); }, 50, 3);
  s.sync_ns = best_ns_per_call([] { benchmark::DoNotOptimize(stream_synchronize_once()); }, 50, 3);
  s.launch_ns = best_ns_per_call([] { benchmark::DoNotOptimize(launch_kernel_once()); }, 50, 3);
  s.fired = uprobes_fired_here();
  return s;
}

double env_seconds(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || s < 0 || s > 3600) {
    std::fprintf(stderr, "probe_cost_bench: %s must be seconds (0..3600), got '%s'\n", name, v);
    std::exit(2);
  }
  return s;
}

void prepare() {
  load_nccl();
  load_cuda();
  const double settle = env_seconds("ARGUS_BENCH_SETTLE_S");
  if (settle > 0) std::this_thread::sleep_for(std::chrono::duration<double>(settle));

  const double wait = env_seconds("ARGUS_BENCH_WAIT_PROBED");
  const char* wait_launch_env = std::getenv("ARGUS_BENCH_WAIT_LAUNCH");
  const bool wait_launch = wait_launch_env != nullptr && std::string(wait_launch_env) == "1";
  if (wait > 0) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      const ProbeState s = probe_state();
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s.all_reduce() && s.sync() && (!wait_launch || s.launch())) {
        char what[64];
        std::snprintf(what, sizeof(what), "probes seen after %.2f s", waited);
        s.say(what);
        break;
      }
      if (waited > wait) {
        char what[96];
        std::snprintf(what, sizeof(what), "not every probe seen within %.1f s", wait);
        s.say(what);
        std::exit(3);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  const char* expect_unprobed = std::getenv("ARGUS_BENCH_EXPECT_UNPROBED");
  if (expect_unprobed != nullptr && std::string(expect_unprobed) == "1") {
    const ProbeState s = probe_state();
    if (s.any()) {
      s.say("the shims are already probed");
      std::exit(3);
    }
  }
}

// ---- the benchmarks ----

void BM_NoopCall(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(g_noop(1));
}
BENCHMARK(BM_NoopCall);

void BM_SyscallGetppid(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(syscall(SYS_getppid));
}
BENCHMARK(BM_SyscallGetppid);

// Control: a shim call that no probe set covers costs the same probed or not.
void BM_NcclGetVersion(benchmark::State& state) {
  int v = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(g_nccl.get_version(&v));
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_NcclGetVersion);

// The realistic one: a collective on a one-rank communicator (returns at once).
// Probed with an entry uprobe and a uretprobe.
void BM_NcclAllReduce1Rank(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(all_reduce_once());
}
BENCHMARK(BM_NcclAllReduce1Rank);

// An empty group: ncclGroupStart + ncclGroupEnd, an entry probe each in both
// sets (a per-thread map update, no event). Two calls per iteration.
void BM_NcclGroupStartEnd(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(g_nccl.group_start());
    benchmark::DoNotOptimize(g_nccl.group_end());
  }
}
BENCHMARK(BM_NcclGroupStartEnd);

// The synchronize every async-NCCL rank waits in: entry + return in both sets.
void BM_CuStreamSynchronize(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(stream_synchronize_once());
}
BENCHMARK(BM_CuStreamSynchronize);

// The launch: unprobed by default, entry + return under --probes deep.
void BM_CuLaunchKernel(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(launch_kernel_once());
}
BENCHMARK(BM_CuLaunchKernel);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  prepare();
  benchmark::AddCustomContext("nccl_lib", g_nccl.path);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // A tracer that attached while we ran (another node agent finding this
  // process) would have made the "unprobed" figures wrong: say so, fail.
  const char* expect_unprobed = std::getenv("ARGUS_BENCH_EXPECT_UNPROBED");
  if (expect_unprobed != nullptr && std::string(expect_unprobed) == "1") {
    const ProbeState s = probe_state();
    if (s.any()) {
      s.say("the shims were probed by the end of the run: another tracer attached meanwhile");
      return 3;
    }
  }
  if (g_nccl.comm != nullptr) g_nccl.comm_destroy(g_nccl.comm);
  return 0;
}
