// libargus-cupti.so: the CUPTI injection library. CUDA calls InitializeInjection
// when CUDA_INJECTION64_PATH names this file. Completed activity buffers are
// converted to the wire format of bpf/argus_gpu_wire.h and handed to the agent
// through the USDT probes argus:gpu_name / argus:gpu_batch. By default compute
// kernels are folded (gpu/gpu_fold.h) once per buffer, so the agent's work is per
// span and collective, not per kernel; ARGUS_CUPTI_FOLD=0 sends every kernel.
//
// Rule one: the training process must never be harmed. Everything crossing the
// boundary is caught; any failure logs one "argus-cupti:" line and disables the
// library. libcupti is dlopen'ed, never linked.
#include <dlfcn.h>
// USDT semaphores (bpf/argus_gpu_wire.h, "Listening"): the kernel raises them
// while an agent's probe is attached.
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <cupti_version.h>

#include "gpu/cupti_convert.h"
#include "gpu/cupti_hooks.h"
#include "gpu/gpu_fold.h"

#define ARGUS_EXPORT extern "C" __attribute__((visibility("default")))

// Named by the probes' notes (provider_name_semaphore); written only by the kernel.
extern "C" {
__extension__ unsigned short argus_gpu_batch_semaphore __attribute__((unused, section(".probes"), visibility("hidden")));
__extension__ unsigned short argus_gpu_name_semaphore __attribute__((unused, section(".probes"), visibility("hidden")));
}

#ifndef ARGUS_CUPTI_TOOLKIT_LIBDIR
#define ARGUS_CUPTI_TOOLKIT_LIBDIR "/usr/local/cuda/lib64"
#endif

namespace {

using namespace argus::gpu;

constexpr size_t kBufferSize = 1u << 20;     // one CUPTI activity buffer
constexpr size_t kMaxBuffers = 64;           // outstanding at most: 64 MiB
constexpr auto kFlushPeriod = std::chrono::milliseconds(500);
constexpr auto kExitJoinWait = std::chrono::seconds(2);

struct CuptiApi {
  void* handle = nullptr;
  std::string path;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*register_timestamp)(CUpti_TimestampCallbackFunc) = nullptr;  // optional
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*num_dropped)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*get_timestamp)(uint64_t*) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;  // optional
  CUptiResult (*get_version)(uint32_t*) = nullptr;                    // optional
};

struct State {
  // Conversion (name table, clock) is serialised: CUPTI's worker thread, our
  // flush thread and the test hook may all complete buffers.
  std::mutex conv_mu;
  NameTable names;
  Converter conv{names};
  // Folding (under conv_mu); read once from ARGUS_CUPTI_FOLD.
  int folding = -1;
  argus_gpu_folder* folder = nullptr;
  std::vector<argus_gpu_rec> fold_scratch;

  std::atomic<bool> init_called{false};
  std::atomic<bool> active{false};
  std::atomic<bool> disabled{false};
  std::atomic<bool> clock_identity{false};
  std::atomic<int64_t> clock_offset{0};

  std::atomic<uint64_t> records{0}, batches{0}, names_fired{0}, skipped{0}, untimed{0}, dropped{0},
      buffers{0}, buffer_denied{0}, kernels{0}, folded{0}, spans{0}, unheard{0};
  argus_unheard unheard_since{};  // fired to nobody, not yet reported (under conv_mu)

  CuptiApi api;
  pid_t init_pid = 0;

  // Buffer pool.
  std::mutex pool_mu;
  std::vector<uint8_t*> free_buffers;
  size_t outstanding = 0;

  // Flush thread.
  std::mutex flush_mu;
  std::condition_variable flush_cv;
  bool flush_stop = false;
  bool flush_done = false;
  // The flush thread ticks: only then may a folded span wait for the next buffer
  // (a tick ends it once old). Hand-built buffers and the exit flush end it at once.
  std::atomic<bool> ticking{false};
  std::thread* flush_thread = nullptr;
};

// Never destroyed: CUPTI may call back while the process exits.
State& S() {
  static State* s = new State;
  return *s;
}

void log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void log_line(const char* fmt, ...) {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "argus-cupti: ");
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - static_cast<size_t>(n) - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : std::min<size_t>(static_cast<size_t>(m), sizeof buf - static_cast<size_t>(n) - 2));
  buf[len++] = '\n';
  ssize_t w = ::write(STDERR_FILENO, buf, len);
  (void)w;
}

// The one line, once.
void disable_with(const std::string& why) {
  State& s = S();
  s.active.store(false);
  if (!s.disabled.exchange(true)) log_line("disabled: %s", why.c_str());
}

std::string result_name(CUptiResult r) {
  const char* str = nullptr;
  if (S().api.result_string && S().api.result_string(r, &str) == CUPTI_SUCCESS && str) return str;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t CUPTIAPI monotonic_timestamp() { return monotonic_ns(); }

// offset = CLOCK_MONOTONIC - cuptiGetTimestamp, from the tightest of a few brackets.
bool measure_offset(int64_t* out) {
  State& s = S();
  uint64_t best_width = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    uint64_t a = monotonic_ns();
    uint64_t c = 0;
    if (s.api.get_timestamp(&c) != CUPTI_SUCCESS || c == 0) return false;
    uint64_t b = monotonic_ns();
    if (b - a < best_width) {
      best_width = b - a;
      *out = static_cast<int64_t>(a + (b - a) / 2) - static_cast<int64_t>(c);
    }
  }
  return true;
}

// Both probes: the agent attaches gpu_batch, then gpu_name, and needs the names too.
bool agent_listening() {
  return __atomic_load_n(&argus_gpu_batch_semaphore, __ATOMIC_RELAXED) != 0 &&
         __atomic_load_n(&argus_gpu_name_semaphore, __ATOMIC_RELAXED) != 0;
}

// Always called with conv_mu held (the converter's and the folder's output).
class UsdtSink final : public Sink {
 public:
  void on_name(uint32_t id, const char* name) noexcept override {
    if (!agent_listening()) {
      S().unheard_since.names_stale = 1;  // announced again once someone listens
      return;
    }
    fire_name(id, name);
  }
  void on_batch(const argus_gpu_rec* recs, uint32_t n, uint64_t dropped) noexcept override {
    State& s = S();
    if (!agent_listening()) {  // counted, and reported to the next agent
      argus_unheard_add(&s.unheard_since, recs, n, dropped);
      s.unheard.fetch_add(n, std::memory_order_relaxed);
      return;
    }
    if (s.unheard_since.names_stale) {
      s.names.for_each([](uint32_t id, const char* name) { fire_name(id, name); });
      s.unheard_since.names_stale = 0;
    }
    argus_gpu_rec u;
    uint64_t u_dropped = 0;
    if (argus_unheard_take(&s.unheard_since, &u, &u_dropped)) fire(&u, 1, u_dropped);
    fire(recs, n, dropped);
  }

 private:
  static void fire_name(uint32_t id, const char* name) {
    STAP_PROBE2(argus, gpu_name, id, name);
    S().names_fired.fetch_add(1, std::memory_order_relaxed);
  }
  static void fire(const argus_gpu_rec* recs, uint32_t n, uint64_t dropped) {
    STAP_PROBE3(argus, gpu_batch, recs, n, dropped);
    State& s = S();
    s.batches.fetch_add(1, std::memory_order_relaxed);
    s.records.fetch_add(n, std::memory_order_relaxed);
    s.dropped.fetch_add(dropped, std::memory_order_relaxed);
  }
};

void fire_folded(void*, const argus_gpu_rec* recs, uint32_t n, uint64_t dropped) {
  UsdtSink().on_batch(recs, n, dropped);
}

// Converted chunks go to the folder (names straight to the probe, so each is
// announced before the folded batch that uses it); one flush per buffer.
class FoldingSink final : public Sink {
 public:
  explicit FoldingSink(State& s) : s_(s) {}
  void on_name(uint32_t id, const char* name) noexcept override { UsdtSink().on_name(id, name); }
  void on_batch(const argus_gpu_rec* recs, uint32_t n, uint64_t dropped) noexcept override {
    s_.fold_scratch.assign(recs, recs + n);  // capacity reserved up front: no allocation here
    for (uint32_t i = 0; i < n; ++i) kernels_ += recs[i].kind == ARGUS_GPU_KERNEL;
    argus_fold_add(s_.folder, s_.fold_scratch.data(), n, dropped);
  }
  uint64_t kernels() const { return kernels_; }

 private:
  State& s_;
  uint64_t kernels_ = 0;
};

// Folding on unless ARGUS_CUPTI_FOLD=0; off (every kernel sent) if its state cannot be had.
bool folding_on(State& s) {
  if (s.folding < 0) {
    const char* v = std::getenv("ARGUS_CUPTI_FOLD");
    s.folding = !(v && std::strcmp(v, "0") == 0);
    if (s.folding) {
      try {
        s.fold_scratch.reserve(ARGUS_GPU_BATCH_MAX);
        s.folder = new argus_gpu_folder;
        argus_fold_init(s.folder, &fire_folded, nullptr);
      } catch (...) {
        s.folding = 0;
        log_line("folding off: no memory for its state; every kernel is sent");
      }
    }
  }
  return s.folding == 1;
}

int handle_buffer(uint8_t* buffer, size_t valid, uint64_t dropped) noexcept {
  try {
    State& s = S();
    // CUPTI's own walker once collection is on; the packed walker (same layout)
    // for hand-built buffers when it is not.
    NextRecordFn next = (s.active.load() && s.api.next_record) ? s.api.next_record : &packed_next_record;
    BufferResult r;
    {
      std::lock_guard<std::mutex> lk(s.conv_mu);
      ClockMap clock;
      clock.offset_ns = s.clock_identity.load() ? 0 : s.clock_offset.load();
      s.conv.set_clock(clock);
      if (folding_on(s)) {
        const argus_fold_stats before = s.folder->stats;
        FoldingSink sink(s);
        r = process_buffer(s.conv, next, buffer, valid, dropped, sink);
        if (s.ticking.load()) {
          argus_fold_end_buffer(s.folder, monotonic_ns());  // a young span goes on into the next buffer
        } else {
          argus_fold_flush(s.folder);
        }
        s.kernels.fetch_add(sink.kernels(), std::memory_order_relaxed);
        s.folded.fetch_add(s.folder->stats.folded - before.folded, std::memory_order_relaxed);
        s.spans.fetch_add(s.folder->stats.spans - before.spans, std::memory_order_relaxed);
      } else {
        UsdtSink sink;
        r = process_buffer(s.conv, next, buffer, valid, dropped, sink);
        s.kernels.fetch_add(r.kernels, std::memory_order_relaxed);
      }
    }
    s.buffers.fetch_add(1, std::memory_order_relaxed);
    s.skipped.fetch_add(r.skipped, std::memory_order_relaxed);
    s.untimed.fetch_add(r.untimed, std::memory_order_relaxed);
    return static_cast<int>(r.records);
  } catch (...) {
    return -1;
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) noexcept {
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  State& s = S();
  try {
    std::lock_guard<std::mutex> lk(s.pool_mu);
    if (!s.free_buffers.empty()) {
      *buffer = s.free_buffers.back();
      s.free_buffers.pop_back();
    } else if (s.outstanding < kMaxBuffers) {
      *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferSize));
      if (*buffer) ++s.outstanding;
    }
  } catch (...) {
    *buffer = nullptr;
  }
  if (*buffer) {
    *size = kBufferSize;
  } else {
    s.buffer_denied.fetch_add(1, std::memory_order_relaxed);  // CUPTI counts what it drops
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) noexcept {
  State& s = S();
  size_t dropped = 0;
  if (s.api.num_dropped && s.api.num_dropped(nullptr, 0, &dropped) != CUPTI_SUCCESS) dropped = 0;
  if (buffer) handle_buffer(buffer, valid, dropped);
  if (!buffer) return;
  try {
    std::lock_guard<std::mutex> lk(s.pool_mu);
    s.free_buffers.push_back(buffer);
    return;
  } catch (...) {
  }
  std::free(buffer);  // could not pool it (no memory): give it back instead
  std::lock_guard<std::mutex> lk(s.pool_mu);
  --s.outstanding;
}

// A span the folder kept open across buffers waits for the next one; the flush
// thread's tick closes it once it is old (the GPU went quiet), and the exit
// closes it whatever its age.
void end_folded_span(bool at_exit) noexcept {
  State& s = S();
  std::unique_lock<std::mutex> lk(s.conv_mu, std::try_to_lock);
  // At exit, never wait long on a thread stuck inside CUPTI with the lock held.
  for (int i = 0; !lk.owns_lock() && i < (at_exit ? 50 : 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    lk.try_lock();
  }
  if (!lk.owns_lock()) {
    if (at_exit) log_line("exit: conversion busy; the open span of folded kernels is not sent");
    return;  // the tick: the next buffer or tick closes it
  }
  if (s.folding != 1 || !s.folder) return;
  const argus_fold_stats before = s.folder->stats;
  if (at_exit) {
    argus_fold_flush(s.folder);
  } else {
    argus_fold_end_buffer(s.folder, monotonic_ns());
  }
  s.spans.fetch_add(s.folder->stats.spans - before.spans, std::memory_order_relaxed);
}

void flush_loop() noexcept {
  State& s = S();
  std::unique_lock<std::mutex> lk(s.flush_mu);
  while (!s.flush_stop) {
    s.flush_cv.wait_for(lk, kFlushPeriod, [&] { return s.flush_stop; });
    if (s.flush_stop) break;
    lk.unlock();
    if (s.active.load()) {
      if (!s.clock_identity.load()) {
        int64_t off = 0;
        if (measure_offset(&off)) s.clock_offset.store(off);
      }
      s.api.flush_all(0);
    }
    end_folded_span(false);
    lk.lock();
  }
  s.flush_done = true;
  s.flush_cv.notify_all();
}

void at_exit() noexcept {
  try {
    State& s = S();
    if (getpid() != s.init_pid) return;  // a forked child: no thread, no CUPTI of ours
    s.ticking.store(false);
    if (s.flush_thread) {
      std::unique_lock<std::mutex> lk(s.flush_mu);
      s.flush_stop = true;
      s.flush_cv.notify_all();
      bool done = s.flush_cv.wait_for(lk, kExitJoinWait, [&] { return s.flush_done; });
      lk.unlock();
      if (done) {
        s.flush_thread->join();
        delete s.flush_thread;
      } else {
        s.flush_thread->detach();  // stuck inside CUPTI: do not hold the exit up
      }
      s.flush_thread = nullptr;
    }
    if (s.active.load()) s.api.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    end_folded_span(true);
  } catch (...) {
  }
}

bool env_true(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

// Loads libcupti: ARGUS_CUPTI_LIB only (when set), else the usual names, else the
// toolkit's lib dir. Returns an empty string on success, else why not.
std::string load_cupti() {
  State& s = S();
  std::vector<std::string> candidates;
  if (const char* p = std::getenv("ARGUS_CUPTI_LIB"); p && *p) {
    candidates.emplace_back(p);
  } else {
    candidates = {"libcupti.so.13", "libcupti.so", ARGUS_CUPTI_TOOLKIT_LIBDIR "/libcupti.so.13",
                  ARGUS_CUPTI_TOOLKIT_LIBDIR "/libcupti.so"};
  }
  std::string first_error;
  for (const auto& c : candidates) {
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      s.api.handle = h;
      s.api.path = c;
      break;
    }
    if (first_error.empty()) {
      const char* e = dlerror();
      first_error = e ? e : c + ": not loadable";
    }
  }
  if (!s.api.handle) return "cannot load libcupti (" + first_error + ")";
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(s.api.handle, name));
    return fn != nullptr;
  };
  sym(s.api.register_timestamp, "cuptiActivityRegisterTimestampCallback");
  sym(s.api.result_string, "cuptiGetResultString");
  sym(s.api.get_version, "cuptiGetVersion");
  CuptiApi probe = s.api;  // required ones go in only once all resolve
  struct Need {
    const char* name;
    bool ok;
  } need[] = {
      {"cuptiActivityRegisterCallbacks", sym(probe.register_callbacks, "cuptiActivityRegisterCallbacks")},
      {"cuptiActivityEnable", sym(probe.enable, "cuptiActivityEnable")},
      {"cuptiActivityDisable", sym(probe.disable, "cuptiActivityDisable")},
      {"cuptiActivityFlushAll", sym(probe.flush_all, "cuptiActivityFlushAll")},
      {"cuptiActivityGetNextRecord", sym(probe.next_record, "cuptiActivityGetNextRecord")},
      {"cuptiActivityGetNumDroppedRecords", sym(probe.num_dropped, "cuptiActivityGetNumDroppedRecords")},
      {"cuptiGetTimestamp", sym(probe.get_timestamp, "cuptiGetTimestamp")},
  };
  for (const auto& n : need)
    if (!n.ok) return s.api.path + " lacks " + n.name;
  s.api = probe;
  return {};
}

void initialize() {
  State& s = S();
  if (s.init_called.exchange(true)) return;
  s.init_pid = getpid();
  if (env_true("ARGUS_CUPTI_DISABLE")) return disable_with("ARGUS_CUPTI_DISABLE is set");
  if (std::string why = load_cupti(); !why.empty()) return disable_with(why);

  const uint32_t built_major = CUPTI_API_VERSION / 10000;
  uint32_t version = 0;
  if (s.api.get_version && s.api.get_version(&version) == CUPTI_SUCCESS && version != 0 &&
      version / 10000 != built_major)
    return disable_with(s.api.path + " has CUPTI API version " + std::to_string(version) + ", built for " +
                        std::to_string(CUPTI_API_VERSION) + " (record layouts differ)");

  if (CUptiResult r = s.api.register_callbacks(&buffer_requested, &buffer_completed); r != CUPTI_SUCCESS)
    return disable_with("cuptiActivityRegisterCallbacks: " + result_name(r));

  if (s.api.register_timestamp && s.api.register_timestamp(&monotonic_timestamp) == CUPTI_SUCCESS) {
    s.clock_identity.store(true);
  } else {
    int64_t off = 0;
    if (!measure_offset(&off)) return disable_with("cuptiGetTimestamp failed: no clock to map GPU times");
    s.clock_offset.store(off);
  }

  const struct {
    CUpti_ActivityKind kind;
    const char* name;
  } kinds[] = {{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "CONCURRENT_KERNEL"},
               {CUPTI_ACTIVITY_KIND_MEMCPY, "MEMCPY"},
               {CUPTI_ACTIVITY_KIND_MEMSET, "MEMSET"}};
  size_t enabled = 0;
  for (const auto& k : kinds) {
    CUptiResult r = s.api.enable(k.kind);
    if (r != CUPTI_SUCCESS) {
      for (size_t i = 0; i < enabled; ++i) s.api.disable(kinds[i].kind);
      return disable_with(std::string("cuptiActivityEnable(") + k.name + "): " + result_name(r) +
                          " (no GPU/driver, or another CUPTI client holds it)");
    }
    ++enabled;
  }
  s.active.store(true);
  try {
    s.flush_thread = new std::thread(flush_loop);
    s.ticking.store(true);
  } catch (...) {
    for (const auto& k : kinds) s.api.disable(k.kind);
    return disable_with("cannot start the flush thread");
  }
  std::atexit([] { at_exit(); });
}

}  // namespace

ARGUS_EXPORT unsigned argus_gpu_wire_version(void) { return ARGUS_GPU_WIRE_VERSION; }

ARGUS_EXPORT int InitializeInjection(void) {
  try {
    initialize();
  } catch (...) {
    try {
      disable_with("internal error during initialisation");
    } catch (...) {
    }
  }
  return 1;  // never fail the CUDA initialisation that called us
}

ARGUS_EXPORT int argus_cupti_process_buffer(uint8_t* buffer, size_t valid_size) {
  if (!buffer && valid_size) return -1;
  return handle_buffer(buffer, valid_size, 0);
}

ARGUS_EXPORT int argus_cupti_stats(struct argus_cupti_stats* out, size_t size) {
  if (!out) return -1;
  State& s = S();
  struct argus_cupti_stats st{};
  st.records = s.records.load();
  st.batches = s.batches.load();
  st.names = s.names_fired.load();
  st.skipped = s.skipped.load();
  st.untimed = s.untimed.load();
  st.dropped = s.dropped.load();
  st.buffers = s.buffers.load();
  st.buffer_denied = s.buffer_denied.load();
  st.active = s.active.load() ? 1 : 0;
  st.disabled = s.disabled.load() ? 1 : 0;
  st.clock_identity = s.clock_identity.load() ? 1 : 0;
  st.clock_offset_ns = s.clock_offset.load();
  st.kernels = s.kernels.load();
  st.folded = s.folded.load();
  st.spans = s.spans.load();
  st.folding = s.folding == 1 ? 1 : 0;
  st.unheard = s.unheard.load();
  st.listening = agent_listening() ? 1 : 0;
  std::memcpy(out, &st, std::min(size, sizeof st));
  return 0;
}
