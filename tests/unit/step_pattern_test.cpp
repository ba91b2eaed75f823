// The step period from a rank's call pattern: streams shaped as frameworks
// make them (accumulated micro-batches, a gradient reduction, a synchronize),
// timed with jitter.
#include <gtest/gtest.h>

#include <random>

#include "userspace/comms/step_pattern.h"

namespace argus {
namespace {

constexpr uint32_t kTp = 1, kDp = 2, kPp = 3, kSync = 4;
constexpr uint32_t kAllReduce = 1, kSend = 2, kRecv = 3, kStreamSync = 9;

struct Stream {
  StepPattern pattern;
  uint64_t now_ns = 1'000'000'000;
  std::mt19937 rng{7};
  void call(uint32_t comm, uint32_t op, uint64_t bytes, double gap_ms) {
    std::uniform_real_distribution<double> jitter(0.7, 1.3);
    now_ns += static_cast<uint64_t>(gap_ms * jitter(rng) * 1e6);
    pattern.on_call(call_signature(comm, op, bytes), now_ns, comm != kSync);
  }
};

// One pipeline stage's step: `accum` micro-batches, each a receive, `layers`
// tensor-parallel all-reduces and a send; then the gradient all-reduce and the
// step's synchronize. Returns the step's nominal length in ms.
double micro_batched_step(Stream& s, int accum, int layers) {
  double ms = 0;
  auto call = [&](uint32_t comm, uint32_t op, uint64_t bytes, double gap) {
    s.call(comm, op, bytes, gap);
    ms += gap;
  };
  for (int m = 0; m < accum; ++m) {
    call(kPp, kRecv, 0, 1);
    for (int l = 0; l < layers; ++l) call(kTp, kAllReduce, 1 << 20, 2);
    call(kPp, kSend, 0, 1);
    for (int l = 0; l < layers; ++l) call(kTp, kAllReduce, 1 << 20, 2);
  }
  call(kDp, kAllReduce, 64 << 20, 5);
  call(kSync, kStreamSync, 0, 5);
  return ms;
}

// The period found is `calls` long and spans the step, within 10%.
void expect_step(const Stream& s, size_t calls, double step_ms, int accum) {
  size_t found = 0;
  const double step = s.pattern.step_seconds(&found);
  EXPECT_EQ(found, calls) << "accum " << accum;
  EXPECT_NEAR(step, step_ms / 1e3, 0.1 * step_ms / 1e3) << "accum " << accum;
}

TEST(StepPattern, MicroBatchesThatLookAlikeAreNotTheStep) {
  // Two micro-batches of 34 calls and 2 step-end calls: the half step matches
  // 97% of the calls, the step all of them.
  for (int accum : {2, 4}) {
    Stream s;
    double step_ms = 0;
    for (int i = 0; i < 40; ++i) step_ms = micro_batched_step(s, accum, 16);
    expect_step(s, static_cast<size_t>(accum * 34 + 2), step_ms, accum);
  }
}

TEST(StepPattern, AnExactShortPeriodStaysShort) {
  // A flat step: 4 collectives and a synchronize, repeated.
  Stream s;
  for (int i = 0; i < 100; ++i) {
    for (int b = 0; b < 4; ++b) s.call(kDp, kAllReduce, (b + 1) << 20, 5);
    s.call(kSync, kStreamSync, 0, 10);
  }
  size_t calls = 0;
  EXPECT_NEAR(s.pattern.step_seconds(&calls), 0.030, 0.005);
  EXPECT_EQ(calls, 5u);
}

TEST(StepPattern, ACallInsertedOnceKeepsThePeriod) {
  // An evaluation's extra collective once in a while: a longer period would
  // miss more for it, never less.
  Stream s;
  for (int i = 0; i < 60; ++i) {
    micro_batched_step(s, 1, 8);
    if (i == 50) s.call(kDp, kAllReduce, 4, 1);
  }
  size_t calls = 0;
  s.pattern.step_seconds(&calls);
  EXPECT_EQ(calls, 20u);
}

TEST(StepPattern, SynchronizesEveryTenthStepKeepTheStep) {
  // Logging every tenth step synchronizes twice more (inserted calls): the
  // span that holds them does not match at one step, the others do.
  for (int accum : {1, 8}) {
    Stream s;
    double step_ms = 0;
    for (int i = 0; i < 120; ++i) {
      step_ms = micro_batched_step(s, accum, 4);
      if (i % 10 == 0) {
        s.call(kSync, kStreamSync + 1, 0, 1);
        s.call(kSync, kStreamSync + 2, 0, 1);
      }
    }
    expect_step(s, static_cast<size_t>(accum * 10 + 2), step_ms, accum);
  }
}

TEST(StepPattern, OneRepeatedCallHasNoStep) {
  Stream s;
  for (int i = 0; i < 300; ++i) s.call(kDp, kAllReduce, 1 << 20, 3);
  EXPECT_EQ(s.pattern.step_seconds(), 0);
}

}  // namespace
}  // namespace argus
