#include "userspace/comms/step_pattern.h"

#include <algorithm>
#include <vector>

namespace argus {

void StepPattern::on_call(uint64_t signature, uint64_t ts_ns) {
  calls_.emplace_back(signature, ts_ns);
  while (calls_.size() > kMaxCalls) calls_.pop_front();
}

void StepPattern::trim_before(uint64_t cutoff_ns) {
  while (!calls_.empty() && calls_.front().second < cutoff_ns) calls_.pop_front();
}

double StepPattern::step_seconds(size_t* calls) const {
  if (calls) *calls = 0;
  const size_t n = calls_.size();
  // The smallest period whose last repetitions (three, and at least kMinSpan
  // calls) match, and which holds more than one kind of call: most shifts fail
  // within a few comparisons, so this stays cheap.
  for (size_t p = 1; p <= kMaxPeriod; ++p) {
    const size_t span = std::max(3 * p, kMinSpan);
    if (span + p > n) break;
    const auto allowed = static_cast<size_t>(static_cast<double>(span) * (1 - kMinMatch));
    size_t misses = 0;
    for (size_t i = n - span; i < n && misses <= allowed; ++i)
      if (calls_[i].first != calls_[i - p].first) ++misses;
    if (misses > allowed) continue;
    bool varied = false;
    for (size_t i = n - p; i < n && !varied; ++i) varied = calls_[i].first != calls_[n - 1].first;
    if (!varied) continue;  // one call repeated: no step in it
    std::vector<uint64_t> periods;
    for (size_t i = n - span; i < n; ++i) periods.push_back(calls_[i].second - calls_[i - p].second);
    std::nth_element(periods.begin(), periods.begin() + periods.size() / 2, periods.end());
    if (calls) *calls = p;
    return static_cast<double>(periods[periods.size() / 2]) / 1e9;
  }
  return 0;
}

}  // namespace argus
