// GPU-side straggler reason and pipeline-bubble detection on hand-made signals.
#include <gtest/gtest.h>

#include "tests/unit/detector_test_util.h"

#include "userspace/detect/detectors.h"

namespace argus {
namespace {

// 8 ranks whose hosts are all on time (same wait ratio, no lag evidence).
std::vector<RankSignal> ranks_with_gpu(const std::map<int, double>& nccl_ratio, double base = 0.45) {
  std::vector<RankSignal> out;
  for (int p = 0; p < 8; ++p) {
    RankSignal s;
    s.pid = 200 + p;
    s.job_id = "pp-job";
    s.rank = p;
    s.sync_wait_ratio = 0.40;
    s.coverage = 1;
    s.gpu_valid = true;
    s.gpu_nccl_ratio = nccl_ratio.count(p) ? nccl_ratio.at(p) : base;
    out.push_back(s);
  }
  return out;
}

TEST(GpuStraggler, SlowGpuNamedWithReasonGpuWhileTheHostIsOnTime) {
  // Named once its share stayed low over a whole window (10 s) past the first
  // evaluation that saw it, and the flag's two evaluations.
  StragglerDetector d;
  auto sig = ranks_with_gpu({{3, 0.04}});
  for (int t = 1; t <= 11; ++t) EXPECT_TRUE(d.evaluate(sig, t).empty()) << t;
  auto ev = d.evaluate(sig, 12);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].rank, 3);
  EXPECT_EQ(ev[0].evidence["reason"], "gpu");
  EXPECT_EQ(ev[0].evidence["source"], "gpu");
  EXPECT_NE(ev[0].summary.find("on its GPU"), std::string::npos) << ev[0].summary;
  EXPECT_TRUE(d.state(203).straggler);
  EXPECT_EQ(d.state(203).reason, StragglerReason::kGpu);
  for (int p = 0; p < 8; ++p) {
    if (p != 3) {
      EXPECT_FALSE(d.state(200 + p).straggler) << p;
    }
  }
}

TEST(GpuStraggler, AShareLowForLessThanAWindowNamesNobody) {
  // Chance dips (jitter, uneven token counts) come and go; consecutive
  // evaluations see mostly the same window, so two of them are not two pieces
  // of evidence.
  StragglerDetector d;
  const auto low = ranks_with_gpu({{3, 0.04}}), even = ranks_with_gpu({});
  for (int t = 0; t < 60; ++t) EXPECT_TRUE(d.evaluate(t % 12 < 8 ? low : even, t).empty()) << t;
  EXPECT_FALSE(d.state(203).straggler);
}

TEST(GpuStraggler, HostEvidenceWinsTheReason) {
  StragglerDetector d;
  auto sig = ranks_with_gpu({{5, 0.02}});
  // Its host also issues the collectives last, waits least, and not because of
  // its own synchronize calls: a host straggler, whatever its GPU shows.
  sig[5].sync_wait_ratio = 0.02;
  detect_testutil::late_on(sig[5], "c0", 0.040, 0.140, 7);
  sig[5].lag.late_sync_share = 0.0;
  d.evaluate(sig, 1);
  auto ev = d.evaluate(sig, 2);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].evidence["reason"], "host");
  EXPECT_EQ(d.state(205).reason, StragglerReason::kHost);
}

TEST(GpuStraggler, EvenNcclTimeOrTooFewGpuRanksFlagNobody) {
  StragglerDetector d;
  auto sig = ranks_with_gpu({{1, 0.40}, {2, 0.50}, {6, 0.43}});
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(d.evaluate(sig, i).empty());
  auto one = ranks_with_gpu({{3, 0.01}});
  for (auto& s : one) s.gpu_valid = s.rank == 3;  // only one rank has GPU data: nothing to compare
  StragglerDetector d2;
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(d2.evaluate(one, i).empty());
}

TEST(GpuStraggler, ARankLateBecauseOfPipelineBubblesIsNotASlowGpu) {
  StragglerDetector d;
  auto sig = ranks_with_gpu({{4, 0.004}, {5, 0.004}});
  for (auto& s : sig) s.bubble_ratio = (s.rank == 4 || s.rank == 5) ? 0.45 : 0.09;
  for (int i = 0; i < 30; ++i) EXPECT_TRUE(d.evaluate(sig, i).empty());
}

std::vector<RankSignal> bubbles(const std::vector<double>& ratios) {
  std::vector<RankSignal> out;
  for (size_t p = 0; p < ratios.size(); ++p) {
    RankSignal s;
    s.pid = 300 + static_cast<int>(p);
    s.job_id = "pp-job";
    s.rank = static_cast<int>(p);
    s.coverage = 1;
    s.gpu_valid = true;
    s.bubble_ratio = ratios[p];
    out.push_back(s);
  }
  return out;
}

TEST(BubbleDetector, TheStageThatIdlesMostIsNamed) {
  BubbleDetector d;
  // pp 4 over 8 ranks: stage 0 never receives, stages 1-3 fill 10%, stage 2 has 30% more.
  auto sig = bubbles({0, 0, 0.10, 0.10, 0.40, 0.40, 0.10, 0.10});
  EXPECT_TRUE(d.evaluate(sig, 1).empty());
  auto ev = d.evaluate(sig, 2);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, EventKind::kPipelineBubble);
  EXPECT_EQ(ev[0].rank, 4);
  EXPECT_EQ(ev[1].rank, 5);
  EXPECT_EQ(ev[0].evidence["compared_with"], "peers");
  EXPECT_NE(ev[0].summary.find("idles 40%"), std::string::npos) << ev[0].summary;
  for (int p : {0, 1, 2, 3, 6, 7}) EXPECT_FALSE(d.flagged(300 + p)) << p;
  EXPECT_TRUE(d.evaluate(sig, 3).empty());  // no repeat while it holds
  auto calm = bubbles({0, 0, 0.10, 0.10, 0.10, 0.10, 0.10, 0.10});
  for (int i = 0; i < 3; ++i) d.evaluate(calm, 4 + i);
  EXPECT_FALSE(d.flagged(304));
}

TEST(BubbleDetector, UniformBubblesAreNormalButAGrowingOneIsNot) {
  BubbleDetector d;
  auto even = bubbles({0.12, 0.12, 0.12, 0.12});
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(d.evaluate(even, i).empty());
  // Every stage's bubble doubles and more: nobody stands out from the others,
  // but each stands out from its own past.
  auto grown = bubbles({0.35, 0.35, 0.35, 0.35});
  d.evaluate(grown, 10);
  auto ev = d.evaluate(grown, 11);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].evidence["compared_with"], "own_past");
  EXPECT_NEAR(ev[0].evidence["baseline_bubble_ratio"].get<double>(), 0.12, 1e-9);
}

}  // namespace
}  // namespace argus
