// Device memory: BPF's aggregates into a rank's view, failed allocations into
// oom events (with the stack taken at the failing return), an OOM as an end's
// cause, and the leak and pressure verdicts over held bytes.
#include <gtest/gtest.h>

#include "bpf/argus.h"
#include "userspace/detect/gpu_memory.h"
#include "userspace/detect/rank_exit.h"
#include "userspace/registry/exit_cause.h"
#include "userspace/wire/aggregates.h"
#include "userspace/wire/event_decoder.h"

namespace argus {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

AggregateRecord rec(uint16_t kind, uint16_t sub, int32_t code, uint64_t count, uint64_t sum) {
  return AggregateRecord{4242, kind, sub, code, count, sum};
}

TEST(GpuMemory, AggregatesFillTheRanksView) {
  RankSnapshot s;
  apply_aggregates({rec(ARGUS_STAT_GPU_ALLOC, ARGUS_CU_MEM_ALLOC, 0, 3, 3 * kGiB),
                    rec(ARGUS_STAT_GPU_ALLOC, ARGUS_CU_MEM_CREATE, 0, 10, 200 * kMiB),
                    rec(ARGUS_STAT_GPU_FREE, ARGUS_CU_MEM_FREE, 0, 1, kGiB),
                    rec(ARGUS_STAT_GPU_FREE, ARGUS_CU_MEM_RELEASE, 0, 2, 40 * kMiB),
                    rec(ARGUS_STAT_GPU_MAP, ARGUS_CU_MEM_MAP, 0, 10, 200 * kMiB),
                    rec(ARGUS_STAT_GPU_FREE_UNPAIRED, ARGUS_CU_MEM_FREE_ASYNC, 0, 4, 0),
                    rec(ARGUS_STAT_CUDA_ERROR, ARGUS_CU_MEM_ALLOC, 2, 2, 0),
                    rec(ARGUS_STAT_CUDA_ERROR, ARGUS_CU_MEM_ALLOC_HOST, 2, 5, 0),  // pinned host memory
                    rec(ARGUS_STAT_CUDA_ERROR, ARGUS_CU_STREAM_SYNCHRONIZE, 700, 1, 0)},
                   s);
  const GpuMemoryView& m = s.gpu_memory;
  EXPECT_EQ(m.allocations.at("cuMemAlloc").calls, 3u);
  EXPECT_EQ(m.allocations.at("cuMemAlloc").bytes, 3 * kGiB);
  EXPECT_EQ(m.allocations.at("cuMemCreate").calls, 10u);
  EXPECT_EQ(m.frees.at("cuMemFree").bytes, kGiB);
  EXPECT_EQ(m.frees.at("cuMemRelease").calls, 2u);
  EXPECT_EQ(m.maps.at("cuMemMap").bytes, 200 * kMiB);
  EXPECT_EQ(m.unpaired_frees, 4u);
  // Failures of device allocations only; every error stays in cuda_errors too.
  ASSERT_EQ(m.failures.size(), 1u);
  EXPECT_EQ(m.failures.at("CUDA_ERROR_OUT_OF_MEMORY"), 2u);
  EXPECT_EQ((s.cuda_errors[{"cuMemAllocHost", "CUDA_ERROR_OUT_OF_MEMORY"}]), 5u);
  EXPECT_TRUE(m.seen());
  // Totals replace: a second read of the same BPF totals does not add.
  apply_aggregates({rec(ARGUS_STAT_GPU_ALLOC, ARGUS_CU_MEM_ALLOC, 0, 3, 3 * kGiB)}, s);
  EXPECT_EQ(s.gpu_memory.allocations.at("cuMemAlloc").calls, 3u);
  EXPECT_TRUE(s.gpu_memory.frees.empty());
  EXPECT_EQ(s.gpu_memory.unpaired_frees, 0u);
}

TEST(GpuMemory, OomRecordsDecodeAndTheirSizeIsChecked) {
  argus_gpu_oom_event e{};
  e.hdr.type = ARGUS_EV_GPU_OOM;
  e.hdr.tgid = 7;
  e.asked = 2 * kGiB;
  e.held = static_cast<int64_t>(78 * kGiB);
  e.result = 2;
  auto d = decode_event(&e, sizeof e);
  ASSERT_TRUE(d.has_value());
  ASSERT_TRUE(std::holds_alternative<argus_gpu_oom_event>(*d));
  EXPECT_EQ(std::get<argus_gpu_oom_event>(*d).asked, 2 * kGiB);
  EXPECT_EQ(event_source(*d), EventSource::kCuda);
  EXPECT_FALSE(decode_event(&e, sizeof e - 8).has_value());
}

OomRecord oom(int pid, uint32_t tid, double t_s, uint64_t asked = 2 * kGiB) {
  OomRecord r;
  r.pid = pid;
  r.tid = tid;
  r.ts_ns = static_cast<uint64_t>(t_s * 1e9);
  r.unix_time = 1.8e9 + t_s;
  r.api = "cuMemAlloc";
  r.code = "CUDA_ERROR_OUT_OF_MEMORY";
  r.asked_bytes = asked;
  r.held_bytes = static_cast<int64_t>(78 * kGiB);
  r.peak_bytes = 79 * kGiB;
  r.total_bytes = 80 * kGiB;
  return r;
}

std::optional<RankSnapshot> rank_three(int pid) {
  RankSnapshot r;
  r.pid = pid;
  r.job_id = "llm";
  r.rank = 3;
  return r;
}

const std::vector<std::string> kStack = {"<module> (train.py:90)", "train_step (train.py:41)",
                                          "forward (model.py:12)"};

TEST(GpuMemory, AnOomWaitsForItsStackThenNamesTheRankSizesAndFrame) {
  OomReports reports;
  reports.on_oom(oom(100, 101, 10.0));
  EXPECT_TRUE(reports.take_ready(static_cast<uint64_t>(10.1e9), rank_three).empty()) << "its stack may still come";
  reports.on_stack(100, 101, static_cast<uint64_t>(10.0e9) + 2000, kStack);
  // The framework frees its cache and tries again: the same burst, one event.
  reports.on_oom(oom(100, 101, 10.01));
  auto evs = reports.take_ready(static_cast<uint64_t>(10.1e9), rank_three);
  ASSERT_EQ(evs.size(), 1u);
  const DetectedEvent& ev = evs[0];
  EXPECT_EQ(ev.kind, EventKind::kOom);
  EXPECT_EQ(ev.job_id, "llm");
  EXPECT_EQ(ev.rank, 3);
  EXPECT_EQ(ev.summary,
            "rank 3 of job llm (pid 100) ran out of GPU memory: cuMemAlloc of 2 GiB failed "
            "(CUDA_ERROR_OUT_OF_MEMORY) while it held 78 GiB of 80 GiB (peak 79 GiB), in forward (model.py:12)");
  EXPECT_EQ(ev.evidence["asked_bytes"], 2 * kGiB);
  EXPECT_EQ(ev.evidence["held_bytes"], 78 * kGiB);
  EXPECT_EQ(ev.evidence["peak_bytes"], 79 * kGiB);
  EXPECT_EQ(ev.evidence["total_bytes"], 80 * kGiB);
  EXPECT_EQ(ev.evidence["failed_calls"], 2);
  EXPECT_EQ(ev.evidence["python_stack"], kStack);
  EXPECT_TRUE(reports.take_ready(static_cast<uint64_t>(20e9), rank_three).empty()) << "said once";
}

TEST(GpuMemory, AStackThatCameFirstIsPairedAndOnlyWithItsThread) {
  OomReports reports;
  reports.on_stack(100, 102, static_cast<uint64_t>(5e9), {"other_thread (x.py:1)"});
  reports.on_stack(100, 101, static_cast<uint64_t>(5e9), kStack);
  reports.on_oom(oom(100, 101, 5.0));
  auto evs = reports.take_ready(static_cast<uint64_t>(5.01e9), rank_three);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].evidence["python_stack"], kStack);
}

TEST(GpuMemory, WithoutAStackTheOomIsSaidAfterTheWaitWithNone) {
  OomReports reports;
  OomRecord r = oom(200, 200, 1.0);
  r.total_bytes = 0;  // never said
  reports.on_oom(r);
  EXPECT_TRUE(reports.take_ready(static_cast<uint64_t>(1.2e9), [](int) { return std::nullopt; }).empty());
  auto evs = reports.take_ready(static_cast<uint64_t>(1.6e9), [](int) { return std::nullopt; });
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].rank, -1);
  EXPECT_EQ(evs[0].summary,
            "pid 200 ran out of GPU memory: cuMemAlloc of 2 GiB failed (CUDA_ERROR_OUT_OF_MEMORY) while it held "
            "78 GiB (peak 79 GiB)");
  EXPECT_TRUE(evs[0].evidence["python_stack"].is_null());
  EXPECT_TRUE(evs[0].evidence["total_bytes"].is_null());
  // A later burst is a new event.
  reports.on_oom(oom(200, 200, 1.0 + OomReports::kBurstSeconds + 1));
  EXPECT_EQ(reports.take_ready(static_cast<uint64_t>((3.0 + OomReports::kBurstSeconds) * 1e9),
                               [](int) { return std::nullopt; })
                .size(),
            1u);
}

// The failing call came before the rank ever asked its GPU's total; the
// framework asks right after (to word its error): the event has it.
TEST(GpuMemory, ATotalLearntAfterTheFailureIsTheEvents) {
  OomReports reports;
  OomRecord r = oom(400, 400, 1.0);
  r.total_bytes = 0;
  reports.on_oom(r);
  auto evs = reports.take_ready(static_cast<uint64_t>(2e9), [](int pid) {
    auto s = rank_three(pid);
    s->gpu_memory.total_bytes = 80 * kGiB;
    return s;
  });
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].evidence["total_bytes"], 80 * kGiB);
  EXPECT_EQ(reports.recent(400, static_cast<uint64_t>(2e9), 80 * kGiB)["total_bytes"], 80 * kGiB);
  EXPECT_TRUE(reports.recent(400, static_cast<uint64_t>(2e9))["total_bytes"].is_null());
}

TEST(GpuMemory, AnOomIsTheCauseOfAFailedEndShortlyAfterIt) {
  OomReports reports;
  reports.on_oom(oom(300, 300, 50.0));
  EXPECT_TRUE(reports.recent(301, static_cast<uint64_t>(51e9)).is_null());
  const auto cause = reports.recent(300, static_cast<uint64_t>(51e9));
  ASSERT_TRUE(cause.is_object());
  EXPECT_EQ(cause["asked_bytes"], 2 * kGiB);
  EXPECT_TRUE(reports.recent(300, static_cast<uint64_t>((50.0 + OomReports::kCauseSeconds + 1) * 1e9)).is_null());

  // Exited 1 after it: the reason is oom and the summary says why.
  ExitCause c = exit_cause_of(1 << 8, nullptr, false);
  c.gpu_oom = cause;
  EXPECT_EQ(exit_reason_of(1 << 8, c), ExitReason::kOom);
  RankSnapshot r;
  r.pid = 300;
  r.job_id = "llm";
  r.rank = 3;
  r.exited = true;
  r.exit_reason = ExitReason::kOom;
  r.exit_code = 1;
  r.exit_cause = c;
  EXPECT_EQ(rank_exit_event(r, 0).summary,
            "rank 3 of job llm (pid 300) exited with code 1 after running out of GPU memory: cuMemAlloc of 2 GiB "
            "failed (CUDA_ERROR_OUT_OF_MEMORY) while it held 78 GiB of 80 GiB of GPU memory");
  const auto ev = exit_evidence(r);
  EXPECT_EQ(ev["reason"], "oom");
  EXPECT_EQ(ev["code"], 1);
  EXPECT_EQ(ev["gpu_oom"]["held_bytes"], 78 * kGiB);
  EXPECT_TRUE(ev["oom"].is_null()) << "not the kernel's OOM killer";

  // Survived it and ended well: an exit like any other.
  ExitCause ok = exit_cause_of(0, nullptr, false);
  ok.gpu_oom = cause;
  EXPECT_EQ(exit_reason_of(0, ok), ExitReason::kExit);
  // Aborted after it: still the OOM, said with the signal.
  ExitCause abrt = exit_cause_of(6, nullptr, false);
  abrt.gpu_oom = cause;
  EXPECT_EQ(exit_reason_of(6, abrt), ExitReason::kOom);
  r.exit_cause = abrt;
  r.exit_code = 6;
  EXPECT_EQ(rank_exit_event(r, 0).summary.substr(0, 73),
            "rank 3 of job llm (pid 300) was killed by SIGABRT after running out of GP");
}

GpuMemoryView held(int64_t bytes, uint64_t total = 80 * kGiB) {
  GpuMemoryView m;
  m.held_bytes = bytes;
  m.peak_bytes = static_cast<uint64_t>(bytes);
  m.total_bytes = total;
  m.allocations["cuMemAlloc"] = {1, static_cast<uint64_t>(bytes)};
  return m;
}

TEST(GpuMemory, APoolThatGrewThenHeldStillIsNoLeak) {
  GpuMemoryJudge judge;
  GpuMemoryVerdict v;
  for (int s = 0; s <= 300; ++s) {
    // Warm-up: the pool grows for the first 20 s, then the caching allocator serves from it.
    const int64_t h = static_cast<int64_t>(std::min(s, 20)) * static_cast<int64_t>(kGiB);
    v = judge.judge(1, held(h), 0.5, s);
    if (s > 60) {
      EXPECT_EQ(v.growth_bytes_per_second, 0) << s;
    }
  }
  EXPECT_FALSE(v.pressure);
  EXPECT_EQ(v.seconds_to_full, -1);
}

TEST(GpuMemory, ALeakIsGrowthInEveryPartOfTheWindowWithItsRate) {
  GpuMemoryJudge judge;
  GpuMemoryVerdict v;
  // 64 MiB a 2-s step: the window is a dozen steps (24 s).
  for (int s = 0; s <= 40; ++s) {
    const int64_t h = static_cast<int64_t>(10 * kGiB + (s / 2) * 64 * kMiB);
    v = judge.judge(1, held(h), 2.0, s);
    if (s < 24) {
      EXPECT_EQ(v.growth_bytes_per_second, 0) << "not watched a whole window yet at " << s;
    }
  }
  EXPECT_NEAR(v.growth_bytes_per_second, 32.0 * kMiB, 2.5 * kMiB);
  EXPECT_EQ(v.growth_window_seconds, 24);
  EXPECT_GT(v.seconds_to_full, 0);
  EXPECT_NEAR(v.seconds_to_full, (80.0 * kGiB - (10.0 * kGiB + 20 * 64.0 * kMiB)) / v.growth_bytes_per_second, 1);
}

TEST(GpuMemory, ASlowStepsLeakIsJudgedOverADozenOfItsSteps) {
  GpuMemoryJudge judge;
  GpuMemoryVerdict v;
  // A 20-s step leaking 100 MiB a step, then an eval frees and regrows: not every part grows.
  for (int s = 0; s <= 240; ++s) v = judge.judge(1, held(static_cast<int64_t>((s / 20) * 100 * kMiB)), 20.0, s);
  EXPECT_GT(v.growth_bytes_per_second, 0);
  EXPECT_EQ(v.growth_window_seconds, 240);
  for (int s = 241; s <= 400; ++s)
    v = judge.judge(1, held(static_cast<int64_t>(((s / 20) % 3) * 100 * kMiB)), 20.0, s);
  EXPECT_EQ(v.growth_bytes_per_second, 0);
}

// The virtual memory API maps 20 MiB pages: a 2 MiB-a-step leak of a 1-s step
// takes a page every 10 s, flat in some parts of a 12-, 24- or 48-s window;
// every 16-s part of a 96-s one grows.
TEST(GpuMemory, ALeakInStairsWiderThanAPartIsJudgedOverALongerWindow) {
  GpuMemoryJudge judge;
  GpuMemoryVerdict v;
  for (int s = 0; s <= 90; ++s) v = judge.judge(1, held(static_cast<int64_t>((s / 10) * 20 * kMiB)), 1.0, s);
  EXPECT_EQ(v.growth_bytes_per_second, 0) << "shorter windows: parts flat; 96 s not watched yet";
  for (int s = 91; s <= 100; ++s) v = judge.judge(1, held(static_cast<int64_t>((s / 10) * 20 * kMiB)), 1.0, s);
  EXPECT_EQ(v.growth_window_seconds, 96);
  EXPECT_NEAR(v.growth_bytes_per_second, 2.0 * kMiB, 0.5 * kMiB);
}

TEST(GpuMemory, PressureNearTheTotalAndNoneWhereTheTotalIsUnknown) {
  GpuMemoryJudge judge;
  EXPECT_TRUE(judge.judge(1, held(static_cast<int64_t>(77 * kGiB)), 1, 0).pressure);
  EXPECT_FALSE(judge.judge(2, held(static_cast<int64_t>(70 * kGiB)), 1, 0).pressure);
  EXPECT_FALSE(judge.judge(3, held(static_cast<int64_t>(77 * kGiB), 0), 1, 0).pressure);
  judge.retain({1});
  EXPECT_FALSE(judge.judge(4, GpuMemoryView{}, 1, 0).pressure);
}

}  // namespace
}  // namespace argus
