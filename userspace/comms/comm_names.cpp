#include "userspace/comms/comm_names.h"

namespace argus {

bool CommNames::on_init(int pid, uint64_t handle, const std::string& name) {
  auto& names = names_[pid];
  if (names.size() >= max_ && !names.count(handle)) {
    count_into(counters_, Cap::kCommHandles);
    return false;
  }
  names[handle] = name;
  anchored_[pid].insert(handle);
  return true;
}

bool CommNames::anchored(int pid, uint64_t handle) const {
  auto it = anchored_.find(pid);
  return it != anchored_.end() && it->second.count(handle) != 0;
}

std::string CommNames::name_of(int pid, uint64_t handle) const {
  auto names = names_.find(pid);
  if (names == names_.end()) return {};
  auto n = names->second.find(handle);
  return n == names->second.end() ? std::string() : n->second;
}

std::string CommNames::key_for(int pid, uint64_t handle, const std::optional<std::string>& job_id) {
  auto& names = names_[pid];
  if (auto it = names.find(handle); it != names.end()) return it->second;
  const std::string own = "pid:" + std::to_string(pid);
  if (names.size() >= max_) {
    count_into(counters_, Cap::kCommHandles);
    return own;
  }
  if (!job_id) return own;
  const std::string name = "job:" + (job_id->empty() ? "pid" + std::to_string(pid) : *job_id);
  names[handle] = name;
  return name;
}

void CommNames::retain(const std::set<int>& pids) {
  std::erase_if(names_, [&](const auto& kv) { return !pids.count(kv.first); });
  std::erase_if(anchored_, [&](const auto& kv) { return !pids.count(kv.first); });
}

}  // namespace argus
