// The small arithmetic every detector shares: medians, and numbers as the
// summaries print them.
#pragma once
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "userspace/common/median.h"

namespace argus::detect {

using argus::median_of;  // userspace/common/median.h

// One number with a printf format ("%.0f"), for summaries.
inline std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

}  // namespace argus::detect
