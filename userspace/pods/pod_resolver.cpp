#include "userspace/pods/pod_resolver.h"

#include <spdlog/spdlog.h>

namespace argus::pods {

std::optional<PodInfoMode> parse_pod_info_mode(const std::string& s) {
  if (s == "logs") return PodInfoMode::kLogs;
  if (s == "apiserver") return PodInfoMode::kApiserver;
  if (s == "off") return PodInfoMode::kOff;
  return std::nullopt;
}

PodResolver::PodResolver(PodResolverOptions opts) : opts_(std::move(opts)), logs_(opts_.logs) {}

PodResolver::Lookup PodResolver::resolve(int pid) {
  auto cg = procfs::read_cgroup(opts_.proc_root, pid);
  if (!cg.ok()) return count({"cgroup_unreadable", {}, false});
  return resolve_cgroups(*cg);
}

PodResolver::Lookup PodResolver::resolve_cgroups(const procfs::ParsedCgroups& cg) {
  const procfs::PodCgroupMatch m = procfs::pod_from_cgroups(cg);
  if (m.result != procfs::PodCgroupResult::kFound) {
    // A namespaced or malformed cgroup may read differently later (the rank moved): not final.
    return count({procfs::pod_cgroup_result_label(m.result), {}, m.result == procfs::PodCgroupResult::kNotPod});
  }
  Lookup l;
  l.pod.pod_uid = m.ref.pod_uid;
  l.pod.container_id = m.ref.container_id;
  l.pod.source = "cgroup";
  if (opts_.mode == PodInfoMode::kLogs) name_from_logs(l);
  if (opts_.mode == PodInfoMode::kApiserver) name_from_source(l);
  return count(std::move(l));
}

void PodResolver::name_from_logs(Lookup& l) {
  if (!logs_.available()) {
    if (!said_absent_) {
      said_absent_ = true;
      spdlog::info("pod names: {} is absent (not a Kubernetes node, or not mounted): ranks carry their pod uid only",
                   opts_.logs.pod_logs_dir);
    }
    l.result = "no_pod_logs";
    return;
  }
  auto pod = logs_.pod(l.pod.pod_uid);
  {
    std::lock_guard lock(mu_);
    skips_ = logs_.skips();
  }
  if (!pod) {
    l.result = "pod_unknown";
    return;
  }
  l.pod.namespace_name = pod->namespace_name;
  l.pod.pod = pod->pod;
  l.pod.source = "logs";
  const ContainerAnswer c = logs_.container(*pod, l.pod.container_id);
  {
    std::lock_guard lock(mu_);
    skips_ = logs_.skips();
  }
  l.pod.container = c.name;
  l.result = c.name.empty() ? "container_unknown" : "found";
  l.final = !c.name.empty();
}

void PodResolver::name_from_source(Lookup& l) {
  auto a = names_ ? names_->lookup(l.pod.pod_uid, l.pod.container_id) : std::nullopt;
  if (!a) {
    l.result = "pod_unknown";
    return;
  }
  l.pod.namespace_name = a->namespace_name;
  l.pod.pod = a->pod;
  l.pod.container = a->container;
  l.pod.source = "apiserver";
  l.result = a->container.empty() ? "container_unknown" : "found";
  l.final = !a->container.empty();
}

PodResolver::Lookup PodResolver::count(Lookup l) {
  std::lock_guard lock(mu_);
  ++lookups_[l.result];
  return l;
}

std::map<std::string, uint64_t> PodResolver::lookups() const {
  std::lock_guard lock(mu_);
  return lookups_;
}

std::map<std::string, uint64_t> PodResolver::skips() const {
  std::map<std::string, uint64_t> out;
  {
    std::lock_guard lock(mu_);
    out = skips_;
  }
  if (names_)
    for (const auto& [k, v] : names_->skips()) out[k] += v;
  return out;
}

std::map<std::string, uint64_t> PodResolver::source_errors() const {
  return names_ ? names_->errors() : std::map<std::string, uint64_t>{};
}

}  // namespace argus::pods
