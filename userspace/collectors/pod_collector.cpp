#include "userspace/collectors/pod_collector.h"

#include <spdlog/spdlog.h>

#include <set>

#include "userspace/procfs/pod_gpu_uuid.h"

namespace argus {

void PodCollector::watch(int pid, const GpuRef& gpu, double now) {
  if (gpu.form == GpuRef::Form::Index) facts_.set_gpu_uuid(pid, uuid_of_index(gpu.index));
  if (pods_.mode() == pods::PodInfoMode::kOff) return;
  tries_[pid] = Try{};
  resolve(pid, now);
}

void PodCollector::refresh(double now, const std::vector<int>& live_pids) {
  const std::set<int> live(live_pids.begin(), live_pids.end());
  std::vector<int> due;
  for (const auto& [pid, t] : tries_)
    if (now >= t.next_try) due.push_back(pid);
  for (int pid : due) {
    if (!live.count(pid)) {
      tries_.erase(pid);
      continue;
    }
    resolve(pid, now);
  }
}

void PodCollector::resolve(int pid, double now) {
  auto it = tries_.find(pid);
  if (it == tries_.end()) return;
  const pods::PodResolver::Lookup l = pods_.resolve(pid);
  facts_.set_pod_identity(pid, l.pod);
  Try& t = it->second;
  ++t.tries;
  if (l.final || t.tries >= kMaxTries) {
    if (l.pod.present())
      spdlog::info("pid {}: pod {}/{} container {} (uid {}, {})", pid, l.pod.namespace_name.empty() ? "?" : l.pod.namespace_name,
                   l.pod.pod.empty() ? "?" : l.pod.pod, l.pod.container.empty() ? "?" : l.pod.container, l.pod.pod_uid,
                   l.result);
    tries_.erase(it);
    return;
  }
  t.next_try = now + static_cast<double>(1 << t.tries);
}

std::string PodCollector::uuid_of_index(int index) {
  if (!gpu_uuids_) gpu_uuids_ = procfs::gpu_uuids_by_index(proc_root_);
  return index >= 0 && static_cast<size_t>(index) < gpu_uuids_->size() ? (*gpu_uuids_)[index] : "";
}

}  // namespace argus
