// Pod and container names from the kubelet's log directories, mounted read-only
// into the agent's pod (no apiserver, no RBAC):
//   /var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log
//   /var/log/containers/<pod>_<namespace>_<container>-<64 hex id>.log  (symlinks into the above)
// Namespaces and pod names are DNS labels and subdomains and container names DNS
// labels: none holds '_', so splitting on it is exact. An entry that does not
// parse is skipped and counted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "userspace/common/defaults.h"

namespace argus::pods {

struct PodNames {
  std::string namespace_name;
  std::string pod;
  std::string dir;  // its directory's name under the pod logs dir
};

// "<namespace>_<pod>_<uid>" -> names and the normalized uid; nullopt when it does not parse.
std::optional<std::pair<PodNames, std::string>> parse_pod_dir_name(std::string_view name);

struct ContainerLogName {
  std::string pod, namespace_name, container, container_id;
};
// "<pod>_<namespace>_<container>-<64 hex>.log"; nullopt when it does not parse.
std::optional<ContainerLogName> parse_container_log_name(std::string_view name);

bool is_dns_label(std::string_view s);      // RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, <= 63
bool is_dns_subdomain(std::string_view s);  // labels joined by '.', <= 253

struct LogDirOptions {
  std::string pod_logs_dir = kDefaultPodLogsDir;
  std::string container_logs_dir = kDefaultContainerLogsDir;
  size_t max_pods = 4096;          // pods cached (cleared past it, counted)
  size_t max_dir_entries = 65536;  // entries read from one directory in one scan (the rest counted)
};

struct ContainerAnswer {
  std::string name;      // "" when unknown
  bool by_link = false;  // named by its /var/log/containers link (else the pod's only container)
};

// Not thread-safe: one caller (the agent's event loop).
class LogDirNames {
 public:
  explicit LogDirNames(LogDirOptions opts) : opts_(std::move(opts)) {}

  // The pod's names: from the cache, else after one rescan of the pod logs dir.
  std::optional<PodNames> pod(const std::string& uid);
  // The container's name in that pod: by its id's link, else the pod's only
  // container directory, else unknown.
  ContainerAnswer container(const PodNames& pod, const std::string& container_id);

  // False when the pod logs dir does not exist (bare metal; said once by the caller).
  bool available() const;

  // Entries skipped, by reason: "pod_dir_malformed", "container_link_malformed"
  // (names that do not parse), "dir_entries_over_cap" (a listing cut at
  // max_dir_entries), "pods_over_cap", "container_links_over_cap" (a scan that
  // met more than the cache keeps).
  const std::map<std::string, uint64_t>& skips() const { return skips_; }
  uint64_t rescans() const { return rescans_; }

 private:
  void rescan_pods();
  std::optional<std::string> container_by_link(const PodNames& pod, const std::string& container_id);

  LogDirOptions opts_;
  std::map<std::string, PodNames> by_uid_;
  std::map<std::string, std::string> container_names_;  // container id -> name (bounded with the pods)
  std::map<std::string, uint64_t> skips_;
  uint64_t rescans_ = 0;
};

}  // namespace argus::pods
