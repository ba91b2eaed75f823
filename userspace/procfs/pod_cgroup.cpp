#include "userspace/procfs/pod_cgroup.h"

#include <algorithm>
#include <vector>

namespace argus::procfs {
namespace {

// Longer than any path the kubelet and a runtime write (PATH_MAX): not looked into.
constexpr size_t kMaxPathLength = 4096;

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

std::vector<std::string_view> components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    if (end > start) out.push_back(path.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The uid part of a pod's own cgroup, as written (systemd: '_' for '-'), or
// nullopt when the component is not a pod's. `under_kubepods`: an earlier
// component was the kubelet's (the cgroupfs driver's "pod<uid>" alone is too
// common a name to trust).
std::optional<std::string> pod_uid_part(std::string_view c, bool under_kubepods) {
  if (ends_with(c, ".slice")) {
    // kubepods[-<qos>]-pod<uid>.slice, possibly behind a --cgroup-root prefix ("kubelet-kubepods-...").
    const size_t kube = c.find("kubepods");
    const size_t pod = c.rfind("-pod");
    if (kube == std::string_view::npos || pod == std::string_view::npos || pod < kube) return std::nullopt;
    std::string uid(c.substr(pod + 4, c.size() - 6 - (pod + 4)));
    std::replace(uid.begin(), uid.end(), '_', '-');
    return uid;
  }
  if (under_kubepods && c.starts_with("pod")) return std::string(c.substr(3));
  return std::nullopt;
}

// The container cgroup below the pod's: "<runtime>-<id>.scope" (systemd) or "<id>" (cgroupfs).
void parse_container(std::string_view c, PodCgroupRef& ref) {
  const bool scope = ends_with(c, ".scope");
  if (scope) c.remove_suffix(6);
  struct Prefix {
    std::string_view text, runtime;
    bool container;
  };
  static constexpr Prefix kPrefixes[] = {
      {"cri-containerd-", "containerd", true},
      {"crio-conmon-", "crio", false},  // the runtime's monitor, not the container
      {"crio-", "crio", true},
      {"docker-", "docker", true},
  };
  for (const auto& p : kPrefixes) {
    if (!c.starts_with(p.text)) continue;
    ref.runtime = p.runtime;
    const std::string_view id = c.substr(p.text.size());
    if (p.container && is_container_id(id)) ref.container_id = lowered(id);
    return;
  }
  if (!scope && is_container_id(c)) ref.container_id = lowered(c);
}

// Lower is preferred: the v2 line, name=systemd, cpu, memory, then the rest.
int line_preference(const CgroupLine& l) {
  if (l.hierarchy == 0 && l.controllers.empty() && l.name.empty()) return 0;
  if (l.name == "systemd") return 1;
  if (std::find(l.controllers.begin(), l.controllers.end(), "cpu") != l.controllers.end()) return 2;
  if (std::find(l.controllers.begin(), l.controllers.end(), "memory") != l.controllers.end()) return 3;
  return 4;
}

}  // namespace

const char* pod_cgroup_result_label(PodCgroupResult r) {
  switch (r) {
    case PodCgroupResult::kFound:
      return "found";
    case PodCgroupResult::kNotPod:
      return "not_pod";
    case PodCgroupResult::kNamespaced:
      return "cgroup_namespaced";
    case PodCgroupResult::kMalformed:
      return "cgroup_malformed";
  }
  return "unknown";
}

bool is_container_id(std::string_view s) { return s.size() == 64 && std::all_of(s.begin(), s.end(), is_hex); }

std::optional<std::string> normalize_pod_uid(std::string_view uid) {
  if (uid.size() == 32) {
    if (!std::all_of(uid.begin(), uid.end(), is_hex)) return std::nullopt;
    return lowered(uid);
  }
  if (uid.size() != 36) return std::nullopt;
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uid[i] != '-' : !is_hex(uid[i])) return std::nullopt;
  }
  return lowered(uid);
}

std::optional<PodCgroupRef> pod_from_cgroup_path(std::string_view path) {
  if (path.size() > kMaxPathLength)
    return path.find("kubepods") == std::string_view::npos ? std::nullopt : std::optional(PodCgroupRef{});
  const auto parts = components(path);
  std::optional<PodCgroupRef> found;
  // A reader in a cgroup namespace of its own (an agent pod on cgroup v2, where
  // runtimes make one per container) sees other pods' paths relative to its own
  // cgroup: "/../../../burstable/pod<uid>/<id>", the "kubepods" above it cut off.
  // Climbing out of the namespace root can only lead into the node's tree, so a
  // "pod<uid>" there is trusted as the kubelet's (the uid must still parse).
  bool under_kubepods = !parts.empty() && parts.front() == "..";
  // The last pod named wins: a node in a pod (kind in a cluster) nests one kubepods tree in another.
  for (size_t i = 0; i < parts.size(); ++i) {
    if (auto raw = pod_uid_part(parts[i], under_kubepods)) {
      PodCgroupRef ref;
      auto uid = normalize_pod_uid(*raw);
      if (uid) {
        ref.pod_uid = *uid;
        if (i + 1 < parts.size()) parse_container(parts[i + 1], ref);
      }
      found = std::move(ref);  // an empty uid says malformed
    }
    if (parts[i].find("kubepods") != std::string_view::npos) under_kubepods = true;
  }
  return found;
}

PodCgroupMatch pod_from_cgroups(const ParsedCgroups& cg) {
  std::vector<const CgroupLine*> order;
  for (const auto& l : cg.lines) order.push_back(&l);
  std::stable_sort(order.begin(), order.end(),
                   [](const CgroupLine* a, const CgroupLine* b) { return line_preference(*a) < line_preference(*b); });
  std::optional<PodCgroupRef> pod_only;
  bool malformed = false, all_root = !order.empty();
  for (const CgroupLine* l : order) {
    if (l->path != "/") all_root = false;
    auto ref = pod_from_cgroup_path(l->path);
    if (!ref) continue;
    if (ref->pod_uid.empty()) {
      malformed = true;
      continue;
    }
    if (!ref->container_id.empty()) return {PodCgroupResult::kFound, std::move(*ref)};
    if (!pod_only) pod_only = std::move(ref);
  }
  if (pod_only) return {PodCgroupResult::kFound, std::move(*pod_only)};
  if (malformed) return {PodCgroupResult::kMalformed, {}};
  if (all_root) return {PodCgroupResult::kNamespaced, {}};
  return {PodCgroupResult::kNotPod, {}};
}

}  // namespace argus::procfs
