// /proc parsing for discovery: which processes exist, what they map, their
// environment (rank identity) and their start time (to tell a reused pid apart).
// The proc root is a parameter ("/proc" on a node, a temp tree in tests), and
// the parsers take the file contents so that they are tested on plain strings.
#pragma once
#include <cstddef>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/common/result.h"

namespace argus::procfs {

// ---- Errors ---------------------------------------------------------------
// The kind of a failure, which callers decide on (a vanished process is
// routine; a refused read is worth a line). The message starts with the same
// word for the person reading it:
//   kVanished    "vanished: ..."    ENOENT/ESRCH: the process (or file) is gone
//   kPermission  "permission: ..."  EACCES/EPERM: the agent lacks the privilege (ptrace access mode, hidepid)
//   kMalformed   "malformed: ..."   the file was read but its content does not parse
//   kOther       anything else: other I/O errors (too large, a directory, EIO, ...)
enum class ErrorKind { kVanished, kPermission, kMalformed, kOther };
using ReadError = KindError<ErrorKind>;
template <typename T>
using ReadResult = Result<T, ReadError>;
template <typename T>
ErrorKind error_kind(const ReadResult<T>& r) {
  return r.ok() ? ErrorKind::kOther : r.failure().kind;
}
template <typename T>
bool vanished(const ReadResult<T>& r) {
  return error_kind(r) == ErrorKind::kVanished;
}

// ---- /proc/PID/maps -------------------------------------------------------
struct MapEntry {
  uint64_t start = 0, end = 0;
  std::string perms;  // "r-xp": always 4 characters
  uint64_t offset = 0;
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  std::string path;      // "" for anonymous; "[heap]", "[vdso]", ...; " (deleted)" stripped
  bool deleted = false;  // the mapped file was unlinked (e.g. a library replaced by an upgrade)
  bool executable() const { return perms.size() > 2 && perms[2] == 'x'; }
  bool file_backed() const { return !path.empty() && path[0] == '/'; }
};
struct ParsedMaps {
  std::vector<MapEntry> entries;
  size_t malformed_lines = 0;  // skipped lines; non-zero means a kernel format we do not know
};
// Paths may contain spaces (everything after the inode field is the path).
ParsedMaps parse_maps(std::string_view content);

// ---- /proc/PID/environ ----------------------------------------------------
// NUL-separated KEY=VALUE. Tolerates a missing trailing NUL, empty entries,
// entries without '=' or with an empty key (skipped) and arbitrary bytes in
// values (kept verbatim). The first occurrence of a key wins, like getenv().
std::map<std::string, std::string> parse_environ(std::string_view content);

// ---- /proc/PID/stat -------------------------------------------------------
struct ProcStat {
  int pid = 0;
  std::string comm;
  char state = '?';
  int ppid = 0;
  uint64_t utime_ticks = 0, stime_ticks = 0;
  uint64_t starttime_ticks = 0;  // since boot, in clock ticks: (pid, starttime) names a process
};
// comm may contain spaces, '(' and ')': it ends at the LAST ')'.
ReadResult<ProcStat> parse_stat(std::string_view content);

// ---- Helpers for the parsers of other /proc files ---------------------------
// A kMalformed error: "malformed: <what>".
ReadError malformed(const std::string& what);
// The whole of `s` as a number in `base`; nullopt for empty, partial or out of range.
template <typename T>
std::optional<T> parse_num(std::string_view s, int base = 10) {
  T v{};
  if (s.empty()) return std::nullopt;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// ---- Files and processes ---------------------------------------------------
// The whole file, read until EOF (st_size is 0 for /proc files). A file larger
// than max_bytes is an error rather than silently cut.
ReadResult<std::string> read_file(const std::string& path, size_t max_bytes = 4 << 20);
// Numeric directory entries of proc_root, ascending; empty when it cannot be read.
std::vector<int> list_pids(const std::string& proc_root);

ReadResult<ParsedMaps> read_maps(const std::string& proc_root, int pid);
ReadResult<std::map<std::string, std::string>> read_environ(const std::string& proc_root, int pid);
ReadResult<ProcStat> read_stat(const std::string& proc_root, int pid);

// "<proc_root>/<pid>/<leaf>"
std::string pid_path(const std::string& proc_root, int pid, std::string_view leaf);
// True when the pids under proc_root are this process's own pids: its
// "<proc_root>/self" names getpid(). A node's /proc mounted into a container
// with its own PID namespace (no hostPID) shows the host's pids, which the
// pid-taking syscalls (process_vm_readv) would read as another, local process.
bool proc_root_shares_pid_namespace(const std::string& proc_root);

// "<proc_root>/<pid>/root<path>": the path as seen in the process's mount
// namespace (a container's /usr/lib/... is not the node's).
std::string root_path(const std::string& proc_root, int pid, const std::string& path_in_ns);

}  // namespace argus::procfs
