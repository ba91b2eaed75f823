// gpu/cupti_convert: CUPTI activity records (CUDA 13's own structs, built by
// hand) -> the GPU wire format. No GPU, no driver, no libcupti needed.
#ifdef ARGUS_HAVE_CUPTI

#include "gpu/cupti_convert.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace argus::gpu;

namespace {

KernelRecord kernel(const char* name, uint64_t start, uint64_t end, uint32_t corr = 1) {
  KernelRecord k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.name = name;
  k.start = start;
  k.end = end;
  k.correlationId = corr;
  k.deviceId = 3;
  k.streamId = 13;
  k.gridX = k.gridY = k.gridZ = 1;
  return k;
}

MemcpyRecord memcpy_rec(uint8_t copy_kind, uint64_t bytes, uint64_t start = 100, uint64_t end = 200) {
  MemcpyRecord m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = copy_kind;
  m.bytes = bytes;
  m.start = start;
  m.end = end;
  m.deviceId = 1;
  m.streamId = 7;
  m.correlationId = 42;
  return m;
}

struct Event {
  bool is_name;
  uint32_t id_or_n;
  uint64_t dropped;
  std::string name;
  std::vector<argus_gpu_rec> recs;
};

struct RecordingSink : Sink {
  std::vector<Event> events;
  void on_name(uint32_t id, const char* name) noexcept override { events.push_back({true, id, 0, name, {}}); }
  void on_batch(const argus_gpu_rec* recs, uint32_t n, uint64_t dropped) noexcept override {
    events.push_back({false, n, dropped, "", std::vector<argus_gpu_rec>(recs, recs + n)});
  }
  std::vector<Event> batches() const {
    std::vector<Event> b;
    for (const auto& e : events)
      if (!e.is_name) b.push_back(e);
    return b;
  }
};

}  // namespace

TEST(CuptiConvert, WireRecordIs40Bytes) {
  EXPECT_EQ(sizeof(argus_gpu_rec), 40u);
  EXPECT_EQ(record_size(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) % 8, 0u);
  EXPECT_GE(record_size(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), sizeof(KernelRecord));
  EXPECT_EQ(record_size(CUPTI_ACTIVITY_KIND_MEMCPY2), 0u);
}

TEST(CuptiConvert, KernelRecord) {
  NameTable names;
  Converter c(names);
  c.set_clock(ClockMap{1000});
  auto k = kernel("_Z9my_kernelPfi", 5000, 9000, 77);
  argus_gpu_rec out;
  NameTable::Ref ref;
  ASSERT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&k), &out, &ref), Outcome::kConverted);
  EXPECT_EQ(out.kind, ARGUS_GPU_KERNEL);
  EXPECT_EQ(out.start_ns, 6000u);
  EXPECT_EQ(out.end_ns, 10000u);
  EXPECT_EQ(out.bytes, 0u);
  EXPECT_EQ(out.correlation_id, 77u);
  EXPECT_EQ(out.device_id, 3u);
  EXPECT_EQ(out.stream_id, 13u);
  EXPECT_EQ(out.name_id, 1u);
  EXPECT_EQ(out.flags, 0u);
  EXPECT_TRUE(ref.is_new);
  EXPECT_STREQ(ref.display, "my_kernel(float*, int)");  // demangled for people

  // The old KERNEL kind carries the same struct.
  k.kind = CUPTI_ACTIVITY_KIND_KERNEL;
  ASSERT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&k), &out, &ref), Outcome::kConverted);
  EXPECT_EQ(out.name_id, 1u);
  EXPECT_FALSE(ref.is_new);
}

TEST(CuptiConvert, KernelWithoutNameIsUnnamed) {
  NameTable names;
  Converter c(names);
  auto k = kernel(nullptr, 10, 20);
  argus_gpu_rec out;
  NameTable::Ref ref;
  ASSERT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&k), &out, &ref), Outcome::kConverted);
  EXPECT_EQ(out.name_id, 0u);
  EXPECT_FALSE(ref.is_new);
}

TEST(CuptiConvert, MemcpyDirections) {
  const struct {
    CUpti_ActivityMemcpyKind cupti;
    argus_gpu_copy_dir dir;
  } cases[] = {
      {CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, ARGUS_GPU_COPY_HTOD},  {CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, ARGUS_GPU_COPY_DTOH},
      {CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, ARGUS_GPU_COPY_DTOD},  {CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, ARGUS_GPU_COPY_HTOH},
      {CUPTI_ACTIVITY_MEMCPY_KIND_PTOP, ARGUS_GPU_COPY_PTOP},  {CUPTI_ACTIVITY_MEMCPY_KIND_HTOA, ARGUS_GPU_COPY_HTOD},
      {CUPTI_ACTIVITY_MEMCPY_KIND_ATOH, ARGUS_GPU_COPY_DTOH},  {CUPTI_ACTIVITY_MEMCPY_KIND_ATOA, ARGUS_GPU_COPY_DTOD},
      {CUPTI_ACTIVITY_MEMCPY_KIND_ATOD, ARGUS_GPU_COPY_DTOD},  {CUPTI_ACTIVITY_MEMCPY_KIND_DTOA, ARGUS_GPU_COPY_DTOD},
      {CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN, ARGUS_GPU_COPY_OTHER},
  };
  NameTable names;
  Converter c(names);
  for (const auto& tc : cases) {
    auto m = memcpy_rec(static_cast<uint8_t>(tc.cupti), 1 << 20);
    argus_gpu_rec out;
    NameTable::Ref ref;
    ASSERT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&m), &out, &ref), Outcome::kConverted);
    EXPECT_EQ(out.kind, ARGUS_GPU_MEMCPY);
    EXPECT_EQ(out.bytes, 1u << 20);
    EXPECT_EQ(out.flags >> ARGUS_GPU_COPY_SHIFT, tc.dir) << "copyKind " << tc.cupti;
    EXPECT_EQ(out.flags & 0xF, 0);
    EXPECT_EQ(out.name_id, 0u);
    EXPECT_EQ(out.correlation_id, 42u);
    EXPECT_EQ(out.stream_id, 7u);
    EXPECT_EQ(out.device_id, 1u);
    EXPECT_EQ(out.start_ns, 100u);
    EXPECT_EQ(out.end_ns, 200u);
  }
}

TEST(CuptiConvert, Memset) {
  MemsetRecord m{};
  m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  m.bytes = 4096;
  m.value = 0;
  m.start = 300;
  m.end = 350;
  m.deviceId = 2;
  m.streamId = 9;
  m.correlationId = 5;
  NameTable names;
  Converter c(names);
  argus_gpu_rec out;
  NameTable::Ref ref;
  ASSERT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&m), &out, &ref), Outcome::kConverted);
  EXPECT_EQ(out.kind, ARGUS_GPU_MEMSET);
  EXPECT_EQ(out.bytes, 4096u);
  EXPECT_EQ(out.flags, 0u);
  EXPECT_EQ(out.device_id, 2u);
  EXPECT_EQ(out.stream_id, 9u);
  EXPECT_EQ(out.correlation_id, 5u);
  EXPECT_EQ(out.end_ns - out.start_ns, 50u);
}

TEST(CuptiConvert, UnknownKindAndUntimedAreSkipped) {
  NameTable names;
  Converter c(names);
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  argus_gpu_rec out;
  NameTable::Ref ref;
  EXPECT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&api), &out, &ref), Outcome::kSkippedKind);
  auto k = kernel("k", 0, 0);
  EXPECT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&k), &out, &ref), Outcome::kUntimed);
  EXPECT_EQ(names.size(), 0u);  // an untimed kernel does not announce its name
}

TEST(CuptiConvert, ClockMapping) {
  ClockMap id;
  EXPECT_EQ(id.map(123456789), 123456789u);
  EXPECT_EQ(id.map(0), 0u);
  // CUPTI's default clock is CLOCK_REALTIME: far ahead of CLOCK_MONOTONIC.
  const uint64_t realtime = 1796222604392989656ull, monotonic = 5000000000ull;
  ClockMap off{static_cast<int64_t>(monotonic) - static_cast<int64_t>(realtime)};
  EXPECT_EQ(off.map(realtime), monotonic);
  EXPECT_EQ(off.map(realtime + 1500), monotonic + 1500);
  EXPECT_EQ(off.map(0), 0u);          // "no timestamp" stays recognisable
  EXPECT_EQ(off.map(1000), 0u);       // never wraps below zero
  ClockMap ahead{250};
  EXPECT_EQ(ahead.map(1000), 1250u);

  NameTable names;
  Converter c(names);
  c.set_clock(off);
  auto k = kernel("k", realtime, realtime + 10);
  argus_gpu_rec out;
  NameTable::Ref ref;
  ASSERT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&k), &out, &ref), Outcome::kConverted);
  EXPECT_EQ(out.start_ns, monotonic);
  EXPECT_EQ(out.end_ns, monotonic + 10);
  auto bad = kernel("k", realtime + 10, realtime);  // end before start: clamp
  ASSERT_EQ(c.convert(reinterpret_cast<CUpti_Activity*>(&bad), &out, &ref), Outcome::kConverted);
  EXPECT_EQ(out.end_ns, out.start_ns);
}

TEST(CuptiConvert, NameInterning) {
  NameTable names;
  std::string a1 = "kernel_a", a2 = "kernel_a";  // same text, different storage
  auto r1 = names.intern(a1);
  auto r2 = names.intern("kernel_b");
  auto r3 = names.intern(a2);
  EXPECT_EQ(r1.id, 1u);
  EXPECT_TRUE(r1.is_new);
  EXPECT_EQ(r2.id, 2u);
  EXPECT_TRUE(r2.is_new);
  EXPECT_EQ(r3.id, 1u);
  EXPECT_FALSE(r3.is_new);
  EXPECT_STREQ(r3.display, "kernel_a");
  EXPECT_EQ(names.intern("").id, 0u);
  for (int i = 0; i < 100; ++i) names.intern("k" + std::to_string(i));
  EXPECT_EQ(names.intern("kernel_b").id, 2u);  // stable across growth
  EXPECT_EQ(names.size(), 102u);

  NameTable small(2);
  EXPECT_EQ(small.intern("x").id, 1u);
  EXPECT_EQ(small.intern("y").id, 2u);
  auto full = small.intern("ncclDevKernel_SendRecv");
  EXPECT_EQ(full.id, 0u);  // full table: unnamed, but flags survive
  EXPECT_FALSE(full.is_new);
  EXPECT_EQ(full.flags, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P);
  EXPECT_EQ(small.overflow(), 1u);
}

TEST(CuptiConvert, NcclFlags) {
  constexpr uint8_t N = ARGUS_GPU_F_NCCL, P = ARGUS_GPU_F_P2P, R = ARGUS_GPU_F_RECV;
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), N);
  EXPECT_EQ(classify_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"), N | P);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_SendRecv"), N | P);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_Recv"), N | P | R);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_Send_RING"), N | P | ARGUS_GPU_F_SEND);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"), N);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_AllGather_RING_LL"), N);
  // As CUPTI reports them: Itanium-mangled.
  EXPECT_EQ(classify_kernel_name("_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"), N | P);
  EXPECT_EQ(classify_kernel_name("_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE"), N);
  EXPECT_EQ(kernel_base_name("_Z22ncclDevKernel_SendRecv24ncclDevKernelArgsStorageILm4096EE"), "ncclDevKernel_SendRecv");
  // Not NCCL.
  EXPECT_EQ(classify_kernel_name("_Z9my_kernelPfi"), 0);
  EXPECT_EQ(classify_kernel_name("_ZN2at6native29vectorized_elementwise_kernelILi4EEEviT_"), 0);
  EXPECT_EQ(classify_kernel_name("volta_sgemm_128x64_nn"), 0);
  EXPECT_EQ(classify_kernel_name("my_ncclDevKernel_Recv"), 0);
  EXPECT_EQ(classify_kernel_name("_Z999nccl"), 0);  // malformed length: the raw name, not nccl-prefixed
  EXPECT_EQ(classify_kernel_name(""), 0);

  NameTable names;
  auto r = names.intern("ncclDevKernel_Recv");
  EXPECT_EQ(r.flags, N | P | R);
}

TEST(CuptiConvert, BatchSplitting) {
  std::vector<std::string> kn = {"k0", "k1", "k2"};
  for (uint32_t total : {0u, 1u, 255u, 256u, 257u, 1000u}) {
    PackedBuffer buf;
    for (uint32_t i = 0; i < total; ++i) {
      auto k = kernel(kn[i % 3].c_str(), 1000 + i, 1500 + i, i + 1);
      buf.add(k);
    }
    NameTable names;
    Converter c(names);
    RecordingSink sink;
    auto r = process_buffer(c, &packed_next_record, buf.data(), buf.size(), 0, sink);
    EXPECT_EQ(r.records, total);
    EXPECT_EQ(r.batches, (total + ARGUS_GPU_BATCH_MAX - 1) / ARGUS_GPU_BATCH_MAX) << total;
    EXPECT_EQ(r.names, std::min<uint32_t>(total, 3));
    uint32_t seen = 0, expect_corr = 1;
    for (const auto& b : sink.batches()) {
      EXPECT_LE(b.id_or_n, static_cast<uint32_t>(ARGUS_GPU_BATCH_MAX));
      EXPECT_GT(b.id_or_n, 0u);
      for (const auto& rec : b.recs) EXPECT_EQ(rec.correlation_id, expect_corr++);  // order kept
      seen += b.id_or_n;
    }
    EXPECT_EQ(seen, total);
    if (total == 1000) {
      auto bs = sink.batches();
      ASSERT_EQ(bs.size(), 4u);
      EXPECT_EQ(bs[0].id_or_n, 256u);
      EXPECT_EQ(bs[3].id_or_n, 1000u - 3 * 256u);
    }
  }
}

TEST(CuptiConvert, NamesAnnouncedOnceBeforeFirstUse) {
  PackedBuffer buf;
  std::vector<std::string> kn;
  for (int i = 0; i < 300; ++i) kn.push_back("kern_" + std::to_string(i % 200));
  for (int i = 0; i < 300; ++i) buf.add(kernel(kn[static_cast<size_t>(i)].c_str(), 10 + i, 20 + i));
  NameTable names;
  Converter c(names);
  RecordingSink sink;
  process_buffer(c, &packed_next_record, buf.data(), buf.size(), 0, sink);
  process_buffer(c, &packed_next_record, buf.data(), buf.size(), 0, sink);  // second buffer: no new names
  std::vector<bool> announced(201, false);
  int name_events = 0;
  for (const auto& e : sink.events) {
    if (e.is_name) {
      ASSERT_GE(e.id_or_n, 1u);
      ASSERT_LE(e.id_or_n, 200u);
      EXPECT_FALSE(announced[e.id_or_n]) << "announced twice: " << e.id_or_n;
      announced[e.id_or_n] = true;
      EXPECT_EQ(e.name, "kern_" + std::to_string(e.id_or_n - 1));
      ++name_events;
    } else {
      for (const auto& r : e.recs) EXPECT_TRUE(announced[r.name_id]) << "used before announced: " << r.name_id;
    }
  }
  EXPECT_EQ(name_events, 200);
}

TEST(CuptiConvert, DroppedRidesFirstBatchOnly) {
  PackedBuffer buf;
  for (int i = 0; i < 600; ++i) buf.add(memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 8));
  NameTable names;
  Converter c(names);
  RecordingSink sink;
  process_buffer(c, &packed_next_record, buf.data(), buf.size(), 17, sink);
  auto bs = sink.batches();
  ASSERT_EQ(bs.size(), 3u);
  EXPECT_EQ(bs[0].dropped, 17u);
  EXPECT_EQ(bs[1].dropped, 0u);
  EXPECT_EQ(bs[2].dropped, 0u);

  // Nothing to send but losses to report: one empty batch.
  RecordingSink s2;
  auto r = process_buffer(c, &packed_next_record, nullptr, 0, 5, s2);
  ASSERT_EQ(s2.batches().size(), 1u);
  EXPECT_EQ(s2.batches()[0].id_or_n, 0u);
  EXPECT_EQ(s2.batches()[0].dropped, 5u);
  EXPECT_EQ(r.batches, 1u);
  RecordingSink s3;
  process_buffer(c, &packed_next_record, nullptr, 0, 0, s3);
  EXPECT_TRUE(s3.events.empty());
}

// A walker over a list of records of any kind (the packed walker only knows
// the kinds we convert), to put unknown kinds into a "buffer".
namespace {
std::vector<CUpti_Activity*> g_list;
CUptiResult list_next(uint8_t*, size_t, CUpti_Activity** rec) {
  size_t i = 0;
  if (*rec) {
    while (i < g_list.size() && g_list[i] != *rec) ++i;
    ++i;
  }
  if (i >= g_list.size()) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *rec = g_list[i];
  return CUPTI_SUCCESS;
}
}  // namespace

TEST(CuptiConvert, MixedBufferCountsSkipped) {
  auto k = kernel("ncclDevKernel_Recv", 10, 20);
  auto m = memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 64);
  CUpti_ActivityAPI api{};
  api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  CUpti_ActivityAPI drv{};
  drv.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  auto untimed = kernel("x", 0, 0);
  g_list = {reinterpret_cast<CUpti_Activity*>(&api), reinterpret_cast<CUpti_Activity*>(&k),
            reinterpret_cast<CUpti_Activity*>(&drv), reinterpret_cast<CUpti_Activity*>(&m),
            reinterpret_cast<CUpti_Activity*>(&untimed)};
  uint8_t dummy[8] = {};
  NameTable names;
  Converter c(names);
  RecordingSink sink;
  auto r = process_buffer(c, &list_next, dummy, sizeof dummy, 0, sink);
  EXPECT_EQ(r.records, 2u);
  EXPECT_EQ(r.skipped, 2u);
  EXPECT_EQ(r.untimed, 1u);
  EXPECT_EQ(r.end, CUPTI_ERROR_MAX_LIMIT_REACHED);
  auto bs = sink.batches();
  ASSERT_EQ(bs.size(), 1u);
  ASSERT_EQ(bs[0].recs.size(), 2u);
  EXPECT_EQ(bs[0].recs[0].flags, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV);
  EXPECT_EQ(bs[0].recs[1].flags >> ARGUS_GPU_COPY_SHIFT, ARGUS_GPU_COPY_DTOH);
}

TEST(CuptiConvert, PackedWalker) {
  PackedBuffer buf;
  buf.add(kernel("a", 1, 2));
  buf.add(memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 1));
  MemsetRecord s{};
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  buf.add(s);
  std::vector<CUpti_ActivityKind> kinds;
  CUpti_Activity* rec = nullptr;
  CUptiResult st;
  while ((st = packed_next_record(buf.data(), buf.size(), &rec)) == CUPTI_SUCCESS) kinds.push_back(rec->kind);
  EXPECT_EQ(st, CUPTI_ERROR_MAX_LIMIT_REACHED);
  ASSERT_EQ(kinds.size(), 3u);
  EXPECT_EQ(kinds[0], CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  EXPECT_EQ(kinds[1], CUPTI_ACTIVITY_KIND_MEMCPY);
  EXPECT_EQ(kinds[2], CUPTI_ACTIVITY_KIND_MEMSET);
  // A truncated last record is reported as incomplete, never read past the end.
  rec = nullptr;
  size_t cut = buf.size() - 8;
  int n = 0;
  while ((st = packed_next_record(buf.data(), cut, &rec)) == CUPTI_SUCCESS) ++n;
  EXPECT_EQ(n, 2);
  EXPECT_EQ(st, CUPTI_ERROR_INVALID_KIND);
  rec = nullptr;
  EXPECT_EQ(packed_next_record(buf.data(), 0, &rec), CUPTI_ERROR_MAX_LIMIT_REACHED);
}

// The layout hand-built buffers use is the one the real libcupti walks: same
// records, same addresses. (Skipped where the toolkit's libcupti is absent.)
TEST(CuptiConvert, PackedLayoutMatchesRealCupti) {
  std::string path = std::string(ARGUS_CUDA_ROOT) + "/lib64/libcupti.so.13";
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) h = dlopen((std::string(ARGUS_CUDA_ROOT) + "/lib/libcupti.so.13").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) GTEST_SKIP() << "no libcupti.so.13 under " << ARGUS_CUDA_ROOT;
  auto real = reinterpret_cast<NextRecordFn>(dlsym(h, "cuptiActivityGetNextRecord"));
  ASSERT_NE(real, nullptr);
  PackedBuffer buf;
  for (int i = 0; i < 5; ++i) {
    buf.add(kernel("a", 1, 2));
    buf.add(memcpy_rec(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 1));
    MemsetRecord s{};
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    buf.add(s);
  }
  CUpti_Activity *a = nullptr, *b = nullptr;
  int n = 0;
  for (;;) {
    CUptiResult ra = real(buf.data(), buf.size(), &a);
    CUptiResult rb = packed_next_record(buf.data(), buf.size(), &b);
    ASSERT_EQ(ra, rb);
    if (ra != CUPTI_SUCCESS) break;
    ASSERT_EQ(a, b);
    ++n;
  }
  EXPECT_EQ(n, 15);
}

#endif  // ARGUS_HAVE_CUPTI
