#include "userspace/common/clock.h"

#include <time.h>

namespace argus {

static uint64_t read_ns(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t SystemClock::monotonic_ns() const { return read_ns(CLOCK_MONOTONIC); }
double SystemClock::unix_seconds() const { return static_cast<double>(read_ns(CLOCK_REALTIME)) / 1e9; }

double monotonic_to_unix(uint64_t mono_ns, const Clock& clock) {
  const double now_unix = clock.unix_seconds();
  const double age = (static_cast<double>(clock.monotonic_ns()) - static_cast<double>(mono_ns)) / 1e9;
  return now_unix - age;
}

}  // namespace argus
