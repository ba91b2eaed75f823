// PyTorch's c10d process groups as the c10d probes see them made. Python makes
// a group as ProcessGroup(...), then its backends (ProcessGroupGloo(store,
// rank, size)), then names it (pg._set_group_name, then _set_group_desc), all
// on one thread. So a backend is named by the next naming on the thread that
// made it. c10d's group name is the same on every member (a counter every
// rank advances alike at each new_group, or a hash of the members), so
// "<job>/pg:<name>" names the group job-wide, as a ncclUniqueId names a
// communicator.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "userspace/model/agent_counters.h"
#include "userspace/model/pid_scoped.h"
#include "userspace/model/snapshot.h"

namespace argus {

// The communicator name of a c10d group: "<job>/pg:<name>"; a process of no
// known job is its own scope ("pid:<pid>/pg:<name>").
std::string process_group_comm_id(const std::optional<std::string>& job_id, int pid, const std::string& name);

class ProcessGroups final : public PidScoped {
 public:
  // Each structure of a process stops at max_per_process entries; what is
  // refused then is counted (Cap::kProcessGroups).
  explicit ProcessGroups(AgentCounters* counters = nullptr, size_t max_per_process = kDefaultMaxCommsPerRank)
      : counters_(counters), max_(max_per_process) {}

  // A backend made on thread `tid`: held until a naming on that thread.
  void on_backend(int pid, uint32_t tid, const ProcessGroupInfo& backend);
  // A group named on thread `tid`: the backends made there since its last
  // naming, now named, their communicator `comm_id`.
  std::vector<ProcessGroupInfo> on_name(int pid, uint32_t tid, uint64_t group, const std::string& name,
                                        const std::string& comm_id);
  // A group described: the backends it named, with their description.
  std::vector<ProcessGroupInfo> on_desc(int pid, uint64_t group, const std::string& desc);

  // ProcessGroupNCCL makes its NCCL call on the caller's thread, inside the
  // c10d call (after a first call's lazy ncclCommInitRank or split): the next
  // NCCL collective or p2p call on that thread ran on the group's
  // communicator. A send or receive outside a batch runs on a 2-rank
  // communicator c10d makes per peer pair.
  void on_nccl_backend_call(int pid, uint32_t tid, uint64_t backend, bool p2p);
  struct NcclJoin {
    ProcessGroupInfo group;  // its nccl_comm set where the call was a collective
    bool p2p = false;
  };
  // An NCCL call on `comm_id`: the group whose c10d call made it, the first
  // time that communicator is joined (nullopt after, or when no c10d call
  // waits on this thread, or its backend was made before the agent attached).
  std::optional<NcclJoin> on_nccl_call(int pid, uint32_t tid, const std::string& comm_id);

  void retain(const std::set<int>& pids) override;

 private:
  struct PendingCall {
    uint64_t backend = 0;
    bool p2p = false;
  };
  struct Proc {
    std::map<uint32_t, std::vector<ProcessGroupInfo>> unnamed;  // tid -> backends made, not yet named
    std::map<uint64_t, std::vector<ProcessGroupInfo>> named;    // group -> its backends
    std::map<uint32_t, PendingCall> nccl_calls;                 // tid -> its last ProcessGroupNCCL call
    std::map<std::string, bool> joined;                         // NCCL communicator -> joined by a p2p call
  };
  ProcessGroupInfo* named_backend(Proc& p, uint64_t backend);
  // Whether `m` may take `key`: it holds it, or has room; a refusal is counted.
  template <typename Map, typename Key>
  bool room(const Map& m, const Key& key) {
    if (m.size() < max_ || m.count(key)) return true;
    count_into(counters_, Cap::kProcessGroups);
    return false;
  }
  AgentCounters* counters_;
  size_t max_;
  std::map<int, Proc> procs_;
};

}  // namespace argus
