// Per-step arrival statistics: operations completed out of order, and the
// pipeline's point-to-point pairs whose waits swap sides by schedule.
#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "userspace/comms/arrival_order.h"

namespace argus {
namespace {

constexpr int kSender = 100, kReceiver = 200;
constexpr double kStep = 0.1;

// The statistic of one communicator, by value: of() returns a temporary.
std::optional<CommLateness> on(const std::vector<CommLateness>& v, const std::string& comm) {
  for (const auto& c : v)
    if (c.comm == comm) return c;
  return std::nullopt;
}

// One step of a 2-stage pipeline pair: the forward exchange waits for the
// sender (it computes the forward) by `fwd_s`, the three that follow wait for
// the receiver side by `bwd_s` each (it computes the loss and the backward).
// Matched in the order the second side posts: the backward exchanges first.
void pipeline_step(ArrivalOrder& order, uint64_t step_start, double fwd_s, double bwd_s, StepStatistic stat) {
  const std::map<int, double> steps{{kSender, kStep}, {kReceiver, kStep}};
  auto at = [&](double s) { return step_start + static_cast<uint64_t>(s * 1e9); };
  for (int k = 1; k <= 3; ++k)
    order.add("pp/p2p", {{kSender, at(0.02 * k)}, {kReceiver, at(0.02 * k + bwd_s)}}, {}, steps, stat);
  order.add("pp/p2p", {{kSender, at(fwd_s)}, {kReceiver, at(0)}}, {}, steps, stat);
}

TEST(ArrivalOrder, APipelinePairsScheduleIsNobodysLatenessWithTheMean) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> jitter(-0.002, 0.002);
  ArrivalOrder mean, largest;
  uint64_t t = 1'000'000'000;
  for (int s = 0; s < 40; ++s, t += static_cast<uint64_t>(kStep * 1e9)) {
    const double fwd = 0.030 + jitter(rng), bwd = 0.010 + jitter(rng);
    pipeline_step(mean, t, fwd, bwd, StepStatistic::kMean);
    pipeline_step(largest, t, fwd, bwd, StepStatistic::kLargest);
  }
  // The forward wait (30 ms) is the largest of every step: read alone, the
  // sender is behind at every step. Its three backward waits (3 x 10 ms) are
  // the receiver's: over the step, nobody's.
  const auto l = on(largest.of(kSender, kStep, t), "pp/p2p");
  ASSERT_TRUE(l);
  EXPECT_GT(l->median_offset_s, 0.025);
  const auto m = on(mean.of(kSender, kStep, t), "pp/p2p");
  ASSERT_TRUE(m);
  EXPECT_NEAR(m->median_offset_s, 0, 0.003);
  EXPECT_EQ(m->bins, 40u);
  EXPECT_EQ(m->ops_per_step, 4);
}

TEST(ArrivalOrder, ASlowSenderIsLateOnItsPairWithTheMean) {
  ArrivalOrder order;
  uint64_t t = 1'000'000'000;
  // The sender 40 ms slower: its forward send is 40 ms later, and the
  // receiver's backward sends no longer wait on the receiver side.
  for (int s = 0; s < 40; ++s, t += static_cast<uint64_t>(kStep * 1e9))
    pipeline_step(order, t, 0.070 + 0.001 * (s % 3), -0.002, StepStatistic::kMean);
  const auto c = on(order.of(kSender, kStep, t), "pp/p2p");
  ASSERT_TRUE(c);
  EXPECT_GT(c->median_offset_s, 0.015);
  EXPECT_LT(c->p_late, 1e-4);
  const auto r = on(order.of(kReceiver, kStep, t), "pp/p2p");
  ASSERT_TRUE(r);
  EXPECT_LT(r->median_offset_s, -0.015);
}

TEST(ArrivalOrder, AnOperationThatBeganBeforeTheOpenStepIsOfThatStep) {
  // Each step's operations arrive newest first: every one began before the
  // one that opened its step's bin. One bin per step all the same.
  ArrivalOrder order;
  const std::map<int, double> steps{{1, kStep}, {2, kStep}};
  uint64_t t = 1'000'000'000;
  for (int s = 0; s < 30; ++s, t += static_cast<uint64_t>(kStep * 1e9))
    for (int k = 4; k >= 0; --k) {
      const uint64_t at = t + static_cast<uint64_t>(k * 0.015 * 1e9);
      order.add("tp", {{1, at}, {2, at + 1'000'000}}, {}, steps);
    }
  const auto c = order.of(2, kStep, t);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].bins, 30u);
  EXPECT_EQ(c[0].ops_per_step, 5);
}

}  // namespace
}  // namespace argus
