// The small arithmetic every detector shares: medians, and numbers as the
// summaries print them.
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

namespace argus::detect {

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// One number with a printf format ("%.0f"), for summaries.
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

}  // namespace argus::detect
