#include "userspace/procfs/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>

namespace argus::procfs {
namespace {

constexpr std::string_view kVanished = "vanished: ";
constexpr std::string_view kPermission = "permission: ";
constexpr std::string_view kMalformed = "malformed: ";

ReadError errno_error(const std::string& what, int err) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOENT || err == ESRCH) return make_error(ErrorKind::kVanished, std::string(kVanished) + msg);
  if (err == EACCES || err == EPERM) return make_error(ErrorKind::kPermission, std::string(kPermission) + msg);
  return make_error(ErrorKind::kOther, msg);
}


// '\n' too: a stat line ends with one.
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Next whitespace-separated field of s, advancing s past it.
std::string_view next_field(std::string_view& s) {
  size_t b = 0;
  while (b < s.size() && is_space(s[b])) ++b;
  size_t e = b;
  while (e < s.size() && !is_space(s[e])) ++e;
  std::string_view f = s.substr(b, e - b);
  s.remove_prefix(e);
  return f;
}

std::optional<MapEntry> parse_maps_line(std::string_view line) {
  MapEntry m;
  std::string_view range = next_field(line);
  std::string_view perms = next_field(line);
  std::string_view offset = next_field(line);
  std::string_view dev = next_field(line);
  std::string_view inode = next_field(line);

  size_t dash = range.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto start = parse_num<uint64_t>(range.substr(0, dash), 16);
  auto end = parse_num<uint64_t>(range.substr(dash + 1), 16);
  if (!start || !end || *start >= *end) return std::nullopt;

  if (perms.size() != 4) return std::nullopt;
  if ((perms[0] != 'r' && perms[0] != '-') || (perms[1] != 'w' && perms[1] != '-') ||
      (perms[2] != 'x' && perms[2] != '-') || (perms[3] != 'p' && perms[3] != 's')) {
    return std::nullopt;
  }
  auto off = parse_num<uint64_t>(offset, 16);
  size_t colon = dev.find(':');
  if (!off || colon == std::string_view::npos) return std::nullopt;
  auto major = parse_num<uint32_t>(dev.substr(0, colon), 16);
  auto minor = parse_num<uint32_t>(dev.substr(colon + 1), 16);
  auto ino = parse_num<uint64_t>(inode, 10);
  if (!major || !minor || !ino) return std::nullopt;

  // Everything after the inode's padding is the path, spaces included.
  while (!line.empty() && is_space(line.front())) line.remove_prefix(1);
  constexpr std::string_view kDeleted = " (deleted)";
  if (line.size() > kDeleted.size() && line.ends_with(kDeleted)) {
    m.deleted = true;
    line.remove_suffix(kDeleted.size());
  }
  m.start = *start;
  m.end = *end;
  m.perms = std::string(perms);
  m.offset = *off;
  m.dev_major = *major;
  m.dev_minor = *minor;
  m.inode = *ino;
  m.path = std::string(line);
  return m;
}

// The reason a stat line does not parse, or the parsed value.
std::optional<std::string> parse_stat_into(std::string_view content, ProcStat& out) {
  size_t open = content.find('(');
  size_t close = content.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return "no \"(comm)\" field";
  }
  std::string_view pid_s = content.substr(0, open);
  while (!pid_s.empty() && is_space(pid_s.back())) pid_s.remove_suffix(1);
  auto pid = parse_num<int>(pid_s, 10);
  if (!pid || *pid <= 0) return "bad pid";
  out.pid = *pid;
  out.comm = std::string(content.substr(open + 1, close - open - 1));

  // Fields after comm, numbered from 3 (state) as in proc(5).
  std::string_view rest = content.substr(close + 1);
  std::vector<std::string_view> f;
  for (std::string_view x = next_field(rest); !x.empty() && f.size() < 20; x = next_field(rest)) f.push_back(x);
  if (f.size() < 20) return "too few fields after comm";
  auto field = [&](int n) { return f[n - 3]; };
  if (field(3).size() != 1) return "bad state";
  out.state = field(3)[0];
  auto ppid = parse_num<int>(field(4), 10);
  auto utime = parse_num<uint64_t>(field(14), 10);
  auto stime = parse_num<uint64_t>(field(15), 10);
  auto start = parse_num<uint64_t>(field(22), 10);
  if (!ppid || *ppid < 0) return "bad ppid";
  if (!utime || !stime || !start) return "bad utime, stime or starttime";
  out.ppid = *ppid;
  out.utime_ticks = *utime;
  out.stime_ticks = *stime;
  out.starttime_ticks = *start;
  return std::nullopt;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

ReadError malformed(const std::string& what) { return make_error(ErrorKind::kMalformed, std::string(kMalformed) + what); }

ParsedMaps parse_maps(std::string_view content) {
  ParsedMaps out;
  while (!content.empty()) {
    size_t nl = content.find('\n');
    std::string_view line = content.substr(0, nl);
    content.remove_prefix(nl == std::string_view::npos ? content.size() : nl + 1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;  // blank line
    if (auto m = parse_maps_line(line)) {
      out.entries.push_back(std::move(*m));
    } else {
      ++out.malformed_lines;
    }
  }
  return out;
}

std::map<std::string, std::string> parse_environ(std::string_view content) {
  std::map<std::string, std::string> env;
  while (!content.empty()) {
    size_t nul = content.find('\0');
    std::string_view entry = content.substr(0, nul);
    content.remove_prefix(nul == std::string_view::npos ? content.size() : nul + 1);
    size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));  // first wins
  }
  return env;
}

ReadResult<ProcStat> parse_stat(std::string_view content) {
  ProcStat st;
  if (auto why = parse_stat_into(content, st)) return malformed("stat: " + *why);
  return st;
}

ReadResult<std::string> read_file(const std::string& path, size_t max_bytes) {
  // O_NONBLOCK: a FIFO planted in a fake tree must not hang discovery.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (f.fd < 0) return errno_error("open " + path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return errno_error("stat " + path, errno);
  if (S_ISDIR(st.st_mode)) return make_error(ErrorKind::kOther, path + ": is a directory");
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("read " + path, errno);
    if (n == 0) return out;
    if (static_cast<size_t>(n) > max_bytes - out.size()) {
      return make_error(ErrorKind::kOther, path + ": larger than " + std::to_string(max_bytes) + " bytes");
    }
    out.append(buf, static_cast<size_t>(n));
  }
}

std::vector<int> list_pids(const std::string& proc_root) {
  std::vector<int> pids;
  DIR* dir = ::opendir(proc_root.c_str());
  if (!dir) return pids;
  while (struct dirent* e = ::readdir(dir)) {
    std::string_view name = e->d_name;
    // The kernel never writes a leading zero; "007" would not round-trip through pid_path().
    if (name.empty() || name[0] == '0' || name.find_first_not_of("0123456789") != std::string_view::npos) continue;
    auto pid = parse_num<int>(name, 10);
    if (!pid || *pid <= 0) continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {  // some filesystems do not fill d_type
      struct stat st {};
      is_dir = ::fstatat(::dirfd(dir), e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) pids.push_back(*pid);
  }
  ::closedir(dir);
  std::sort(pids.begin(), pids.end());
  return pids;
}

bool proc_root_shares_pid_namespace(const std::string& proc_root) {
  // procfs resolves "self" in the pid namespace of the mount, not the reader's:
  // the reader's pid there equals getpid() only when the namespaces are one.
  std::string self = proc_root;
  while (self.size() > 1 && self.back() == '/') self.pop_back();
  self += self == "/" ? "self" : "/self";
  char target[32] = {};
  const ssize_t n = ::readlink(self.c_str(), target, sizeof target - 1);
  if (n <= 0) return false;
  return std::string(target, static_cast<size_t>(n)) == std::to_string(::getpid());
}

std::string pid_path(const std::string& proc_root, int pid, std::string_view leaf) {
  std::string root = proc_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  std::string out = root + (root == "/" ? "" : "/") + std::to_string(pid);
  if (!leaf.empty()) {
    if (leaf.front() != '/') out += '/';
    out += leaf;
  }
  return out;
}

std::string root_path(const std::string& proc_root, int pid, const std::string& path_in_ns) {
  std::string out = pid_path(proc_root, pid, "root");
  if (path_in_ns.empty() || path_in_ns.front() != '/') out += '/';
  return out + path_in_ns;
}

ReadResult<ParsedMaps> read_maps(const std::string& proc_root, int pid) {
  auto content = read_file(pid_path(proc_root, pid, "maps"), 64 << 20);  // big jobs map many files
  if (!content) return content.failure();
  return parse_maps(*content);
}

ReadResult<std::map<std::string, std::string>> read_environ(const std::string& proc_root, int pid) {
  auto content = read_file(pid_path(proc_root, pid, "environ"));
  if (!content) return content.failure();
  return parse_environ(*content);
}

ReadResult<ProcStat> read_stat(const std::string& proc_root, int pid) {
  std::string path = pid_path(proc_root, pid, "stat");
  auto content = read_file(path, 64 << 10);
  if (!content) return content.failure();
  ProcStat st;
  if (auto why = parse_stat_into(*content, st)) return malformed(path + ": " + *why);
  return st;
}

}  // namespace argus::procfs
