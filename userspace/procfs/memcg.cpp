#include "userspace/procfs/memcg.h"

#include <sys/stat.h>

#include <charconv>

#include "userspace/procfs/procfs.h"

namespace argus::procfs {
namespace {

constexpr size_t kMaxControlFile = 16 << 10;
// v1 reports "no limit" as PAGE_COUNTER_MAX pages rounded to bytes: 2^63 - page.
constexpr uint64_t kV1Unlimited = uint64_t{1} << 62;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\n')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// A file's single number: unset when absent, counted when malformed.
std::optional<uint64_t> read_number(const std::string& path, size_t* malformed) {
  auto text = read_file(path, kMaxControlFile);
  if (!text.ok()) return std::nullopt;
  auto v = parse_u64(trim(*text));
  if (!v) ++*malformed;
  return v;
}

std::optional<uint64_t> read_limit(const std::string& path, size_t* malformed) {
  auto text = read_file(path, kMaxControlFile);
  if (!text.ok()) return std::nullopt;
  auto v = parse_memory_limit(*text);
  if (!v.ok()) {
    ++*malformed;
    return std::nullopt;
  }
  return *v;
}

std::optional<std::map<std::string, uint64_t>> read_keyed(const std::string& path, size_t* malformed) {
  auto text = read_file(path, kMaxControlFile);
  if (!text.ok()) return std::nullopt;
  auto kv = parse_flat_keyed(*text);
  if (!kv) ++*malformed;
  return kv;
}

std::optional<uint64_t> value_of(const std::optional<std::map<std::string, uint64_t>>& kv, const std::string& key) {
  if (!kv) return std::nullopt;
  auto it = kv->find(key);
  if (it == kv->end()) return std::nullopt;
  return it->second;
}

}  // namespace

std::optional<std::map<std::string, uint64_t>> parse_flat_keyed(std::string_view content) {
  std::map<std::string, uint64_t> out;
  while (!content.empty()) {
    const size_t nl = content.find('\n');
    std::string_view line = trim(content.substr(0, nl));
    content = nl == std::string_view::npos ? std::string_view() : content.substr(nl + 1);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) return std::nullopt;
    auto v = parse_u64(trim(line.substr(sp + 1)));
    if (!v) return std::nullopt;
    out[std::string(line.substr(0, sp))] = *v;
  }
  return out;
}

Result<std::optional<uint64_t>> parse_memory_limit(std::string_view content) {
  const std::string_view s = trim(content);
  if (s == "max") return std::optional<uint64_t>();
  auto v = parse_u64(s);
  if (!v) return make_error("not a memory limit: '" + std::string(s.substr(0, 40)) + "'");
  if (*v >= kV1Unlimited) return std::optional<uint64_t>();
  return std::optional<uint64_t>(*v);
}

Result<MemcgState> read_memcg(const CgroupDir& dir) {
  struct stat st {};
  if (::stat(dir.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return make_error("memory cgroup " + dir.dir + " is gone");
  MemcgState m;
  m.dir = dir.dir;
  m.path = dir.path;
  m.version = dir.version;
  const std::string d = dir.dir + "/";
  if (dir.version == 2) {
    auto events = read_keyed(d + "memory.events", &m.malformed_files);
    m.oom_events = value_of(events, "oom");
    m.oom_kills = value_of(events, "oom_kill");
    m.limit_bytes = read_limit(d + "memory.max", &m.malformed_files);
    m.usage_bytes = read_number(d + "memory.current", &m.malformed_files);
    m.peak_bytes = read_number(d + "memory.peak", &m.malformed_files);
  } else {
    m.oom_kills = value_of(read_keyed(d + "memory.oom_control", &m.malformed_files), "oom_kill");
    m.limit_bytes = read_limit(d + "memory.limit_in_bytes", &m.malformed_files);
    m.usage_bytes = read_number(d + "memory.usage_in_bytes", &m.malformed_files);
    m.peak_bytes = read_number(d + "memory.max_usage_in_bytes", &m.malformed_files);
  }
  return m;
}

std::optional<CgroupDir> memcg_dir(const std::string& proc_root, const std::string& sysfs_root, int pid) {
  auto cg = read_cgroup(proc_root, pid);
  if (!cg.ok()) return std::nullopt;
  return cgroup_dir(*cg, sysfs_root, "memory");
}

}  // namespace argus::procfs
