// A clock the test moves by hand: monotonic and wall time advance together, so
// windows, grace periods and event times are exact.
#pragma once
#include <cstdint>

#include "userspace/common/clock.h"

namespace argus::testing_support {

class ManualClock : public Clock {
 public:
  ManualClock() = default;
  ManualClock(uint64_t mono_ns, double unix_s) : ns(mono_ns), unix_start(unix_s - static_cast<double>(mono_ns) / 1e9) {}
  uint64_t monotonic_ns() const override { return ns; }
  double unix_seconds() const override { return unix_start + static_cast<double>(ns) / 1e9; }
  void advance(double seconds) { ns += static_cast<uint64_t>(seconds * 1e9); }

  uint64_t ns = 1'000'000'000'000ULL;
  double unix_start = 1'790'000'000.0 - 1'000.0;  // unix_seconds() = 1'790'000'000 at the default ns
};

}  // namespace argus::testing_support
