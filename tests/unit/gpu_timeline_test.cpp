// The GPU timeline on hand-built wire records: busy, idle, NCCL time, bubbles,
// step sketches. Every expected figure is computed from the records here.
#include "userspace/gpu_timeline/timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

#include "userspace/gpu_timeline/sketch.h"

namespace argus::gpu {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint64_t kT0 = 1'000'000 * kMs;  // an arbitrary CLOCK_MONOTONIC origin

argus_gpu_rec kernel(uint64_t start_ms, uint64_t end_ms, uint32_t name, uint8_t flags = 0, uint32_t stream = 1) {
  argus_gpu_rec r{};
  r.start_ns = kT0 + start_ms * kMs;
  r.end_ns = kT0 + end_ms * kMs;
  r.name_id = name;
  r.stream_id = stream;
  r.kind = ARGUS_GPU_KERNEL;
  r.flags = flags;
  return r;
}

TEST(GpuTimeline, BusyIdleAndNcclTimeOfOneWindow) {
  Timeline t(TimelineOptions{10});
  // step: compute 0-60, idle 60-70, nccl 70-90, idle 90-100; twice.
  std::vector<argus_gpu_rec> recs = {kernel(0, 60, 1), kernel(70, 90, 2, ARGUS_GPU_F_NCCL),
                                     kernel(100, 160, 1), kernel(170, 190, 2, ARGUS_GPU_F_NCCL)};
  t.add_batch(recs, 0, 0.1);
  const auto& tot = t.totals();
  EXPECT_EQ(tot.kernels, 4u);
  EXPECT_EQ(tot.kernel_ns, 160 * kMs);
  EXPECT_EQ(tot.nccl_kernel_ns, 40 * kMs);
  EXPECT_EQ(tot.idle_ns, 30 * kMs);  // 60-70, 90-100, 160-170
  EXPECT_EQ(tot.bubble_ns, 0u);
  const auto w = t.window(kT0 + 190 * kMs);
  ASSERT_TRUE(w.has_data);
  EXPECT_DOUBLE_EQ(w.span_s, 0.19);
  EXPECT_NEAR(w.busy_ratio, 160.0 / 190, 1e-12);
  EXPECT_NEAR(w.nccl_ratio, 40.0 / 190, 1e-12);
  EXPECT_NEAR(w.idle_s, 0.03, 1e-12);
}

TEST(GpuTimeline, OverlappingStreamsCountOnceAndOutOfOrderBatchesSort) {
  Timeline t;
  std::vector<argus_gpu_rec> recs = {kernel(20, 50, 3, 0, 2), kernel(0, 30, 1, 0, 1)};
  t.add_batch(recs, 0, 0);
  const auto w = t.window(kT0 + 50 * kMs);
  EXPECT_NEAR(w.busy_ratio, 1.0, 1e-12);  // union 0-50 of a 50 ms span
  EXPECT_EQ(t.totals().idle_ns, 0u);
  EXPECT_EQ(t.totals().kernel_ns, 60 * kMs);
}

// Batches come nearly sorted (a few records late: cheap moves) or in any order
// (the fallback): the figures are those of the sorted batch either way.
TEST(GpuTimeline, BatchesInAnyOrderGiveTheFiguresOfTheSortedOne) {
  std::vector<argus_gpu_rec> sorted;
  for (int i = 0; i < 200; ++i)
    sorted.push_back(kernel(i * 3, i * 3 + 2 + (i % 5 == 0 ? 2 : 0), 1 + i % 7, i % 9 == 0 ? ARGUS_GPU_F_NCCL : 0, i));
  std::vector<argus_gpu_rec> late_run = sorted;  // records 150..159 sent after 160..179
  std::rotate(late_run.begin() + 150, late_run.begin() + 160, late_run.begin() + 180);
  std::vector<argus_gpu_rec> reversed(sorted.rbegin(), sorted.rend());
  std::vector<argus_gpu_rec> shuffled = sorted;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(3));
  auto figures = [](const std::vector<argus_gpu_rec>& batch) {
    Timeline t;
    t.mark_step(kT0);
    t.mark_step(kT0 + 300 * kMs);
    t.add_batch(batch, 0, 0.1);
    t.mark_step(kT0 + 700 * kMs);
    t.add_batch({kernel(701, 702, 1)}, 0, 0.1);
    const auto w = t.window(kT0 + 600 * kMs);
    std::vector<uint8_t> sketches;
    for (const auto& st : t.steps()) sketches.insert(sketches.end(), st.sketch.begin(), st.sketch.end());
    return std::make_tuple(t.totals().idle_ns, t.totals().kernel_ns, w.busy_ratio, w.nccl_ratio, t.steps().size(),
                           sketches);
  };
  const auto want = figures(sorted);
  EXPECT_EQ(std::get<4>(want), 2u);
  EXPECT_GT(std::get<0>(want), 0u);
  EXPECT_EQ(figures(late_run), want);
  EXPECT_EQ(figures(reversed), want);
  EXPECT_EQ(figures(shuffled), want);
}

TEST(GpuTimeline, GapsEndingAtP2PKernelsAreBubbles) {
  Timeline t;
  std::vector<argus_gpu_rec> recs = {
      kernel(0, 50, 1),
      kernel(80, 82, 5, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV),  // 30 ms bubble
      kernel(82, 140, 1),
      kernel(145, 150, 2, ARGUS_GPU_F_NCCL),  // 5 ms plain idle
  };
  t.add_batch(recs, 0, 0.1);
  EXPECT_EQ(t.totals().bubble_ns, 30 * kMs);
  EXPECT_EQ(t.totals().idle_ns, 35 * kMs);
  const auto w = t.window(kT0 + 150 * kMs);
  EXPECT_NEAR(w.bubble_ratio, 30.0 / 150, 1e-12);
}

TEST(GpuTimeline, GapsBeforePureSendsAreNotBubblesAndGapsAreKeptForTheTrace) {
  Timeline t;
  std::vector<argus_gpu_rec> recs = {
      kernel(0, 10, 1),
      kernel(20, 21, 5, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | ARGUS_GPU_F_SEND),  // 10 ms: idle, not a bubble
      kernel(26, 27, 6, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P),                     // 5 ms before a SendRecv: bubble
      kernel(27, 40, 1),
  };
  t.add_batch(recs, 0, 0.1);
  EXPECT_EQ(t.totals().idle_ns, 15 * kMs);
  EXPECT_EQ(t.totals().bubble_ns, 5 * kMs);
  const auto gaps = t.gaps_since(0);
  ASSERT_EQ(gaps.size(), 2u);
  EXPECT_FALSE(gaps[0].bubble);
  EXPECT_TRUE(gaps[1].bubble);
  EXPECT_EQ(gaps[1].end_ns, kT0 + 26 * kMs);
  EXPECT_EQ(gaps[1].ns, 5 * kMs);
}

TEST(GpuTimeline, AProducerGoingBackInTimeStaysSortedAndCheap) {
  Timeline t(TimelineOptions{10, 60, 100000});
  std::vector<argus_gpu_rec> recs;
  for (int i = 0; i < 256; ++i) recs.push_back(kernel(i * 2, i * 2 + 1, 1));
  for (int fire = 0; fire < 200; ++fire) t.add_batch(recs, 0, 0.1);  // the same batch again
  EXPECT_EQ(t.totals().kernels, 256u * 200);
  const auto w = t.window(kT0 + 512 * kMs);
  EXPECT_NEAR(w.busy_ratio, 256.0 / 511, 1e-9);  // 1 ms of every 2, over 0..511 ms
}

TEST(GpuTimeline, LongGapsAreOutsideStepsAndOldDataGoesStale) {
  Timeline t(TimelineOptions{10, 60, 1000, 1.0});
  std::vector<argus_gpu_rec> a = {kernel(0, 10, 1)};
  std::vector<argus_gpu_rec> b = {kernel(5000, 5010, 1)};  // 5 s later: a checkpoint, not idle in a step
  t.add_batch(a, 0, 0.1);
  t.add_batch(b, 0, 0.1);
  EXPECT_EQ(t.totals().idle_ns, 0u);
  EXPECT_TRUE(t.window(kT0 + 6000 * kMs).has_data);
  EXPECT_FALSE(t.window(kT0 + 30000 * kMs).has_data);  // nothing for longer than a window
}

TEST(GpuTimeline, CopiesCountByDirectionAndLostRecordsAdd) {
  Timeline t;
  argus_gpu_rec c{};
  c.start_ns = kT0;
  c.end_ns = kT0 + kMs;
  c.kind = ARGUS_GPU_MEMCPY;
  c.bytes = 4096;
  c.flags = ARGUS_GPU_COPY_HTOD << ARGUS_GPU_COPY_SHIFT;
  argus_gpu_rec d = c;
  d.flags = ARGUS_GPU_COPY_DTOH << ARGUS_GPU_COPY_SHIFT;
  d.bytes = 100;
  argus_gpu_rec bad = c;
  bad.end_ns = bad.start_ns - 1;  // malformed: never counted
  std::vector<argus_gpu_rec> recs = {c, d, c, bad};
  t.add_batch(recs, 7, 0);
  EXPECT_EQ(t.totals().memcpys, 3u);
  EXPECT_EQ(t.totals().records, 3u);
  EXPECT_EQ(t.totals().malformed, 1u);
  EXPECT_EQ(t.totals().memcpy_bytes.at("htod"), 8192u);
  EXPECT_EQ(t.totals().memcpy_bytes.at("dtoh"), 100u);
  EXPECT_EQ(t.totals().dropped, 7u);
  EXPECT_EQ(t.totals().kernels, 0u);
}

TEST(GpuTimeline, StepMarksCloseOneSketchPerStep) {
  Timeline t;
  for (int s = 0; s < 5; ++s) {
    t.mark_step(kT0 + s * 100 * kMs);
    std::vector<argus_gpu_rec> recs;
    for (int k = 0; k < 8; ++k) recs.push_back(kernel(s * 100 + k * 10, s * 100 + k * 10 + 5 + (k % 2), 1 + k % 4));
    t.add_batch(recs, 0, 0.1);
  }
  t.mark_step(kT0 + 500 * kMs);
  std::vector<argus_gpu_rec> next = {kernel(500, 505, 1)};
  t.add_batch(next, 0, 0.1);
  ASSERT_EQ(t.steps().size(), 5u);
  for (const auto& s : t.steps()) {
    auto sk = StepSketch::decode(s.sketch);
    ASSERT_TRUE(sk.has_value());
    uint64_t n = 0;
    for (const auto& [id, k] : sk->kernels()) n += k.count;
    EXPECT_EQ(n, 8u);
    EXPECT_EQ(sk->kernels().size(), 4u);
  }
  EXPECT_GT(t.mean_step_bytes(100), 0);
  EXPECT_LT(t.mean_step_bytes(100), 100);
}

// A producer that never calls NCCL (inference, one GPU, Gloo) sends no step
// marks: its sketch closes on time, so it never grows with every kernel.
TEST(GpuTimeline, ASketchWithNoStepMarkClosesOnTime) {
  AgentCounters caps;
  TimelineOptions o;
  o.max_step_seconds = 60;
  o.caps = &caps;
  Timeline t(o);
  for (int s = 0; s < 200; ++s) {  // 200 s, one batch a second, no collective ever
    std::vector<argus_gpu_rec> recs;
    for (int k = 0; k < 100; ++k) recs.push_back(kernel(s * 1000 + k * 10, s * 1000 + k * 10 + 5, 1 + k % 3));
    t.add_batch(recs, 0, 0);
  }
  // Closed at 60, 120 and 180 s: three sketches of 60 s of kernels each.
  ASSERT_EQ(t.steps().size(), 3u);
  EXPECT_EQ(caps.get(Cap::kStepSketchTime), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const auto& step = t.steps()[i];
    EXPECT_EQ(step.start_ns, kT0 + i * 60'000 * kMs);
    EXPECT_STREQ(step.closed_by, "time");
    auto sk = StepSketch::decode(step.sketch);
    ASSERT_TRUE(sk.has_value());
    uint64_t n = 0;
    for (const auto& [id, k] : sk->kernels()) n += k.count;
    EXPECT_EQ(n, 60u * 100);
  }
}

TEST(GpuTimeline, ASketchClosesAtItsKernelCap) {
  AgentCounters caps;
  TimelineOptions o;
  o.max_step_kernels = 100;
  o.caps = &caps;
  Timeline t(o);
  t.mark_step(kT0);
  std::vector<argus_gpu_rec> recs;
  for (int k = 0; k < 250; ++k) recs.push_back(kernel(k, k + 1, 1));  // one long step, 250 kernels
  t.add_batch(recs, 0, 0);
  ASSERT_EQ(t.steps().size(), 2u);
  EXPECT_EQ(caps.get(Cap::kStepSketchRecords), 2u);
  EXPECT_EQ(t.steps()[0].start_ns, kT0);
  EXPECT_EQ(t.steps()[1].start_ns, kT0 + 100 * kMs);
  for (const auto& step : t.steps()) {
    EXPECT_STREQ(step.closed_by, "kernels");
    auto sk = StepSketch::decode(step.sketch);
    ASSERT_TRUE(sk.has_value());
    EXPECT_EQ(sk->kernels().at(1).count, 100u);
  }
}

TEST(GpuTimeline, KernelNamesPerRankAreCapped) {
  AgentCounters caps;
  TimelineOptions o;
  o.max_names = 2;
  o.caps = &caps;
  Timeline t(o);
  t.set_name(1, "gemm");
  t.set_name(2, "softmax");
  t.set_name(3, "one_too_many");
  t.set_name(2, "softmax_v2");  // a known id is updated, not refused
  EXPECT_EQ(t.names().size(), 2u);
  EXPECT_EQ(t.name(2), "softmax_v2");
  EXPECT_EQ(t.name(3), "kernel#3");
  EXPECT_EQ(caps.get(Cap::kKernelNames), 1u);
}

TEST(GpuTimeline, TraceRecordsPastTheCapAreCounted) {
  AgentCounters caps;
  TimelineOptions o;
  o.max_records = 10;
  o.caps = &caps;
  Timeline t(o);
  std::vector<argus_gpu_rec> recs;
  for (int k = 0; k < 25; ++k) recs.push_back(kernel(k * 2, k * 2 + 1, 1));
  t.add_batch(recs, 0, 0);
  EXPECT_EQ(t.recent(0).size(), 10u);
  EXPECT_EQ(t.recent(0).front().start_ns, kT0 + 30 * kMs);  // the newest kept
  EXPECT_EQ(caps.get(Cap::kGpuTraceRecords), 15u);
  EXPECT_EQ(caps.get(Cap::kGpuGaps), 14u);  // 24 gaps, 10 kept for the trace
}

// The window's figures come from running sums: a scrape looks at a few spans,
// however many kernels the window holds, and gets what a full scan gets.
TEST(GpuTimeline, WindowIsIncrementalNotAScanOfTheRecords) {
  Timeline t(TimelineOptions{10});
  std::vector<argus_gpu_rec> all;
  for (int b = 0; b < 400; ++b) {  // 20 s of 50k kernels (two streams overlap), in batches of 250
    std::vector<argus_gpu_rec> recs;
    for (uint64_t k = 0; k < 125; ++k) {
      const uint64_t at = kT0 + static_cast<uint64_t>(b) * 50 * kMs + k * 400'000;  // every 400 us
      argus_gpu_rec a = kernel(0, 0, 1, (k % 7 == 0) ? ARGUS_GPU_F_NCCL : 0, 1);
      a.start_ns = at;
      a.end_ns = at + 100'000 * (1 + k % 4);
      argus_gpu_rec c = kernel(0, 0, 2, 0, 2);
      c.start_ns = at + 150'000;
      c.end_ns = c.start_ns + 50'000 * (k % 3);
      recs.push_back(a);
      recs.push_back(c);
    }
    all.insert(all.end(), recs.begin(), recs.end());
    t.add_batch(recs, 0, 0.05);
  }
  const uint64_t now = kT0 + 20'000 * kMs;
  const auto w = t.window(now);
  ASSERT_TRUE(w.has_data);
  EXPECT_LE(t.window_visits(), 6u);  // a few front spans and gaps: O(1), not O(50k records)
  // The same figures from a full scan of the records here.
  const uint64_t hi = t.latest_end_ns(), lo = hi - 10'000 * kMs;
  auto union_of = [&](bool nccl_only) {
    std::vector<std::pair<uint64_t, uint64_t>> v;
    for (const auto& r : all)
      if (!nccl_only || (r.flags & ARGUS_GPU_F_NCCL)) v.push_back({std::max<uint64_t>(r.start_ns, lo), std::min<uint64_t>(r.end_ns, hi)});
    std::sort(v.begin(), v.end());
    uint64_t total = 0, cs = 0, ce = 0;
    bool open = false;
    for (auto [s, e] : v) {
      if (e <= s) continue;
      if (open && s <= ce) {
        ce = std::max(ce, e);
        continue;
      }
      if (open) total += ce - cs;
      cs = s;
      ce = e;
      open = true;
    }
    return open ? total + ce - cs : total;
  };
  const double span = static_cast<double>(hi - lo);
  EXPECT_NEAR(w.busy_ratio, static_cast<double>(union_of(false)) / span, 1e-12);
  EXPECT_NEAR(w.nccl_ratio, static_cast<double>(union_of(true)) / span, 1e-12);
  EXPECT_GT(w.busy_ratio, 0.1);
  EXPECT_LT(w.busy_ratio, 0.95);
  EXPECT_NEAR(w.idle_s, (1 - w.busy_ratio) * 10, 1e-6);  // every gap here is inside a step
}

TEST(IntervalUnion, MatchesABruteForceUnionInAnyOrder) {
  uint64_t seed = 12345;
  auto rnd = [&](uint64_t n) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % n;
  };
  for (int trial = 0; trial < 50; ++trial) {
    IntervalUnion u;
    std::vector<bool> covered(2000, false);
    for (int i = 0; i < 200; ++i) {
      // Mostly in order, sometimes back in time.
      const uint64_t base = rnd(10) == 0 ? rnd(1900) : std::min<uint64_t>(1900, static_cast<uint64_t>(i) * 9);
      const uint64_t s = base, e = base + rnd(40);
      u.add(s, e);
      for (uint64_t x = s; x < e && x < covered.size(); ++x) covered[x] = true;
    }
    for (uint64_t lo : {0u, 500u, 1000u}) {
      uint64_t want = 0;
      for (uint64_t x = lo; x < covered.size(); ++x) want += covered[x];
      uint64_t visited = 0;
      EXPECT_EQ(u.covered_since(lo, visited), want) << "trial " << trial << " lo " << lo;
    }
    u.trim(1000, 1000000);
    uint64_t want = 0, visited = 0;
    for (uint64_t x = 1000; x < covered.size(); ++x) want += covered[x];
    EXPECT_EQ(u.covered_since(1000, visited), want);
    EXPECT_LE(visited, 2u);
  }
}

TEST(StepSketch, QuantilesWithinTheRelativeErrorAndRoundTrip) {
  StepSketch s;
  for (uint64_t us = 1; us <= 1000; ++us) s.add(7, us * 1000);
  const auto bytes = s.encode();
  auto back = StepSketch::decode(bytes);
  ASSERT_TRUE(back.has_value());
  const auto& k = back->kernels().at(7);
  EXPECT_EQ(k.count, 1000u);
  EXPECT_EQ(k.sum_ns, 500500u * 1000);
  for (double q : {0.5, 0.9, 0.99}) {
    const double exact = (1 + q * 999) * 1000;
    EXPECT_NEAR(k.quantile_ns(q), exact, exact * (kSketchRelativeError + 1e-3)) << q;
  }
}

TEST(StepSketch, MalformedBytesAreRefused) {
  StepSketch s;
  s.add(1, 5000);
  s.add(2, 9000);
  auto bytes = s.encode();
  EXPECT_TRUE(StepSketch::decode(bytes).has_value());
  auto truncated = bytes;
  truncated.pop_back();
  EXPECT_FALSE(StepSketch::decode(truncated).has_value());
  auto trailing = bytes;
  trailing.push_back(0);
  EXPECT_FALSE(StepSketch::decode(trailing).has_value());
  EXPECT_FALSE(StepSketch::decode(std::vector<uint8_t>(12, 0xff)).has_value());
  EXPECT_TRUE(StepSketch::decode(std::vector<uint8_t>{0}).has_value());  // no kernels
}

// A bucket delta near INT64_MIN once overflowed the running index (found by
// fuzz_gpu_wire in CI): deltas that no two int32 buckets can have are refused.
TEST(StepSketch, BucketDeltasBeyondInt32RangeAreRefused) {
  // 1 name: id 0, count 1, sum 0 µs, 1 bucket; delta = zigzag varint 0xff..ff (INT64_MIN), n 1.
  std::vector<uint8_t> huge = {1, 0, 1, 0, 1};
  for (int i = 0; i < 9; ++i) huge.push_back(0xff);
  huge.push_back(0x01);
  huge.push_back(1);
  EXPECT_FALSE(StepSketch::decode(huge).has_value());
  // Buckets far apart (1 ns and ~292 years) still read back.
  StepSketch wide;
  wide.add(7, 1);
  wide.add(7, UINT64_MAX / 2);
  EXPECT_TRUE(StepSketch::decode(wide.encode()).has_value());
}

// The layout of StepSketch::encode, written from ordered maps: names, then per
// name id, count, sum (µs), bucket count, then zigzag bucket deltas and counts.
std::vector<uint8_t> reference_encoding(const std::map<uint32_t, KernelDistribution>& kernels) {
  std::vector<uint8_t> out;
  auto put = [&](uint64_t v) {
    for (; v >= 0x80; v >>= 7) out.push_back(static_cast<uint8_t>(v | 0x80));
    out.push_back(static_cast<uint8_t>(v));
  };
  put(kernels.size());
  for (const auto& [id, k] : kernels) {
    put(id);
    put(k.count);
    put((k.sum_ns + 500) / 1000);
    put(k.buckets.size());
    int64_t prev = 0;
    for (const auto& [b, n] : k.buckets) {
      const int64_t d = b - prev;
      put((static_cast<uint64_t>(d) << 1) ^ static_cast<uint64_t>(d >> 63));
      put(n);
      prev = b;
    }
  }
  return out;
}

// encode() sorts by name then bucket: linearly when name ids are dense (as
// producers intern them), by comparison when they are sparse. Either way the
// bytes are the same whatever order the entries came in, and read back as what
// was added (bucket counts exact, sums to the µs).
TEST(StepSketch, EncodingIsCanonicalForDenseAndSparseNameIds) {
  for (const uint32_t stride : {1u, 1u << 20}) {  // 1: dense ids; 2^20: sparse (the compare-sort path)
    SCOPED_TRACE("name id stride " + std::to_string(stride));
    struct Add {
      uint32_t name;
      int32_t bucket;
      uint64_t count, sum;
    };
    std::vector<Add> adds;
    uint64_t x = 99;
    for (int i = 0; i < 600; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const uint32_t name = 1 + static_cast<uint32_t>((x >> 40) % 90) * stride;
      const int32_t bucket = 300 + static_cast<int32_t>((x >> 20) % 5) - (i % 7 == 0 ? 400 : 0);  // some below 0
      adds.push_back({name, bucket, 1 + (x >> 50) % 9, 1000 + (x >> 30) % 100000});
    }
    StepSketch forward, backward;
    std::map<uint32_t, KernelDistribution> want;
    for (const auto& a : adds) {
      forward.add_bucket(a.name, a.bucket, a.count, a.sum);
      auto& k = want[a.name];
      k.count += a.count;
      k.sum_ns += a.sum;
      k.buckets[a.bucket] += a.count;
    }
    for (auto it = adds.rbegin(); it != adds.rend(); ++it) backward.add_bucket(it->name, it->bucket, it->count, it->sum);
    const auto bytes = forward.encode();
    EXPECT_EQ(bytes, reference_encoding(want));
    EXPECT_EQ(backward.encode(), bytes);
    auto back = StepSketch::decode(bytes);
    ASSERT_TRUE(back.has_value());
    ASSERT_EQ(back->kernels().size(), want.size());
    for (const auto& [name, k] : want) {
      const auto& got = back->kernels().at(name);
      EXPECT_EQ(got.count, k.count) << name;
      EXPECT_EQ(got.buckets, k.buckets) << name;
      EXPECT_EQ(got.sum_ns, (k.sum_ns + 500) / 1000 * 1000) << name;
    }
    // The builder is reused step after step: a cleared one encodes the same again.
    forward.clear();
    for (const auto& a : adds) forward.add_bucket(a.name, a.bucket, a.count, a.sum);
    EXPECT_EQ(forward.encode(), bytes);
  }
}

// A sketch that spans many steps (no step mark came: it closes at its kernel
// cap) holds each (name, bucket) pair once, plus at most kCompactEvery records
// since its last compaction, however many kernels or producer records it took
// in: its memory and its close are per pair.
TEST(StepSketch, ManyStepsHoldOnlyTheirDistinctPairs) {
  StepSketch per_kernel, per_record;
  std::map<std::pair<uint32_t, int32_t>, uint64_t> want;
  for (int step = 0; step < 200; ++step)
    for (uint32_t name = 1; name <= 150; ++name) {
      const uint64_t d = 20000 + name * 1000 + static_cast<uint64_t>(step % 3) * 400;
      per_kernel.add(name, d);
      per_record.add_bucket(name, StepSketch::bucket_of(d), 3, 3 * d);
      want[{name, StepSketch::bucket_of(d)}] += 1;
    }
  EXPECT_EQ(per_kernel.count(), 200u * 150u);
  EXPECT_LT(want.size(), 3u * 150u + 1);
  EXPECT_LE(per_kernel.entries(), want.size() + StepSketch::kCompactEvery);
  EXPECT_LE(per_record.entries(), want.size() + StepSketch::kCompactEvery);
  auto back = StepSketch::decode(per_kernel.encode());
  EXPECT_EQ(per_kernel.entries(), want.size());  // encoding compacts
  ASSERT_TRUE(back.has_value());
  for (const auto& [key, n] : want) EXPECT_EQ(back->kernels().at(key.first).buckets.at(key.second), n);
  auto back3 = StepSketch::decode(per_record.encode());
  ASSERT_TRUE(back3.has_value());
  for (const auto& [key, n] : want) EXPECT_EQ(back3->kernels().at(key.first).buckets.at(key.second), 3 * n);
  per_kernel.clear();
  EXPECT_EQ(per_kernel.entries(), 0u);
  EXPECT_EQ(per_kernel.count(), 0u);
}

// The size a realistic step costs: 150 distinct kernels (a transformer's
// forward, backward and optimizer), 2 400 launches with a few % of jitter.
TEST(StepSketch, RealisticStepStaysUnderTwoKilobytes) {
  StepSketch s;
  uint64_t x = 12345;
  for (int i = 0; i < 2400; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t name = 1 + static_cast<uint32_t>(i % 150);
    const double base_us = 20.0 + 40.0 * (name % 17);
    const double jitter = 1.0 + ((x >> 33) % 1000) / 1000.0 * 0.06 - 0.03;
    s.add(name, static_cast<uint64_t>(base_us * jitter * 1000));
  }
  const auto bytes = s.encode();
  EXPECT_LT(bytes.size(), 2048u) << bytes.size();
  RecordProperty("bytes_per_step", static_cast<int>(bytes.size()));
}

}  // namespace
}  // namespace argus::gpu
