// Which Kubernetes pod and container a process runs in, read from the cgroup
// paths the kubelet and the container runtime give it (/proc/PID/cgroup).
//
// The kubelet names the pod's cgroup, the runtime the container's under it:
//   systemd driver  .../kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid, '-' as '_'>.slice/
//                   <runtime>-<64 hex>.scope   (runtime: cri-containerd, crio, docker)
//                   Guaranteed pods have no QoS level: kubepods-pod<uid>.slice.
//   cgroupfs driver .../kubepods/<qos>/pod<uid>/<64 hex>   (or kubepods/pod<uid>/<64 hex>)
// Anything may come before "kubepods" (kind, k3s, a node in a container, a
// --cgroup-root), and the container's scope may have children of its own.
// CRI-O's conmon runs in crio-conmon-<id>.scope: the pod's, not the container's.
// Pure: text in, values out; bad input is a result, never a crash.
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include "userspace/procfs/cgroup.h"

namespace argus::procfs {

struct PodCgroupRef {
  std::string pod_uid;       // lowercase, with '-' ("8dbf5d69-..."), or a static pod's 32-hex hash
  std::string container_id;  // 64 lowercase hex; "" when the path stops at the pod (or at conmon)
  std::string runtime;       // "containerd", "crio", "docker"; "" where the path does not say (cgroupfs)
  bool operator==(const PodCgroupRef&) const = default;
};

enum class PodCgroupResult {
  kFound,       // a pod (and maybe a container) was named
  kNotPod,      // cgroup paths that are not a pod's (a systemd service, a user session)
  kNamespaced,  // every path is "/": a cgroup namespace hides where the process is
  kMalformed,   // a path looks like a pod's but its uid does not parse
};
const char* pod_cgroup_result_label(PodCgroupResult r);  // "found", "not_pod", "cgroup_namespaced", "cgroup_malformed"

struct PodCgroupMatch {
  PodCgroupResult result = PodCgroupResult::kNotPod;
  PodCgroupRef ref;  // meaningful when kFound
};

// One cgroup path. nullopt: not a pod's; a PodCgroupRef with an empty pod_uid:
// shaped like a pod's but malformed.
std::optional<PodCgroupRef> pod_from_cgroup_path(std::string_view path);

// The process's pod from all its lines: the v2 line, then name=systemd, cpu,
// memory, then any other; a line that names the container beats one that names
// only the pod.
PodCgroupMatch pod_from_cgroups(const ParsedCgroups& cg);

// A pod uid as Kubernetes writes it: 8-4-4-4-12 hex, or 32 hex (a static pod's
// hash). Returned lowercase; nullopt when it is neither.
std::optional<std::string> normalize_pod_uid(std::string_view uid);

// True for exactly 64 hex digits (a container id as containerd, CRI-O and Docker write it).
bool is_container_id(std::string_view s);

}  // namespace argus::procfs
