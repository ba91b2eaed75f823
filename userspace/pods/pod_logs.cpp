#include "userspace/pods/pod_logs.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

#include "userspace/procfs/pod_cgroup.h"

namespace argus::pods {
namespace {

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

std::vector<std::string_view> split3(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (out.size() < 4) {
    const size_t end = s.find('_', start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return out;
}

// Calls f(name) for each entry of dir (no "." and ".."), at most `cap`; true when
// the cap cut the listing short.
bool for_each_entry(const std::string& dir, size_t cap, const std::function<void(const char*)>& f) {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return false;
  size_t n = 0;
  while (const dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0))) continue;
    if (n++ >= cap) return true;
    f(e->d_name);
  }
  return false;
}

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

bool is_dns_label(std::string_view s) {
  if (s.empty() || s.size() > 63 || !is_lower_alnum(s.front()) || !is_lower_alnum(s.back())) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return is_lower_alnum(c) || c == '-'; });
}

bool is_dns_subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    const size_t dot = s.find('.', start);
    const std::string_view label =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (!is_dns_label(label)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

std::optional<std::pair<PodNames, std::string>> parse_pod_dir_name(std::string_view name) {
  const auto parts = split3(name);
  if (parts.size() != 3 || !is_dns_label(parts[0]) || !is_dns_subdomain(parts[1])) return std::nullopt;
  auto uid = procfs::normalize_pod_uid(parts[2]);
  if (!uid) return std::nullopt;
  return std::pair{PodNames{std::string(parts[0]), std::string(parts[1]), std::string(name)}, *uid};
}

std::optional<ContainerLogName> parse_container_log_name(std::string_view name) {
  constexpr std::string_view kSuffix = ".log";
  constexpr size_t kIdPart = 65;  // "-" and 64 hex
  if (name.size() <= kSuffix.size() + kIdPart || name.substr(name.size() - kSuffix.size()) != kSuffix)
    return std::nullopt;
  name.remove_suffix(kSuffix.size());
  const std::string_view id = name.substr(name.size() - 64);
  if (name[name.size() - kIdPart] != '-' || !procfs::is_container_id(id)) return std::nullopt;
  const auto parts = split3(name.substr(0, name.size() - kIdPart));
  if (parts.size() != 3 || !is_dns_subdomain(parts[0]) || !is_dns_label(parts[1]) || !is_dns_label(parts[2]))
    return std::nullopt;
  ContainerLogName out{std::string(parts[0]), std::string(parts[1]), std::string(parts[2]), std::string(id)};
  std::transform(out.container_id.begin(), out.container_id.end(), out.container_id.begin(),
                 [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; });
  return out;
}

bool LogDirNames::available() const { return is_dir(opts_.pod_logs_dir); }

void LogDirNames::rescan_pods() {
  ++rescans_;
  std::map<std::string, PodNames> fresh;
  uint64_t malformed = 0;
  bool refused = false;
  const bool cut = for_each_entry(opts_.pod_logs_dir, opts_.max_dir_entries, [&](const char* name) {
    auto parsed = parse_pod_dir_name(name);
    if (!parsed) {
      ++malformed;
      return;
    }
    if (fresh.size() < opts_.max_pods)
      fresh.emplace(parsed->second, std::move(parsed->first));
    else
      refused = true;
  });
  if (refused) ++skips_["pods_over_cap"];  // a node with more pods than kept: some stay unnamed
  if (cut) ++skips_["dir_entries_over_cap"];
  // Counted once per distinct bad name would need a set as large as the dir: a
  // rescan counts the bad names it met (rescans happen only on a miss).
  if (malformed) skips_["pod_dir_malformed"] += malformed;
  by_uid_ = std::move(fresh);
}

std::optional<PodNames> LogDirNames::pod(const std::string& uid) {
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) return it->second;
  rescan_pods();
  if (auto it = by_uid_.find(uid); it != by_uid_.end()) return it->second;
  return std::nullopt;
}

std::optional<std::string> LogDirNames::container_by_link(const PodNames& pod, const std::string& container_id) {
  auto hit = [&]() -> std::optional<std::string> {
    auto it = container_names_.find(container_id);
    return it == container_names_.end() ? std::nullopt : std::optional(it->second);
  };
  if (auto name = hit()) return name;
  std::map<std::string, std::string> fresh;
  uint64_t malformed = 0;
  bool refused = false;
  const size_t keep = opts_.max_pods * 4;
  const bool cut = for_each_entry(opts_.container_logs_dir, opts_.max_dir_entries, [&](const char* name) {
    auto parsed = parse_container_log_name(name);
    if (!parsed) {
      ++malformed;
      return;
    }
    // Only a link for this very pod names the container (a reused id cannot mislead).
    if (parsed->container_id == container_id &&
        (parsed->pod != pod.pod || parsed->namespace_name != pod.namespace_name))
      return;
    if (fresh.size() < keep)
      fresh[parsed->container_id] = parsed->container;
    else
      refused = true;
  });
  if (refused) ++skips_["container_links_over_cap"];
  if (cut) ++skips_["dir_entries_over_cap"];
  if (malformed) skips_["container_link_malformed"] += malformed;
  container_names_ = std::move(fresh);
  return hit();
}

ContainerAnswer LogDirNames::container(const PodNames& pod, const std::string& container_id) {
  if (!container_id.empty())
    if (auto name = container_by_link(pod, container_id)) return {*name, true};
  // No link (an old kubelet, or the link dir not mounted): the pod's only container dir.
  std::vector<std::string> dirs;
  for_each_entry(opts_.pod_logs_dir + "/" + pod.dir, 64, [&](const char* name) {
    if (is_dns_label(name) && is_dir(opts_.pod_logs_dir + "/" + pod.dir + "/" + name)) dirs.emplace_back(name);
  });
  if (dirs.size() == 1) return {dirs.front(), false};
  return {};
}

}  // namespace argus::pods
