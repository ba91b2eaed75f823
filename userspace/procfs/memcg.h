// The memory controller of a rank's cgroup, read to explain an OOM kill: v2
// (memory.events, memory.max, memory.current, memory.peak) or v1
// (memory.oom_control, memory.limit_in_bytes, memory.usage_in_bytes,
// memory.max_usage_in_bytes). The directory is remembered while the rank lives:
// a dead process's /proc entry no longer says where it was.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "userspace/common/result.h"
#include "userspace/procfs/cgroup.h"

namespace argus::procfs {

// "key value" lines (memory.events, memory.oom_control). Nullopt when a line is
// not two fields with a decimal second one.
std::optional<std::map<std::string, uint64_t>> parse_flat_keyed(std::string_view content);
// A byte limit: "max" (v2) and v1's "no limit" (a value near 2^63) are no
// limit (nullopt inside), a decimal is bytes; anything else is an error.
Result<std::optional<uint64_t>> parse_memory_limit(std::string_view content);

struct MemcgState {
  std::string dir;   // where the control files are
  std::string path;  // the cgroup path from /proc/PID/cgroup
  int version = 0;
  std::optional<uint64_t> limit_bytes;  // none: unlimited or unreadable
  std::optional<uint64_t> usage_bytes;  // memory.current / memory.usage_in_bytes
  std::optional<uint64_t> peak_bytes;   // memory.peak / memory.max_usage_in_bytes
  std::optional<uint64_t> oom_events;   // v2 memory.events "oom" (v1 has no such count)
  std::optional<uint64_t> oom_kills;    // v2 memory.events "oom_kill", v1 memory.oom_control "oom_kill"
  size_t malformed_files = 0;           // files present but not understood
};
// Reads what the directory has; files that are absent stay unset. An error only
// when the directory itself cannot be read.
Result<MemcgState> read_memcg(const CgroupDir& dir);

// The memory cgroup of a process (nullopt: none found).
std::optional<CgroupDir> memcg_dir(const std::string& proc_root, const std::string& sysfs_root, int pid);

}  // namespace argus::procfs
