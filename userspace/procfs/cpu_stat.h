// The CPU controller's throttling counters of a cgroup (cpu.stat): v2 gives
// throttled_usec, v1 (the cpu controller) throttled_time in ns.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "userspace/common/result.h"

namespace argus::procfs {

struct CpuStat {
  bool has_quota_counters = false;  // nr_periods present (a root v2 cgroup has none)
  uint64_t nr_periods = 0;
  uint64_t nr_throttled = 0;
  uint64_t throttled_ns = 0;
};

// "key value" lines; an unknown key is ignored, a line that is not one
// (no value, not a number) makes the whole file an error.
Result<CpuStat> parse_cpu_stat(std::string_view content, int version);
// <dir>/cpu.stat of a cgroup directory (cgroup_dir's), version 1 or 2.
Result<CpuStat> read_cpu_stat(const std::string& dir, int version);

}  // namespace argus::procfs
