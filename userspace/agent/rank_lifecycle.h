// Which processes are ranks, from first sight to last. A process found by
// discovery (or by its first call into a probed library) is tracked, or BPF is
// told to ignore it; a rank met for the first time gets its watchers (memory
// cgroup, pod and GPU identity); one that ends has its final counts taken, why
// it died decided, its rank_exit event sent, and its BPF state dropped; one
// that vanished without an exit event is reaped. Every part that keeps
// something per process is registered here once, is told when a process ended,
// and lets go of it here, in one place, when the registry drops it.
#pragma once
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bpf/argus_exit.h"
#include "userspace/collectors/memcg_watch.h"
#include "userspace/collectors/pod_collector.h"
#include "userspace/collectors/python_collector.h"
#include "userspace/common/clock.h"
#include "userspace/detect/gpu_memory.h"
#include "userspace/discovery/discovery.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/event.h"
#include "userspace/model/host_collector.h"
#include "userspace/probes/bpf_backend.h"
#include "userspace/probes/probe_manager.h"
#include "userspace/registry/rank_registry.h"

namespace argus {

struct LifecycleParts {
  RankRegistry& registry;
  BpfRankMaps& maps;
  Discovery& discovery;
  ProbeManager& probes;  // a rank's Python collector is probed once it is tracked
  MemcgWatch& memcgs;
  PodCollector& pods;
  PythonCollector& python;  // a dying rank's newest Python stack
  EventSink& events;
  AgentCounters& counters;
  OomReports& ooms;  // an allocation that ran out of memory just before an end: its cause
};

class RankLifecycle {
 public:
  // `selects_by_env`: --only-env is set, so a process discovery cannot read is
  // not known to be ours.
  RankLifecycle(LifecycleParts parts, const Clock& clock, std::string proc_root, bool selects_by_env);

  // A part that keeps something per process; each registers once, in the order
  // it is to be told of an end.
  void add(PidScoped* part) { parts_.push_back(part); }

  // A process discovery found (or looked at again): tracked, or ignored by BPF.
  void track_found(const FoundProcess& f);
  // BPF saw a first call of a process discovery has not met: identify it now,
  // while its calls already count in BPF.
  void on_first_call(int pid, double now);
  // BPF counted a process the registry does not know: its first-call event was
  // lost (full ring buffer). False when there is nothing to take its counts into.
  bool on_counted_unknown(int pid, double now);
  // Its end: from the exit event (the kernel's exit code and what BPF saw of
  // the cause), or nullopt when it is gone without one.
  void finish(int pid, std::optional<int> exit_code, const argus_exit_info* cause = nullptr);
  // Tracked processes gone without an exit event (lost, or while the agent was
  // not looking), or whose pid now names another process. `drain` first takes
  // what is waiting in the ring: one that exited since the last poll has its
  // exit event there.
  void reap_vanished(const std::function<void()>& drain);
  // The processes the registry dropped (their grace is over), let go by every
  // part; also the forked workers that are gone.
  void forget_dropped();
  void forget_gone_workers(const std::set<int>& alive);

 private:
  bool is_worker_of_rank(const FoundProcess& f) const;
  void track_unmapped(int pid);
  void first_met(int pid, const RankSnapshot& rank);
  ExitCause exit_cause(int pid, int exit_code, const argus_exit_info* info) const;

  LifecycleParts p_;
  const Clock& clock_;
  std::string proc_root_;
  bool selects_by_env_;
  std::vector<PidScoped*> parts_;
  std::set<int> workers_seen_;  // pids found to be a rank's forked workers (logged once)
};

}  // namespace argus
