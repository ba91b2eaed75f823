#include "userspace/comms/process_groups.h"

#include <algorithm>

namespace argus {

std::string process_group_comm_id(const std::optional<std::string>& job_id, int pid, const std::string& name) {
  return (job_id && !job_id->empty() ? *job_id : "pid:" + std::to_string(pid)) + "/pg:" + name;
}

void ProcessGroups::on_backend(int pid, uint32_t tid, const ProcessGroupInfo& backend) {
  auto& waiting = procs_[pid].unnamed[tid];
  if (waiting.size() >= max_) return;  // a thread making backends it never names
  waiting.push_back(backend);
}

std::vector<ProcessGroupInfo> ProcessGroups::on_name(int pid, uint32_t tid, uint64_t group, const std::string& name,
                                                     const std::string& comm_id) {
  auto pit = procs_.find(pid);
  if (pit == procs_.end()) return {};
  Proc& p = pit->second;
  auto it = p.unnamed.find(tid);
  if (it == p.unnamed.end()) return {};
  std::vector<ProcessGroupInfo> backends = std::move(it->second);
  p.unnamed.erase(it);
  for (auto& b : backends) {
    b.name = name;
    b.comm_id = comm_id;
  }
  if (p.named.size() < max_) p.named[group] = backends;
  return backends;
}

std::vector<ProcessGroupInfo> ProcessGroups::on_desc(int pid, uint64_t group, const std::string& desc) {
  auto pit = procs_.find(pid);
  if (pit == procs_.end()) return {};
  auto it = pit->second.named.find(group);
  if (it == pit->second.named.end()) return {};
  for (auto& b : it->second) b.desc = desc;
  return it->second;
}

void ProcessGroups::retain(const std::set<int>& pids) {
  std::erase_if(procs_, [&](const auto& kv) { return !pids.count(kv.first); });
}

}  // namespace argus
