#include "userspace/procfs/cgroup.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <charconv>
#include <sstream>

#include "userspace/procfs/procfs.h"

namespace argus::procfs {
namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(sep, start);
    if (end == std::string_view::npos) end = s.size();
    if (end > start) out.emplace_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// A cgroup path must be absolute and may climb only at its start: the kernel
// writes leading ".." for a cgroup outside the reader's cgroup namespace, and
// never a ".." after a name.
bool safe_path(const std::string& p, bool* outside_namespace) {
  if (p.empty() || p[0] != '/') return false;
  bool named = false;
  *outside_namespace = false;
  for (const auto& part : split(p, '/')) {
    if (part != "..") {
      named = true;
    } else if (named) {
      return false;
    } else {
      *outside_namespace = true;
    }
  }
  return true;
}

// The controller's v1 mount: fs/cgroup/<ctrl>, or a joint mount named after
// the controllers it holds (the hierarchy line lists them in mount order).
std::optional<std::string> v1_mount(const std::string& base, const CgroupLine& line, std::string_view controller) {
  std::string joined;
  for (const auto& c : line.controllers) joined += (joined.empty() ? "" : ",") + c;
  for (const std::string& name : {std::string(controller), joined})
    if (!name.empty() && is_dir(base + "/" + name)) return base + "/" + name;
  return std::nullopt;
}

}  // namespace

ParsedCgroups parse_cgroup(std::string_view content) {
  ParsedCgroups out;
  size_t pos = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    const std::string_view line = content.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    // hierarchy-ID:controller-list:path (the path may itself contain ':').
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) {
      ++out.malformed_lines;
      continue;
    }
    CgroupLine l;
    const std::string_view id = line.substr(0, c1);
    auto [p, ec] = std::from_chars(id.data(), id.data() + id.size(), l.hierarchy);
    l.path = std::string(line.substr(c2 + 1));
    if (ec != std::errc() || p != id.data() + id.size() || l.hierarchy < 0 || !safe_path(l.path, &l.outside_namespace)) {
      ++out.malformed_lines;
      continue;
    }
    for (auto& c : split(line.substr(c1 + 1, c2 - c1 - 1), ',')) {
      if (c.rfind("name=", 0) == 0)
        l.name = c.substr(5);
      else
        l.controllers.push_back(std::move(c));
    }
    out.lines.push_back(std::move(l));
  }
  return out;
}

Result<ParsedCgroups> read_cgroup(const std::string& proc_root, int pid) {
  auto text = read_file(pid_path(proc_root, pid, "cgroup"), 64 << 10);
  if (!text.ok()) return make_error(text.error());
  return parse_cgroup(*text);
}

std::optional<CgroupDir> cgroup_dir(const ParsedCgroups& cg, const std::string& sysfs_root,
                                    std::string_view controller) {
  const std::string base = sysfs_root + "/fs/cgroup";
  for (const auto& line : cg.lines) {
    if (line.hierarchy == 0 || line.outside_namespace) continue;
    for (const auto& c : line.controllers) {
      if (c != controller) continue;
      if (auto mount = v1_mount(base, line, controller)) {
        const std::string dir = *mount + (line.path == "/" ? "" : line.path);
        if (is_dir(dir)) return CgroupDir{dir, line.path, 1};
      }
    }
  }
  for (const auto& line : cg.lines) {
    if (line.hierarchy != 0 || !line.controllers.empty() || !line.name.empty() || line.outside_namespace) continue;
    // v2 at the top (pure v2) or at fs/cgroup/unified (hybrid); the controller
    // must be enabled in that tree (listed in the root's cgroup.controllers).
    for (const std::string& root : {base, base + "/unified"}) {
      auto ctrls = read_file(root + "/cgroup.controllers", 4096);
      if (!ctrls.ok()) continue;
      bool enabled = false;
      for (const auto& c : split(*ctrls, ' '))
        if (c == controller || c == std::string(controller) + "\n") enabled = true;
      const std::string dir = root + (line.path == "/" ? "" : line.path);
      if (enabled && is_dir(dir) && exists(dir + "/cgroup.procs")) return CgroupDir{dir, line.path, 2};
    }
  }
  return std::nullopt;
}

CgroupNamespaceJoin join_node_cgroup_namespace(const std::string& proc_root) {
  using Outcome = CgroupNamespaceJoin::Outcome;
  // kthreadd (pid 2, a kernel thread) is always in the initial namespaces, and
  // its ns links are readable where init's may not be (an init that is not
  // dumpable); pid 1 only where pid 2 is not kthreadd.
  auto kthreadd = read_stat(proc_root, 2);
  const int node_pid = kthreadd.ok() && kthreadd->comm == "kthreadd" && kthreadd->ppid == 0 ? 2 : 1;
  const std::string node_ns = pid_path(proc_root, node_pid, "ns/cgroup");
  struct stat node{}, own{};
  if (::stat(node_ns.c_str(), &node) != 0)  // a fixture root, or no pid 1 to see
    return {Outcome::kUnknown, "cannot stat " + node_ns + ": " + std::strerror(errno)};
  if (::stat("/proc/self/ns/cgroup", &own) != 0)
    return {Outcome::kUnknown, std::string("cannot stat /proc/self/ns/cgroup: ") + std::strerror(errno)};
  if (node.st_ino == own.st_ino && node.st_dev == own.st_dev) return {Outcome::kAlreadyThere, "in the node's"};
  const int fd = ::open(node_ns.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {Outcome::kFailed, "cannot open " + node_ns + ": " + std::strerror(errno)};
  const int rc = ::setns(fd, CLONE_NEWCGROUP);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return {Outcome::kFailed, "setns(" + node_ns + ", CLONE_NEWCGROUP): " + std::strerror(err)};
  return {Outcome::kJoined, "joined the node's (" + node_ns + ")"};
}

}  // namespace argus::procfs
