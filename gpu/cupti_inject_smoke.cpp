// cupti_inject_smoke: loads libargus-cupti.so the way CUDA does (dlopen +
// InitializeInjection), keeps working like a training process would, optionally
// drives the buffer-completed path with hand-built CUPTI records, prints the
// library's counters as key=value lines and exits 0. Used by the unit tests and
// scripts/gpu-check.sh; needs no GPU.
//
//   cupti_inject_smoke LIB [--no-init] [--process N] [--names K] [--work-ms MS] [--delay-ms MS]
//
// --delay-ms: wait before driving the buffers (an agent attaching to the library meanwhile).
#include <dlfcn.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpu/cupti_convert.h"
#include "gpu/cupti_hooks.h"

static uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIB [--no-init] [--process N] [--names K] [--work-ms MS] [--delay-ms MS]\n",
                 argv[0]);
    return 2;
  }
  const char* lib = argv[1];
  bool init = true;
  long process = 0, names = 8, work_ms = 200, delay_ms = 0;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--no-init") init = false;
    else if (a == "--process" && i + 1 < argc) process = std::atol(argv[++i]);
    else if (a == "--names" && i + 1 < argc) names = std::atol(argv[++i]);
    else if (a == "--work-ms" && i + 1 < argc) work_ms = std::atol(argv[++i]);
    else if (a == "--delay-ms" && i + 1 < argc) delay_ms = std::atol(argv[++i]);
    else {
      std::fprintf(stderr, "bad argument: %s\n", a.c_str());
      return 2;
    }
  }
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "smoke: dlopen: %s\n", dlerror());
    return 3;
  }
  auto inj = reinterpret_cast<int (*)()>(dlsym(h, "InitializeInjection"));
  auto ver = reinterpret_cast<unsigned (*)()>(dlsym(h, "argus_gpu_wire_version"));
  auto proc = reinterpret_cast<argus_cupti_process_buffer_fn>(dlsym(h, "argus_cupti_process_buffer"));
  auto stats = reinterpret_cast<argus_cupti_stats_fn>(dlsym(h, "argus_cupti_stats"));
  if (!inj || !ver || !proc || !stats) {
    std::fprintf(stderr, "smoke: missing exports\n");
    return 3;
  }
  int init_rc = init ? inj() : 0;

  // "Training": a few threads doing arithmetic while the library does its thing.
  std::atomic<uint64_t> sink{0};
  std::vector<std::thread> workers;
  uint64_t until = now_ns() + static_cast<uint64_t>(work_ms) * 1000000ull;
  for (int t = 0; t < 2; ++t)
    workers.emplace_back([&] {
      uint64_t x = 1;
      while (now_ns() < until)
        for (int i = 0; i < 10000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
      sink += x;
    });

  int converted = 0;
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  if (process > 0) {
    argus::gpu::PackedBuffer buf;
    uint64_t t = now_ns();
    std::vector<std::string> kn;
    for (long i = 0; i < names; ++i) kn.push_back("smoke_kernel_" + std::to_string(i));
    for (long i = 0; i < process; ++i) {
      argus::gpu::KernelRecord k{};
      k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
      k.start = t + static_cast<uint64_t>(i) * 1000;
      k.end = k.start + 800;
      k.correlationId = static_cast<uint32_t>(i + 1);
      k.streamId = 7;
      k.name = kn[static_cast<size_t>(i % names)].c_str();
      buf.add(k);
    }
    converted = proc(buf.data(), buf.size());
  }
  for (auto& w : workers) w.join();

  struct argus_cupti_stats st{};
  stats(&st, sizeof st);
  std::printf("init_rc=%d\nwire_version=%u\nconverted=%d\nrecords=%llu\nbatches=%llu\nnames=%llu\n"
              "skipped=%llu\nactive=%d\ndisabled=%d\nclock_identity=%d\nwork=%llu\nkernels=%llu\n"
              "folded=%llu\nspans=%llu\nfolding=%d\nunheard=%llu\nlistening=%d\n",
              init_rc, ver(), converted, static_cast<unsigned long long>(st.records),
              static_cast<unsigned long long>(st.batches), static_cast<unsigned long long>(st.names),
              static_cast<unsigned long long>(st.skipped), st.active, st.disabled, st.clock_identity,
              static_cast<unsigned long long>(sink.load() & 1), static_cast<unsigned long long>(st.kernels),
              static_cast<unsigned long long>(st.folded), static_cast<unsigned long long>(st.spans), st.folding,
              static_cast<unsigned long long>(st.unheard), st.listening);
  std::fflush(stdout);
  return 0;
}
