// A process's children and its I/O counters, from /proc: where a rank's
// DataLoader workers are, and what they cost. The parsers take the file's
// contents, so that malformed files are tested on plain strings.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/procfs/procfs.h"

namespace argus::procfs {

// /proc/<pid>/task/<tid>/children: the pids the thread forked, space-separated.
ReadResult<std::vector<int>> parse_children(std::string_view content);
// The children of a process's main thread (CONFIG_PROC_CHILDREN: a kernel
// without it answers vanished, as for a process that is gone).
ReadResult<std::vector<int>> read_children(const std::string& proc_root, int pid);

// /proc/<pid>/io: bytes read through read() and friends (rchar, the page
// cache and pipes included) and bytes the process made storage fetch
// (read_bytes). Reading it needs ptrace read access (the agent's privileges).
struct ProcIo {
  uint64_t rchar = 0;
  uint64_t read_bytes = 0;
};
ReadResult<ProcIo> parse_io(std::string_view content);
ReadResult<ProcIo> read_io(const std::string& proc_root, int pid);

}  // namespace argus::procfs
