// What each process calls its NCCL communicators (ncclComm_t handles) by the
// name every rank of one shares: the hash of its ncclUniqueId, seen at
// ncclCommInitRank*. A process whose init the agent missed (attached late) has
// its unknown handles named after its job's world communicator. Bounded per
// process; a refused handle is counted (Cap::kCommHandles).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "userspace/common/defaults.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/pid_scoped.h"

namespace argus {

class CommNames final : public PidScoped {
 public:
  explicit CommNames(AgentCounters* counters = nullptr, size_t max_per_process = kDefaultMaxCommsPerRank)
      : counters_(counters), max_(max_per_process) {}

  // Its init of `handle` was seen: every call on it is counted from the first
  // (anchored). False when the process keeps its most names already.
  bool on_init(int pid, uint64_t handle, const std::string& name);
  bool anchored(int pid, uint64_t handle) const;
  // The handle's name; "" when unknown.
  std::string name_of(int pid, uint64_t handle) const;
  // The name to number a collective on `handle` under: its init's, else (a late
  // attach) "job:<job_id>" for the process's job, remembered; "pid:<pid>" when
  // the process is not tracked (`job_id` nullopt) or keeps its most names.
  std::string key_for(int pid, uint64_t handle, const std::optional<std::string>& job_id);
  // Whether the process made a collective or an init the agent saw.
  bool knows(int pid) const { return names_.count(pid) != 0; }
  // An ended process's calls are no longer counted from an init; its names stay
  // (its last collectives are still shown) until it is forgotten.
  void rank_ended(int pid) override { anchored_.erase(pid); }
  void retain(const std::set<int>& pids) override;

 private:
  AgentCounters* counters_;
  size_t max_;
  std::map<int, std::map<uint64_t, std::string>> names_;  // pid -> ncclComm_t -> name
  std::map<int, std::set<uint64_t>> anchored_;            // pid -> ncclComm_t whose init was seen
};

}  // namespace argus
