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

// A 2-rank group's steps where each offset carries part of the step before's
// (a rank that ran long finishes its optimizer late and starts the next step
// late): offset[k] = e[k] + carry * e[k-1], healthy. Counts the steps after
// which the rank reads surely late (the detector's default tests), and keeps
// the last statistic.
struct CorrelatedRun {
  size_t surely_late = 0;
  CommLateness last;
};
CorrelatedRun run_correlated(ArrivalOrder& order, unsigned seed, int steps, double carry, double shift_from = -1,
                             double shift_s = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> e(0, 0.005);
  const std::map<int, double> period{{1, kStep}, {2, kStep}};
  CorrelatedRun out;
  double prev = e(rng);
  uint64_t t = 1'000'000'000;
  for (int s = 0; s < steps; ++s, t += static_cast<uint64_t>(kStep * 1e9)) {
    const double now = e(rng);
    const double offset = now + carry * prev + (shift_from >= 0 && s >= shift_from ? shift_s : 0);
    prev = now;
    const uint64_t at = t + 10'000'000;  // both well inside the step
    order.add("tp", {{1, at + static_cast<uint64_t>(std::max(0.0, offset) * 1e9)},
                     {2, at + static_cast<uint64_t>(std::max(0.0, -offset) * 1e9)}},
              {}, period);
    const auto c = on(order.of(1, kStep, t + 20'000'000), "tp");
    if (!c) continue;
    out.last = *c;
    if (c->p_late <= 1e-4 && c->t_score >= 4) ++out.surely_late;
  }
  return out;
}

TEST(ArrivalOrder, StepsThatCarryTheStepBeforeAreFewerIndependentOnes) {
  // Healthy, with a carry that makes consecutive steps correlate by ~0.5 (the
  // simulator's TP2xPP2xDP2 job with 30% jitter measured 0.2 to 0.5): counted
  // as independent steps, chance runs read as a late rank now and then.
  ArrivalOrderOptions independent;
  independent.serial_max = 0;
  size_t naive = 0, corrected = 0;
  double rho = 0;
  for (unsigned seed = 1; seed <= 4; ++seed) {
    ArrivalOrder a(independent), b;
    naive += run_correlated(a, seed, 3000, 0.9).surely_late;
    const CorrelatedRun r = run_correlated(b, seed, 3000, 0.9);
    corrected += r.surely_late;
    rho += r.last.serial_correlation / 4;
  }
  EXPECT_GT(naive, 0u);  // the case is a real one
  EXPECT_EQ(corrected, 0u);
  EXPECT_NEAR(rho, 0.9 / (1 + 0.81), 0.15);  // MA(1): theta / (1 + theta^2)
}

TEST(ArrivalOrder, AStragglerAfterCorrelatedStepsIsStillSurelyLate) {
  // The same healthy job, then rank 1 behind by 15 ms a step (twice the
  // offsets' spread): the correlation learnt while healthy asks for more
  // steps, not for a bigger lag, and what it learns after the onset does not
  // hide it.
  ArrivalOrder order;
  const CorrelatedRun r = run_correlated(order, 7, 400 + 60, 0.9, 400, 0.015);
  EXPECT_GT(r.last.serial_correlation, 0.2);
  EXPECT_LE(r.last.p_late, 1e-4);
  EXPECT_GE(r.last.t_score, 4);
  EXPECT_GT(r.surely_late, 0u);
}

}  // namespace
}  // namespace argus
