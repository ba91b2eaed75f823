// The producer-side folder (gpu/gpu_fold.h) against the agent's own per-kernel
// path: the same records, once sent one by one and once folded, must give the
// agent the same totals, the same step sketches byte for byte, and window
// figures within one span; and the folded stream must be a small fraction of
// the records. One file because its tests share the harness below (the records'
// clock and kernel(), make_job, feed, expect_same_figures); the GpuTimeline ones
// are the agent's side of what a producer may send (sketch and span records, a
// kind it does not know).
#include "gpu/gpu_fold.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "userspace/gpu_timeline/sketch.h"
#include "userspace/gpu_timeline/timeline.h"
#include "userspace/trace/node_timeline.h"

namespace argus::gpu {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;
constexpr uint64_t kT0 = 5'000'000 * kMs;

struct Collected {
  std::vector<std::vector<argus_gpu_rec>> batches;
  std::vector<uint64_t> dropped;
};

void collect(void* ctx, const argus_gpu_rec* recs, uint32_t n, uint64_t dropped) {
  auto* c = static_cast<Collected*>(ctx);
  c->batches.emplace_back(recs, recs + n);
  c->dropped.push_back(dropped);
}

argus_gpu_rec kernel(uint64_t start, uint64_t end, uint32_t name, uint8_t flags = 0, uint32_t stream = 7) {
  argus_gpu_rec r{};
  r.start_ns = start;
  r.end_ns = end;
  r.name_id = name;
  r.stream_id = stream;
  r.kind = ARGUS_GPU_KERNEL;
  r.flags = flags;
  return r;
}

// A pipeline-and-data-parallel rank: per step, a receive after a bubble, compute
// kernels of `names` kinds with µs gaps and a few ms gaps, gradient all-reduces on
// their own stream overlapping the last compute, a copy; `marks` gets each step's
// start as the host would mark it.
std::vector<argus_gpu_rec> make_job(int steps, int kernels, int names, std::vector<uint64_t>& marks,
                                    uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> jitter(0, 40);
  std::vector<argus_gpu_rec> v;
  uint64_t t = kT0;
  for (int s = 0; s < steps; ++s) {
    marks.push_back(t);
    t += 3 * kMs;  // the bubble: waiting on the previous stage
    v.push_back(kernel(t, t + 200 * kUs, 900, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV, 11));
    t += 210 * kUs;
    for (int i = 0; i < kernels; ++i) {
      // Each kernel name has its own shape: 2-16 µs, ±2% from run to run.
      const uint64_t base = (20 + (i % names) % 17 * 7) * kUs / 10;
      const uint64_t d = base * (980 + static_cast<uint64_t>(jitter(rng))) / 1000;
      v.push_back(kernel(t, t + d, 1 + static_cast<uint32_t>(i % names)));
      t += d + (i % 297 == 296 ? 2 * kMs : (1 + jitter(rng) / 10) * kUs);
      if (i == kernels - kernels / 4) {  // an all-reduce that overlaps the rest of backward
        v.push_back(kernel(t, t + 4 * kMs, 1000, ARGUS_GPU_F_NCCL, 9));
      }
    }
    v.push_back(kernel(t + 50 * kUs, t + 2 * kMs, 1001, ARGUS_GPU_F_NCCL, 9));
    argus_gpu_rec c{};
    c.start_ns = t + 2 * kMs;
    c.end_ns = t + 2 * kMs + 300 * kUs;
    c.bytes = 1 << 20;
    c.kind = ARGUS_GPU_MEMCPY;
    c.flags = ARGUS_GPU_COPY_DTOH << ARGUS_GPU_COPY_SHIFT;
    v.push_back(c);
    t += 4 * kMs;
  }
  return v;
}

// Feeds both timelines: marks when the producer's records pass them, chunks of
// 256 as producers send them, a buffer end every `buffer` records: a flush, or
// with `carry` argus_fold_end_buffer at the buffer's last end (a young span goes
// on) and one flush at the very end.
void feed(const std::vector<argus_gpu_rec>& recs, const std::vector<uint64_t>& marks, Timeline& direct,
          Timeline& folded, Collected* out = nullptr, size_t buffer = 4096, bool carry = false) {
  Collected local;
  Collected& c = out ? *out : local;
  auto fp = std::make_unique<argus_gpu_folder>();  // ~130 KiB: not on the stack
  argus_gpu_folder& f = *fp;
  argus_fold_init(&f, &collect, &c);
  size_t next_mark = 0, since_flush = 0;
  for (size_t off = 0; off < recs.size(); off += ARGUS_GPU_BATCH_MAX) {
    const size_t n = std::min<size_t>(ARGUS_GPU_BATCH_MAX, recs.size() - off);
    std::vector<argus_gpu_rec> chunk(recs.begin() + static_cast<long>(off), recs.begin() + static_cast<long>(off + n));
    for (; next_mark < marks.size() && marks[next_mark] <= chunk.back().start_ns; ++next_mark) {
      direct.mark_step(marks[next_mark]);
      folded.mark_step(marks[next_mark]);
    }
    direct.add_batch(chunk, 0, 0.05);
    const size_t first = c.batches.size();
    argus_fold_add(&f, chunk.data(), chunk.size(), 0);
    since_flush += n;
    if (off + n == recs.size() || (since_flush >= buffer && !carry)) {
      argus_fold_flush(&f);
      since_flush = 0;
    } else if (since_flush >= buffer) {
      argus_fold_end_buffer(&f, chunk.back().end_ns);
      since_flush = 0;
    }
    for (size_t b = first; b < c.batches.size(); ++b) folded.add_batch(c.batches[b], c.dropped[b], 0.05);
  }
}

// The agent's totals and step sketches from folded records equal those from
// every kernel sent.
void expect_same_figures(const Timeline& direct, const Timeline& folded) {
  const auto& a = direct.totals();
  const auto& b = folded.totals();
  EXPECT_EQ(b.kernels, a.kernels);
  EXPECT_EQ(b.kernel_ns, a.kernel_ns);
  EXPECT_EQ(b.nccl_kernel_ns, a.nccl_kernel_ns);
  EXPECT_EQ(b.idle_ns, a.idle_ns);
  EXPECT_EQ(b.bubble_ns, a.bubble_ns);
  EXPECT_GT(b.bubble_ns, 0u);
  EXPECT_EQ(b.memcpys, a.memcpys);
  EXPECT_EQ(b.memcpy_bytes, a.memcpy_bytes);
  EXPECT_EQ(b.malformed, 0u);
  EXPECT_EQ(a.folded_kernels, 0u);
  ASSERT_EQ(folded.steps().size(), direct.steps().size());
  for (size_t i = 0; i < direct.steps().size(); ++i) {
    EXPECT_EQ(folded.steps()[i].start_ns, direct.steps()[i].start_ns) << i;
    EXPECT_EQ(folded.steps()[i].sketch, direct.steps()[i].sketch) << i;
  }
}

TEST(GpuFold, BucketsAreTheAgentsSketchBuckets) {
  std::mt19937_64 rng(42);
  for (uint64_t d = 1; d < 100'000'000'000ull; d = d * 3 / 2 + 1) {
    ASSERT_EQ(argus_fold_bucket(d), StepSketch::bucket_of(d)) << d;
    const uint64_t r = rng() % (d + 1);
    ASSERT_EQ(argus_fold_bucket(r), StepSketch::bucket_of(r)) << r;
  }
  EXPECT_EQ(argus_fold_bucket(0), 0);
}

TEST(GpuFold, FoldedRecordsGiveTheAgentTheSameFigures) {
  std::vector<uint64_t> marks;
  const auto recs = make_job(40, 600, 50, marks);
  Timeline direct(TimelineOptions{10}), folded(TimelineOptions{10});
  Collected c;
  feed(recs, marks, direct, folded, &c);

  // Totals, and every step sketch byte for byte.
  expect_same_figures(direct, folded);
  EXPECT_EQ(folded.totals().folded_kernels, 40u * 600u);  // every compute kernel; the NCCL ones came alone
  ASSERT_GE(direct.steps().size(), 38u);

  // The window: NCCL time exact (those kernels come alone), busy and idle within
  // one span's clipping at the window's edge.
  const uint64_t now = recs.back().end_ns;
  const auto wa = direct.window(now), wb = folded.window(now);
  ASSERT_TRUE(wa.has_data && wb.has_data);
  EXPECT_DOUBLE_EQ(wb.span_s, wa.span_s);
  EXPECT_NEAR(wb.nccl_ratio, wa.nccl_ratio, 1e-12);
  EXPECT_NEAR(wb.busy_ratio, wa.busy_ratio, double(ARGUS_GPU_SPAN_MAX_NS) / 1e9 / wa.span_s);
  EXPECT_NEAR(wb.bubble_ratio, wa.bubble_ratio, 1e-12);  // bubbles come as gap records
  EXPECT_NEAR(wb.idle_s, wa.idle_s, double(ARGUS_GPU_SPAN_MAX_NS) / 1e9);

  // What crossed: a small fraction of the records, never a batch over the limit,
  // and every span followed by its sketch records (which may start the next batch).
  std::vector<argus_gpu_rec> batch;
  for (const auto& b : c.batches) {
    ASSERT_LE(b.size(), size_t{ARGUS_GPU_BATCH_MAX});
    batch.insert(batch.end(), b.begin(), b.end());
  }
  const size_t crossed = batch.size();
  {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].kind != ARGUS_GPU_SPAN) continue;
      argus_gpu_span span;
      std::memcpy(&span, &batch[i], sizeof span);
      uint64_t counted = 0, sum = 0;
      for (size_t j = i + 1; j < batch.size() && batch[j].kind == ARGUS_GPU_SKETCH_PAIR; ++j) {
        argus_gpu_sketch_pair k;
        std::memcpy(&k, &batch[j], sizeof k);
        EXPECT_EQ(k.start_ns, span.start_ns);
        for (int e = 0; e < 2; ++e) {
          counted += k.count[e];
          sum += k.sum_ns[e];
        }
      }
      EXPECT_EQ(counted, span.kernels);
      EXPECT_EQ(sum, span.kernel_ns);
      EXPECT_LE(span.busy_ns + span.idle_ns, span.end_ns - span.start_ns + ARGUS_GPU_GAP_MIN_NS);
    }
  }
  // Here a span holds ~150 kernels (2 ms gaps and the mid-step all-reduce end them)
  // of 50 names, ±2% each (two buckets a name): about a third of the records cross.
  EXPECT_LT(crossed * 3, recs.size()) << crossed << " of " << recs.size();
}

// Small producer buffers (the sim's: 256 records) no longer cut spans: a span
// goes on across buffer ends while young, the records after it wait with it, and
// the agent's figures stay those of every kernel sent.
TEST(GpuFold, ASpanGoesOnAcrossSmallBuffersWithTheSameFigures) {
  std::vector<uint64_t> marks;
  const auto recs = make_job(40, 600, 50, marks);
  Timeline direct(TimelineOptions{10}), per_buffer(TimelineOptions{10}), carried(TimelineOptions{10});
  Collected cut, kept;
  feed(recs, marks, direct, per_buffer, &cut, 256, false);
  Timeline direct2(TimelineOptions{10});
  feed(recs, marks, direct2, carried, &kept, 256, true);

  expect_same_figures(direct, carried);
  EXPECT_EQ(carried.totals().folded_kernels, 40u * 600u);

  // Fewer records and batches cross than with a span cut at every 256-record buffer.
  size_t n_cut = 0, n_kept = 0;
  for (const auto& x : cut.batches) n_cut += x.size();
  for (const auto& x : kept.batches) n_kept += x.size();
  EXPECT_LT(n_kept, n_cut);
  EXPECT_LT(kept.batches.size(), cut.batches.size());

  // In start order across batches: nothing that started after a span reaches
  // the agent before it, except where a full batch had to go (as in one buffer).
  size_t spans = 0;
  for (size_t k = 0; k < kept.batches.size(); ++k) {
    for (const auto& r : kept.batches[k]) {
      if (r.kind != ARGUS_GPU_SPAN) continue;
      ++spans;
      for (size_t e = 0; e < k; ++e) {
        const auto& earlier = kept.batches[e];
        const bool after = std::any_of(earlier.begin(), earlier.end(), [&](const argus_gpu_rec& x) {
          return x.kind != ARGUS_GPU_SKETCH && x.start_ns > r.start_ns;
        });
        EXPECT_TRUE(!after || earlier.size() == ARGUS_GPU_BATCH_MAX) << "batch " << e << " before span in " << k;
      }
    }
  }
  EXPECT_GT(spans, 0u);
}

TEST(GpuFold, AYoungSpanWaitsWithWhatCameAfterItAndAnOldOneGoes) {
  Collected c;
  auto fp = std::make_unique<argus_gpu_folder>();
  argus_gpu_folder& f = *fp;
  argus_fold_init(&f, &collect, &c);
  // A collective, 12 ms of quiet, compute that opens a span, then a copy after it.
  std::vector<argus_gpu_rec> in = {kernel(kT0, kT0 + 1 * kMs, 900, ARGUS_GPU_F_NCCL),
                                   kernel(kT0 + 1 * kMs + 5 * kUs, kT0 + 1 * kMs + 15 * kUs, 1)};
  argus_gpu_rec copy{};
  copy.start_ns = kT0 + 1 * kMs + 20 * kUs;
  copy.end_ns = kT0 + 1 * kMs + 30 * kUs;
  copy.kind = ARGUS_GPU_MEMCPY;
  in.push_back(copy);
  argus_fold_add(&f, in.data(), in.size(), 2);
  argus_fold_end_buffer(&f, kT0 + 2 * kMs);  // the span is 1 ms old: it goes on
  ASSERT_EQ(c.batches.size(), 1u);
  ASSERT_EQ(c.batches[0].size(), 1u);  // the collective, which came before the span
  EXPECT_EQ(c.batches[0][0].name_id, 900u);
  EXPECT_EQ(c.dropped[0], 2u);
  EXPECT_EQ(f.stats.carried, 1u);

  // The next buffer adds to the same span.
  std::vector<argus_gpu_rec> more = {kernel(kT0 + 1 * kMs + 40 * kUs, kT0 + 1 * kMs + 50 * kUs, 1)};
  argus_fold_add(&f, more.data(), more.size(), 0);
  argus_fold_end_buffer(&f, kT0 + 3 * kMs);
  EXPECT_EQ(c.batches.size(), 1u);

  // A tick with nothing new, once the span is old: the span, its sketch, then the copy.
  argus_fold_end_buffer(&f, kT0 + 1 * kMs + ARGUS_GPU_SPAN_MAX_NS + 5 * kUs);
  ASSERT_EQ(c.batches.size(), 2u);
  const auto& b = c.batches[1];  // one batch: the agent orders it by start
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].kind, ARGUS_GPU_MEMCPY);
  EXPECT_EQ(b[1].kind, ARGUS_GPU_SPAN);
  argus_gpu_span span;
  std::memcpy(&span, &b[1], sizeof span);
  EXPECT_EQ(span.kernels, 2u);
  EXPECT_EQ(b[2].kind, ARGUS_GPU_SKETCH_PAIR);
  EXPECT_EQ(f.stats.spans, 1u);

  // Clocks that disagree (records far ahead of `now`): no waiting on them.
  std::vector<argus_gpu_rec> ahead = {kernel(kT0 + 500 * kMs, kT0 + 501 * kMs, 2)};
  argus_fold_add(&f, ahead.data(), ahead.size(), 0);
  argus_fold_end_buffer(&f, kT0 + 100 * kMs);
  ASSERT_EQ(c.batches.size(), 3u);
  ASSERT_EQ(c.batches[2].size(), 3u);  // the 450 ms gap before it, the span, its sketch
  EXPECT_EQ(c.batches[2][0].kind, ARGUS_GPU_GAP);
  EXPECT_EQ(c.batches[2][1].kind, ARGUS_GPU_SPAN);
  EXPECT_EQ(f.stats.spans, 2u);
  argus_fold_end_buffer(&f, kT0 + 600 * kMs);  // nothing pending: no batch
  EXPECT_EQ(c.batches.size(), 3u);
}

TEST(GpuFold, KernelHeavyRankCrossesPerSpanNotPerKernel) {
  // 10^5 kernels in one second of 150 names, back to back with 2 µs gaps.
  std::vector<argus_gpu_rec> recs;
  uint64_t t = kT0;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> jitter(0, 60);
  for (int i = 0; i < 100000; ++i) {
    const uint64_t d = (3 + (i % 150) % 11) * kUs / 2 * (970 + static_cast<uint64_t>(jitter(rng))) / 1000;  // ±3%
    recs.push_back(kernel(t, t + d, 1 + static_cast<uint32_t>(i % 150)));
    t += d + 2 * kUs;
  }
  Collected c;
  auto fp = std::make_unique<argus_gpu_folder>();
  argus_gpu_folder& f = *fp;
  argus_fold_init(&f, &collect, &c);
  for (size_t off = 0; off < recs.size(); off += ARGUS_GPU_BATCH_MAX) {
    argus_fold_add(&f, recs.data() + off, std::min<size_t>(ARGUS_GPU_BATCH_MAX, recs.size() - off), 0);
    if ((off / ARGUS_GPU_BATCH_MAX) % 16 == 15) argus_fold_flush(&f);  // a 4096-record buffer
  }
  argus_fold_flush(&f);
  EXPECT_EQ(f.stats.kernels_in, 100000u);
  EXPECT_EQ(f.stats.folded, 100000u);
  EXPECT_EQ(f.stats.gaps, 0u);
  size_t crossed = 0;
  for (const auto& b : c.batches) crossed += b.size();
  EXPECT_EQ(crossed, f.stats.records_out);
  EXPECT_EQ(crossed, f.stats.spans + f.stats.sketch_recs);
  EXPECT_LT(crossed * 10, recs.size()) << crossed;
}

TEST(GpuFold, GapsBubblesLongKernelsAndOddRecords) {
  Collected c;
  auto fp = std::make_unique<argus_gpu_folder>();
  argus_gpu_folder& f = *fp;
  argus_fold_init(&f, &collect, &c);
  std::vector<argus_gpu_rec> in = {
      kernel(kT0, kT0 + 10 * kUs, 1),
      kernel(kT0 + 12 * kUs, kT0 + 20 * kUs, 1),                         // 2 µs gap: inside the span
      kernel(kT0 + 5 * kMs, kT0 + 6 * kMs, 2),                            // 4.98 ms gap: a gap record
      kernel(kT0 + 6 * kMs + 1 * kUs, kT0 + 7 * kMs, 3, ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV),  // bubble, any size
      kernel(kT0 + 8 * kMs, kT0 + 8 * kMs + 2'000 * kMs, 4),              // 2 s of compute: kept alone
      kernel(kT0 + 9 * kMs, kT0 + 8 * kMs, 5),                            // ends before it starts: passed on as is
  };
  argus_fold_add(&f, in.data(), in.size(), 3);
  argus_fold_flush(&f);
  ASSERT_EQ(c.batches.size(), 1u);
  EXPECT_EQ(c.dropped[0], 3u);
  const auto& b = c.batches[0];
  std::vector<int> kinds;
  for (const auto& r : b) kinds.push_back(r.kind);
  // span(1,1) + sketch; the 4.98 ms gap; the bubble before the receive (short: its span
  // stays open), which ends the span as the first collective in 10 ms; the receive; the
  // 1 ms gap before the long kernel; the long kernel; the odd one.
  // (Span A has two sketch entries, one record: its kernels ran 10 and 8 µs, two buckets.)
  const std::vector<int> want = {ARGUS_GPU_SPAN, ARGUS_GPU_SKETCH_PAIR, ARGUS_GPU_GAP,    ARGUS_GPU_GAP,
                                 ARGUS_GPU_SPAN, ARGUS_GPU_SKETCH_PAIR, ARGUS_GPU_KERNEL, ARGUS_GPU_GAP,
                                 ARGUS_GPU_KERNEL, ARGUS_GPU_KERNEL};
  ASSERT_EQ(kinds, want);
  argus_gpu_span s0;
  std::memcpy(&s0, &b[0], sizeof s0);
  EXPECT_EQ(s0.kernels, 2u);
  EXPECT_EQ(s0.idle_ns, 2 * kUs);
  EXPECT_EQ(s0.busy_ns, 18 * kUs);
  argus_gpu_sketch_pair k0;
  std::memcpy(&k0, &b[1], sizeof k0);
  EXPECT_EQ(k0.start_ns, kT0);
  EXPECT_EQ(k0.count[0] + k0.count[1], 2u);
  EXPECT_EQ(k0.sum_ns[0] + k0.sum_ns[1], 18 * kUs);
  EXPECT_NE(k0.bucket[0], k0.bucket[1]);
  argus_gpu_sketch_pair k1;
  std::memcpy(&k1, &b[5], sizeof k1);
  EXPECT_EQ(k1.count[1], 0u);  // one entry: the second is none
  EXPECT_EQ(b[2].start_ns, kT0 + 20 * kUs);
  EXPECT_EQ(b[2].end_ns, kT0 + 5 * kMs);
  EXPECT_EQ(b[2].flags, 0);
  EXPECT_EQ(b[3].flags, ARGUS_GPU_GAP_F_BUBBLE);
  EXPECT_EQ(b[3].end_ns - b[3].start_ns, 1 * kUs);
  EXPECT_TRUE(b[6].flags & ARGUS_GPU_F_FOLDED);
  EXPECT_EQ(b[6].bytes, 999 * kUs);  // the busy time it adds
  EXPECT_EQ(b[7].end_ns - b[7].start_ns, 1 * kMs);
  EXPECT_EQ(b[8].name_id, 4u);
  EXPECT_TRUE(b[8].flags & ARGUS_GPU_F_FOLDED);
  EXPECT_EQ(b[9].name_id, 5u);
  EXPECT_FALSE(b[9].flags & ARGUS_GPU_F_FOLDED);

  // The agent counts them: 5 kernels, the odd one malformed, the bubble.
  Timeline t;
  t.add_batch(b, c.dropped[0], 0.05);
  EXPECT_EQ(t.totals().kernels, 5u);
  EXPECT_EQ(t.totals().malformed, 1u);
  EXPECT_EQ(t.totals().dropped, 3u);
  EXPECT_EQ(t.totals().bubble_ns, 1 * kUs);
  EXPECT_EQ(t.totals().idle_ns, 2 * kUs + (5 * kMs - 20 * kUs) + 1 * kUs + 1 * kMs);
}

TEST(GpuFold, DropsAloneStillReachTheAgent) {
  Collected c;
  auto fp = std::make_unique<argus_gpu_folder>();
  argus_gpu_folder& f = *fp;
  argus_fold_init(&f, &collect, &c);
  argus_fold_add(&f, nullptr, 0, 7);
  argus_fold_flush(&f);
  ASSERT_EQ(c.batches.size(), 1u);
  EXPECT_TRUE(c.batches[0].empty());
  EXPECT_EQ(c.dropped[0], 7u);
  argus_fold_flush(&f);  // nothing left: no batch
  EXPECT_EQ(c.batches.size(), 1u);
}

// Sketch entries go two a record; one whose sum reaches 2^32 ns (five 0.9 s
// kernels started together on five streams) goes alone, whole; the agent reads
// both forms back to the same counts and sums.
TEST(GpuFold, EntriesGoInPairsAndALargeSumGoesAlone) {
  Collected c;
  auto fp = std::make_unique<argus_gpu_folder>();
  argus_gpu_folder& f = *fp;
  argus_fold_init(&f, &collect, &c);
  std::vector<argus_gpu_rec> in;
  for (uint32_t i = 0; i < 5; ++i)
    in.push_back(kernel(kT0 + i * kUs, kT0 + i * kUs + 900 * kMs, 1, 0, 10 + i));  // 4.5 s in all
  for (uint32_t i = 0; i < 3; ++i) in.push_back(kernel(kT0 + (10 + i) * kUs, kT0 + (11 + i) * kUs, 2 + i));
  argus_fold_add(&f, in.data(), in.size(), 0);
  argus_fold_flush(&f);
  ASSERT_EQ(c.batches.size(), 1u);
  const auto& b = c.batches[0];
  std::vector<int> kinds;
  for (const auto& r : b) kinds.push_back(r.kind);
  const std::vector<int> want = {ARGUS_GPU_SPAN, ARGUS_GPU_SKETCH, ARGUS_GPU_SKETCH_PAIR, ARGUS_GPU_SKETCH_PAIR};
  ASSERT_EQ(kinds, want);
  argus_gpu_sketch_rec big;
  std::memcpy(&big, &b[1], sizeof big);
  EXPECT_EQ(big.name_id, 1u);
  EXPECT_EQ(big.count, 5u);
  EXPECT_EQ(big.sum_ns, 4'500 * kMs);
  argus_gpu_sketch_pair p0, p1;
  std::memcpy(&p0, &b[2], sizeof p0);
  std::memcpy(&p1, &b[3], sizeof p1);
  EXPECT_EQ(p0.name_id[0], 2u);
  EXPECT_EQ(p0.name_id[1], 3u);
  EXPECT_EQ(p1.name_id[0], 4u);
  EXPECT_EQ(p1.count[1], 0u);
  EXPECT_EQ(p0.start_ns, kT0);
  EXPECT_EQ(p1.start_ns, kT0);
  EXPECT_EQ(f.stats.sketch_entries, 4u);
  EXPECT_EQ(f.stats.sketch_recs, 3u);

  Timeline t;
  t.mark_step(kT0 - 1);
  t.add_batch(b, 0, 0.05);
  t.mark_step(kT0 + 2000 * kMs);
  std::vector<argus_gpu_rec> late = {kernel(kT0 + 2001 * kMs, kT0 + 2002 * kMs, 1)};
  t.add_batch(late, 0, 0.05);
  EXPECT_EQ(t.totals().malformed, 0u);
  ASSERT_EQ(t.steps().size(), 1u);
  auto d = StepSketch::decode(t.steps()[0].sketch);
  ASSERT_TRUE(d.has_value());
  const auto& k = d->kernels();
  ASSERT_EQ(k.size(), 4u);
  EXPECT_EQ(k.at(1).count, 5u);
  EXPECT_EQ(k.at(1).sum_ns, 4'500 * kMs);
  for (uint32_t name = 2; name <= 4; ++name) {
    EXPECT_EQ(k.at(name).count, 1u) << name;
    EXPECT_EQ(k.at(name).sum_ns, 1 * kUs) << name;
    EXPECT_EQ(k.at(name).buckets.begin()->first, StepSketch::bucket_of(1 * kUs)) << name;
  }
}

TEST(GpuFold, ManyNamesSplitSpansAtTheSketchBound) {
  Collected c;
  auto f = std::make_unique<argus_gpu_folder>();
  argus_fold_init(f.get(), &collect, &c);
  std::vector<argus_gpu_rec> in;
  const uint32_t n = 2 * ARGUS_GPU_SPAN_MAX_ENTRIES + 10;  // every kernel its own name, 2 µs apart
  for (uint32_t i = 0; i < n; ++i) in.push_back(kernel(kT0 + i * 2 * kUs, kT0 + i * 2 * kUs + 1 * kUs, 1 + i));
  for (size_t off = 0; off < in.size(); off += 250) argus_fold_add(f.get(), in.data() + off, std::min<size_t>(250, n - off), 0);
  argus_fold_flush(f.get());
  EXPECT_EQ(f->stats.folded, n);
  EXPECT_EQ(f->stats.sketch_entries, n);
  EXPECT_EQ(f->stats.spans, 3u);
  EXPECT_EQ(f->stats.sketch_recs, (n + 1) / 2);  // two entries a record: 3072, 3072 and 10 a span
  // The agent still counts every kernel of every span, across batch boundaries.
  Timeline t;
  t.mark_step(kT0 - 1);
  for (size_t b = 0; b < c.batches.size(); ++b) {
    EXPECT_LE(c.batches[b].size(), size_t{ARGUS_GPU_BATCH_MAX});
    t.add_batch(c.batches[b], 0, 0.05);
  }
  EXPECT_EQ(t.totals().kernels, n);
  t.mark_step(kT0 + 1000 * kMs);
  t.mark_step(kT0 + 2000 * kMs);
  std::vector<argus_gpu_rec> late = {kernel(kT0 + 2001 * kMs, kT0 + 2002 * kMs, 1)};
  t.add_batch(late, 0, 0.05);  // closes the step of the 3 spans
  ASSERT_EQ(t.steps().size(), 1u);
  auto d = StepSketch::decode(t.steps()[0].sketch);
  ASSERT_TRUE(d.has_value());
  uint64_t kernels = 0;
  for (const auto& [id, k] : d->kernels()) kernels += k.count;
  EXPECT_EQ(kernels, n);
}

// A producer that sends sketch records and never a span still cannot grow the
// open sketch past its kernel bound.
TEST(GpuTimeline, SketchRecordsWithoutASpanStayBounded) {
  AgentCounters caps;
  TimelineOptions o;
  o.max_step_kernels = 1000;
  o.caps = &caps;
  Timeline t(o);
  t.mark_step(kT0);
  std::vector<argus_gpu_rec> flood;
  for (uint32_t i = 0; i < ARGUS_GPU_BATCH_MAX; ++i) {
    argus_gpu_sketch_rec k{};
    k.start_ns = kT0 + 1;
    k.sum_ns = 5;
    k.count = 1;
    k.bucket = static_cast<int32_t>(i);
    k.name_id = i;
    k.kind = ARGUS_GPU_SKETCH;
    argus_gpu_rec r;
    std::memcpy(&r, &k, sizeof r);
    flood.push_back(r);
  }
  for (int b = 0; b < 10; ++b) t.add_batch(flood, 0, 0.05);  // 2 560 kernels' worth
  EXPECT_EQ(caps.get(Cap::kStepSketchRecords), 2u);
  ASSERT_EQ(t.steps().size(), 2u);
  for (const auto& st : t.steps()) {
    EXPECT_STREQ(st.closed_by, "kernels");
    auto d = StepSketch::decode(st.sketch);
    ASSERT_TRUE(d.has_value());
    uint64_t n = 0;
    for (const auto& [id, k] : d->kernels()) n += k.count;
    EXPECT_EQ(n, 1000u);
  }
  EXPECT_EQ(t.totals().malformed, 0u);  // a sketch record's second word is a sum, not an end
}

// Spans of kernels on two streams overlap; the trace's folded track never has
// partly overlapping slices, and keeps every kernel.
TEST(GpuFold, OverlappingSpansDrawWellNested) {
  auto span = [](uint64_t start, uint64_t end, uint32_t kernels) {
    argus_gpu_span s{};
    s.start_ns = start;
    s.end_ns = end;
    s.kernels = kernels;
    s.kernel_ns = end - start;
    s.busy_ns = static_cast<uint32_t>(end - start);
    s.kind = ARGUS_GPU_SPAN;
    argus_gpu_rec r;
    std::memcpy(&r, &s, sizeof r);
    return r;
  };
  std::vector<argus_gpu_rec> recs = {span(kT0, kT0 + 10 * kMs, 5), span(kT0 + 5 * kMs, kT0 + 20 * kMs, 7),
                                     span(kT0 + 6 * kMs, kT0 + 8 * kMs, 2), span(kT0 + 30 * kMs, kT0 + 31 * kMs, 1)};
  NodeTimeline tl;
  tl.on_gpu_batch(42, recs, 0, 0.05);
  const auto ranks = tl.trace(0, UINT64_MAX);
  ASSERT_EQ(ranks.size(), 1u);
  std::vector<TraceSpan> drawn;
  for (const auto& sp : ranks[0].spans)
    if (sp.category == "kernels") drawn.push_back(sp);
  ASSERT_EQ(drawn.size(), 3u);
  uint64_t kernels = 0;
  for (size_t i = 0; i < drawn.size(); ++i) {
    EXPECT_EQ(drawn[i].track, "GPU compute (folded)");
    EXPECT_LT(drawn[i].start_ns, drawn[i].end_ns);
    if (i > 0) {
      EXPECT_GE(drawn[i].start_ns, drawn[i - 1].end_ns);
    }
    kernels += std::stoull(drawn[i].args.at("kernels"));
  }
  EXPECT_EQ(kernels, 15u);
  EXPECT_EQ(drawn[1].start_ns, kT0 + 10 * kMs);  // clipped to the first one's end
  EXPECT_EQ(drawn[0].args.at("kernels"), "5");
  EXPECT_EQ(drawn[1].args.at("kernels"), "9");   // 7, and the 2 of the span wholly inside it
}

// What a producer fires while no agent listens is counted and reported once.
TEST(GpuFold, UnheardBatchesAreCountedAndReportedOnce) {
  argus_unheard u{};
  std::vector<argus_gpu_rec> a = {kernel(kT0, kT0 + 1, 1), kernel(kT0 + 2, kT0 + 3, 2, ARGUS_GPU_F_NCCL),
                                  kernel(kT0 + 4, kT0 + 5, 3, ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P)};
  argus_gpu_span s{};
  s.start_ns = kT0 + 10;
  s.end_ns = kT0 + 20;
  s.kernels = 10;
  s.kind = ARGUS_GPU_SPAN;
  argus_gpu_rec sr;
  std::memcpy(&sr, &s, sizeof sr);
  argus_unheard_add(&u, a.data(), static_cast<uint32_t>(a.size()), 4);
  argus_unheard_add(&u, &sr, 1, 1);
  EXPECT_TRUE(u.names_stale);
  argus_gpu_rec out;
  uint64_t dropped = 0;
  ASSERT_EQ(argus_unheard_take(&u, &out, &dropped), 1);
  EXPECT_EQ(dropped, 5u);
  argus_gpu_unheard_rec r;
  std::memcpy(&r, &out, sizeof r);
  EXPECT_EQ(r.kind, ARGUS_GPU_UNHEARD);
  EXPECT_EQ(r.records, 4u);
  EXPECT_EQ(r.kernels, 13u);      // 3 sent + 10 folded
  EXPECT_EQ(r.nccl_kernels, 1u);  // the collective, not the P2P kernel
  EXPECT_EQ(argus_unheard_take(&u, &out, &dropped), 0);  // reported once

  Timeline t;
  t.add_batch({out}, 5, 0.05);
  EXPECT_EQ(t.totals().unheard_records, 4u);
  EXPECT_EQ(t.totals().unheard_kernels, 13u);
  EXPECT_EQ(t.totals().unheard_nccl_kernels, 1u);
  EXPECT_EQ(t.totals().dropped, 5u);
  EXPECT_EQ(t.totals().kernels, 0u);
  EXPECT_EQ(t.totals().malformed, 0u);
}

// A record of a kind this agent does not know (a newer producer's) is counted
// as lost, never read as something else; the known records around it count.
TEST(GpuTimeline, UnknownKindIsCountedNotGuessedAt) {
  std::vector<argus_gpu_rec> b = {kernel(kT0, kT0 + 10 * kUs, 1), kernel(kT0 + 20 * kUs, kT0 + 30 * kUs, 2)};
  argus_gpu_rec odd = kernel(kT0 + 15 * kUs, kT0 + 16 * kUs, 3);
  odd.kind = 42;
  b.insert(b.begin() + 1, odd);
  Timeline t;
  t.add_batch(b, 0, 0.05);
  EXPECT_EQ(t.totals().malformed, 1u);
  EXPECT_EQ(t.totals().records, 2u);
  EXPECT_EQ(t.totals().kernels, 2u);
  EXPECT_EQ(t.totals().idle_ns, 10 * kUs);
}

TEST(GpuTimeline, MalformedSpanIsCountedNotUsed) {
  argus_gpu_span s{};
  s.start_ns = kT0 + 10;
  s.end_ns = kT0;  // ends before it starts
  s.kernels = 3;
  s.kind = ARGUS_GPU_SPAN;
  argus_gpu_rec r;
  std::memcpy(&r, &s, sizeof r);
  argus_gpu_span empty{};
  empty.start_ns = kT0;
  empty.end_ns = kT0 + 10;
  empty.kind = ARGUS_GPU_SPAN;  // folds no kernel
  argus_gpu_rec e;
  std::memcpy(&e, &empty, sizeof e);
  Timeline t;
  t.add_batch({r, e}, 0, 0.05);
  EXPECT_EQ(t.totals().malformed, 2u);
  EXPECT_EQ(t.totals().kernels, 0u);
  EXPECT_FALSE(t.window(kT0).has_data);
}

}  // namespace
}  // namespace argus::gpu
