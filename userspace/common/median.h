// The median every stage uses (the tracker's offsets and steps, the
// detectors' peer comparisons): one definition, the mean of the middle two
// for an even count, 0 for none.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

namespace argus {

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace argus
