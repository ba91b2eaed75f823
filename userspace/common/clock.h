// Clocks, injected so that windows and detectors are testable deterministically.
#pragma once
#include <cstdint>

namespace argus {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t monotonic_ns() const = 0;  // the clock BPF timestamps use
  virtual double unix_seconds() const = 0;    // wall clock, for people and the API
};

class SystemClock final : public Clock {
 public:
  uint64_t monotonic_ns() const override;
  double unix_seconds() const override;
};

// Converts a BPF timestamp (CLOCK_MONOTONIC ns) to wall-clock seconds.
double monotonic_to_unix(uint64_t mono_ns, const Clock& clock);

}  // namespace argus
