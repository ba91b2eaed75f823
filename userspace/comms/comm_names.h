// What each process calls its NCCL communicators (ncclComm_t handles) by the
// name every rank of one shares, computed by each member alone:
//   - ncclCommInitRank*: the hash of its ncclUniqueId;
//   - ncclCommSplit: from the parent's name, the parent's n-th split in this
//     process and the color (NCCL requires every rank of the parent to split it
//     in the same order, so the n-th split is the same call everywhere);
//   - ncclCommShrink: from the parent's name, its n-th shrink and the excluded ranks;
//   - ncclCommInitAll: one process holds the whole clique, so its pid and the
//     n-th InitAll of the process.
// A handle whose making the agent did not see (it attached late) is named per
// handle, numbered in the order the process is first seen using its handles
// ("job:<job>/c<n>"): every rank makes its communicators, and first uses them,
// in the same order, so the n-th unseen handle of each rank is mostly the same
// communicator, and two communicators of one process are never merged.
// Bounded per process; a refused handle is counted (Cap::kCommHandles).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/pid_scoped.h"

namespace argus {

// The child names, pure functions of what every member sees alike. A split
// with color ARGUS_NCCL_SPLIT_NOCOLOR makes no communicator: "".
std::string split_child_name(const std::string& parent, uint64_t nth, int color);
// `excluded`: the first ranks of the list (any order); `n_excluded`: the list's
// length as passed (it may be longer than `excluded`).
std::string shrink_child_name(const std::string& parent, uint64_t nth, std::vector<int> excluded, int n_excluded);
std::string init_all_name(int pid, uint64_t nth);
// A shrink's (rank, nranks) in the child: the survivors keep their order and
// close the gaps, so a rank moves down by the excluded ranks below it. Each is
// -1 when it cannot be known: the parent's unknown, or the list longer than
// `excluded` holds.
std::pair<int, int> shrink_rank(int parent_rank, int parent_nranks, std::vector<int> excluded, int n_excluded);

class CommNames final : public PidScoped {
 public:
  explicit CommNames(AgentCounters* counters = nullptr, size_t max_per_process = kDefaultMaxCommsPerRank)
      : counters_(counters), max_(max_per_process) {}

  // Its making of `handle` was seen (init, split, shrink, InitAll): every call
  // on it is counted from the first (anchored). False when the process keeps
  // its most names already.
  bool on_init(int pid, uint64_t handle, const std::string& name);
  // A child whose handle NCCL writes later (a split inside a group, or
  // non-blocking): kept until a collective on a handle of no name binds it.
  // `newcomm_ptr` is where NCCL writes the handle in the process.
  void on_pending_child(int pid, uint64_t newcomm_ptr, const std::string& name);
  struct Pending {
    uint64_t newcomm_ptr = 0;
    std::string name;
  };
  const std::deque<Pending>& pending(int pid) const;
  // Names `handle` after the pending child written at `newcomm_ptr` (0: the
  // oldest pending child); false when there is none.
  bool bind_pending(int pid, uint64_t newcomm_ptr, uint64_t handle);

  bool anchored(int pid, uint64_t handle) const;
  // The handle's name; "" when unknown.
  std::string name_of(int pid, uint64_t handle) const;
  // The name to number a call on `handle` under: its making's, else (a late
  // attach) a new per-handle name, remembered: "job:<job_id>/c<n>" for a
  // process of a known job, "pid:<pid>/c<n>" when the process is not tracked
  // (`job_id` nullopt), n from 1 in first-seen order. "" when the process keeps
  // its most names (counted): its calls on that handle are not followed.
  std::string key_for(int pid, uint64_t handle, const std::optional<std::string>& job_id);
  // Handles named by key_for's fallback so far, over every process.
  uint64_t unseen_named() const { return unseen_named_; }
  // The process's n-th ncclCommInitAll, from 1.
  uint64_t next_init_all(int pid) { return ++init_alls_[pid]; }
  // Whether the process made a collective or an init the agent saw.
  bool knows(int pid) const { return names_.count(pid) != 0; }
  // An ended process's calls are no longer counted from an init; its names stay
  // (its last collectives are still shown) until it is forgotten.
  void rank_ended(int pid) override { anchored_.erase(pid); }
  void retain(const std::set<int>& pids) override;

 private:
  bool full(int pid, uint64_t handle);  // counts the refusal

  AgentCounters* counters_;
  size_t max_;
  std::map<int, std::map<uint64_t, std::string>> names_;  // pid -> ncclComm_t -> name
  std::map<int, std::set<uint64_t>> anchored_;            // pid -> ncclComm_t whose making was seen
  std::map<int, std::deque<Pending>> pending_;            // pid -> children whose handle is not known yet
  std::map<int, uint64_t> unseen_;                        // pid -> handles named by first sight
  std::map<int, uint64_t> init_alls_;                     // pid -> ncclCommInitAll calls seen
  uint64_t unseen_named_ = 0;
};

}  // namespace argus
