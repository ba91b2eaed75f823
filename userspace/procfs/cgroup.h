// Which cgroups a process is in (/proc/PID/cgroup) and where their control
// files live under the node's cgroup mount (<sysfs_root>/fs/cgroup): v2 (one
// unified tree), v1 (one tree per controller, some mounted together as
// "cpu,cpuacct"), or the hybrid layout with v2 at fs/cgroup/unified.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/common/result.h"

namespace argus::procfs {

struct CgroupLine {
  int hierarchy = -1;
  std::vector<std::string> controllers;  // empty for the v2 line ("0::/path") and named ones
  std::string name;                      // "systemd" for "name=systemd"
  std::string path;                      // "/kubepods/..." as the process's cgroup namespace shows it
  // The path starts with ".." components: the reader (the agent) sits in a
  // cgroup namespace of its own and the process's cgroup lies outside it. Such
  // a path names the cgroup (pod uid, container id) but no directory under the
  // node's cgroup mount: cgroup_dir() skips it.
  bool outside_namespace = false;
};
struct ParsedCgroups {
  std::vector<CgroupLine> lines;
  size_t malformed_lines = 0;
};
ParsedCgroups parse_cgroup(std::string_view content);
Result<ParsedCgroups> read_cgroup(const std::string& proc_root, int pid);

// The directory of the process's cgroup for one controller ("cpu", "memory"):
// the v1 tree that has the controller, else the v2 tree (when the controller is
// enabled there), else nullopt. `version` is set to 1 or 2.
struct CgroupDir {
  std::string dir;   // e.g. /sys/fs/cgroup/cpu,cpuacct/kubepods/pod.../cid
  std::string path;  // the cgroup path from /proc/PID/cgroup
  int version = 0;
};
std::optional<CgroupDir> cgroup_dir(const ParsedCgroups& cg, const std::string& sysfs_root,
                                    std::string_view controller);

// Moves the calling thread (and the threads it starts later) into the node's
// initial cgroup namespace (that of proc_root's kthreadd, else of its pid 1),
// unless it is there already.
// An agent in a container on cgroup v2 usually has a cgroup namespace of its
// own: there every other pod's /proc/PID/cgroup reads "/../../.." relative to
// the agent's cgroup, which names no directory under the node's cgroup mount
// (so no cpu.stat, no memory cgroup). Needs CAP_SYS_ADMIN; call it before any
// thread starts.
struct CgroupNamespaceJoin {
  enum class Outcome { kAlreadyThere, kJoined, kUnknown, kFailed } outcome = Outcome::kUnknown;
  std::string detail;  // what was done or why not, one line
};
CgroupNamespaceJoin join_node_cgroup_namespace(const std::string& proc_root);

}  // namespace argus::procfs
