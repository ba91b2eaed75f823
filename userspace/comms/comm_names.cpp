#include "userspace/comms/comm_names.h"

#include <algorithm>

#include "bpf/argus.h"
#include "userspace/common/comm_id.h"

namespace argus {
namespace {

// A derived name: hashed like a unique id's, so that every name has one shape
// (16 hex digits) and a child's says nothing of how deep it sits.
std::string hashed(const std::string& text) {
  return comm_id_from_uid(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

const std::deque<CommNames::Pending> kNoPending;

}  // namespace

std::string split_child_name(const std::string& parent, uint64_t nth, int color) {
  if (color == ARGUS_NCCL_SPLIT_NOCOLOR || parent.empty()) return {};
  return hashed("split\n" + parent + "\n" + std::to_string(nth) + "\n" + std::to_string(color));
}

std::string shrink_child_name(const std::string& parent, uint64_t nth, std::vector<int> excluded, int n_excluded) {
  if (parent.empty()) return {};
  // NCCL sorts the list; every survivor passes the same ranks, in whatever order.
  std::sort(excluded.begin(), excluded.end());
  std::string text = "shrink\n" + parent + "\n" + std::to_string(nth) + "\n" + std::to_string(n_excluded);
  for (int r : excluded) text += "," + std::to_string(r);
  return hashed(text);
}

std::pair<int, int> shrink_rank(int parent_rank, int parent_nranks, std::vector<int> excluded, int n_excluded) {
  if (n_excluded < 0 || static_cast<size_t>(n_excluded) != excluded.size()) return {-1, -1};
  std::sort(excluded.begin(), excluded.end());
  excluded.erase(std::unique(excluded.begin(), excluded.end()), excluded.end());
  const int gone = static_cast<int>(excluded.size());
  const int nranks = parent_nranks > gone ? parent_nranks - gone : -1;
  if (parent_rank < 0 || std::binary_search(excluded.begin(), excluded.end(), parent_rank)) return {-1, nranks};
  const auto below = std::lower_bound(excluded.begin(), excluded.end(), parent_rank) - excluded.begin();
  return {parent_rank - static_cast<int>(below), nranks};
}

std::string init_all_name(int pid, uint64_t nth) {
  return hashed("init_all\n" + std::to_string(pid) + "\n" + std::to_string(nth));
}

bool CommNames::full(int pid, uint64_t handle) {
  const auto& names = names_[pid];
  if (names.size() < max_ || names.count(handle)) return false;
  count_into(counters_, Cap::kCommHandles);
  return true;
}

bool CommNames::on_init(int pid, uint64_t handle, const std::string& name) {
  if (handle == 0 || name.empty() || full(pid, handle)) return false;
  names_[pid][handle] = name;
  anchored_[pid].insert(handle);
  return true;
}

void CommNames::on_pending_child(int pid, uint64_t newcomm_ptr, const std::string& name) {
  auto& q = pending_[pid];
  if (q.size() >= max_) {  // never bound: the oldest goes
    count_into(counters_, Cap::kCommHandles);
    q.pop_front();
  }
  q.push_back({newcomm_ptr, name});
}

const std::deque<CommNames::Pending>& CommNames::pending(int pid) const {
  auto it = pending_.find(pid);
  return it == pending_.end() ? kNoPending : it->second;
}

bool CommNames::bind_pending(int pid, uint64_t newcomm_ptr, uint64_t handle) {
  auto it = pending_.find(pid);
  if (it == pending_.end() || it->second.empty()) return false;
  auto& q = it->second;
  auto p = newcomm_ptr == 0 ? q.begin()
                            : std::find_if(q.begin(), q.end(), [&](const Pending& c) { return c.newcomm_ptr == newcomm_ptr; });
  if (p == q.end()) return false;
  const std::string name = p->name;
  q.erase(p);
  if (q.empty()) pending_.erase(it);
  return on_init(pid, handle, name);
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
  if (full(pid, handle)) return {};
  const std::string prefix =
      !job_id ? "pid:" + std::to_string(pid) : "job:" + (job_id->empty() ? "pid" + std::to_string(pid) : *job_id);
  const std::string name = prefix + "/c" + std::to_string(++unseen_[pid]);
  names[handle] = name;
  ++unseen_named_;
  count_into(counters_, AgentCount::kCommsUnseen);
  return name;
}

void CommNames::retain(const std::set<int>& pids) {
  const auto gone = [&](const auto& kv) { return !pids.count(kv.first); };
  std::erase_if(names_, gone);
  std::erase_if(anchored_, gone);
  std::erase_if(pending_, gone);
  std::erase_if(unseen_, gone);
  std::erase_if(init_alls_, gone);
}

}  // namespace argus
