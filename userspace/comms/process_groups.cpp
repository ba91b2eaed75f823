#include "userspace/comms/process_groups.h"

#include <algorithm>

namespace argus {

std::string process_group_comm_id(const std::optional<std::string>& job_id, int pid, const std::string& name) {
  return (job_id && !job_id->empty() ? *job_id : "pid:" + std::to_string(pid)) + "/pg:" + name;
}

void ProcessGroups::on_backend(int pid, uint32_t tid, const ProcessGroupInfo& backend) {
  auto& unnamed = procs_[pid].unnamed;
  if (!room(unnamed, tid)) return;
  auto& waiting = unnamed[tid];
  if (waiting.size() >= max_) {  // a thread making backends it never names
    count_into(counters_, Cap::kProcessGroups);
    return;
  }
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
  if (room(p.named, group)) p.named[group] = backends;
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

void ProcessGroups::on_nccl_backend_call(int pid, uint32_t tid, uint64_t backend, bool p2p) {
  auto& calls = procs_[pid].nccl_calls;
  if (room(calls, tid)) calls[tid] = {backend, p2p};  // threads past the cap: not joined
}

ProcessGroupInfo* ProcessGroups::named_backend(Proc& p, uint64_t backend) {
  for (auto& [group, backends] : p.named)
    for (auto& b : backends)
      if (b.backend == backend) return &b;
  return nullptr;
}

std::optional<ProcessGroups::NcclJoin> ProcessGroups::on_nccl_call(int pid, uint32_t tid, const std::string& comm_id) {
  auto pit = procs_.find(pid);
  if (pit == procs_.end() || comm_id.empty()) return std::nullopt;
  Proc& p = pit->second;
  auto call = p.nccl_calls.find(tid);
  if (call == p.nccl_calls.end()) return std::nullopt;
  const PendingCall c = call->second;
  p.nccl_calls.erase(call);  // one c10d call, one NCCL call joined to it
  // A communicator is joined once; a collective's join outranks a p2p one
  // (a batched send/recv runs on the group's own communicator).
  auto seen = p.joined.find(comm_id);
  if (seen != p.joined.end() && (!seen->second || c.p2p)) return std::nullopt;
  ProcessGroupInfo* b = named_backend(p, c.backend);
  if (b == nullptr) return std::nullopt;
  if (!room(p.joined, comm_id)) return std::nullopt;
  p.joined[comm_id] = c.p2p;
  if (!c.p2p) b->nccl_comm = comm_id;
  return NcclJoin{*b, c.p2p};
}

void ProcessGroups::retain(const std::set<int>& pids) {
  std::erase_if(procs_, [&](const auto& kv) { return !pids.count(kv.first); });
}

}  // namespace argus
