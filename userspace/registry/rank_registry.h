// The node's ranks: identity, exact counters and exit state, fed by decoded
// events and BPF aggregates, read by the exporters as snapshots.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "userspace/model/agent_counters.h"
#include "userspace/common/clock.h"
#include "userspace/common/defaults.h"
#include "userspace/model/rank_facts.h"
#include "userspace/model/snapshot.h"
#include "userspace/model/rank_identity.h"
#include "userspace/wire/aggregates.h"

namespace argus {



// A communicator the process made, as the agent saw it made.
struct NcclInitInfo {
  // Its rank in the communicator: given to ncclCommInitRank*; a shrink's is
  // computed from the parent's (the survivors keep their order); -1 for a
  // split (its order follows the keys of members the agent does not see) and
  // for ncclCommInitAll (the process holds every rank).
  int rank = -1;
  int nranks = -1;  // -1 for a split; a shrink's when the parent's is known
  int result = 0;
  uint32_t api = 0;  // enum argus_nccl_init_api: how it was made
  uint64_t comm = 0;
  // Its job-wide name: comm_id_from_uid(ncclUniqueId prefix) for an init; the
  // names comm_names.h derives for a split, shrink or InitAll.
  std::string comm_id;
  std::string parent;  // split, shrink: the parent's name
  int color = 0;       // split: the color
  int key = 0;         // split: the key (PyTorch passes the rank in the new group)
};


struct RegistryOptions {
  std::string node;
  double exit_grace_seconds = kDefaultExitGraceSeconds;  // an exited rank stays visible this long
  double window_seconds = kDefaultWindowSeconds;
  bool launches_counted = false;    // --probes deep
  size_t max_exited = kDefaultMaxExitedRanks;  // exited ranks kept; past it the oldest goes before its grace
  size_t max_comm_inits = kDefaultMaxCommsPerRank;  // ncclCommInitRank records kept per process
  AgentCounters* caps = nullptr;
  bool sched_probe = false;  // the sched_switch probe follows the ranks (OffCpuView::present)
};

class RankRegistry final : public RankFacts, public RankDirectory {
 public:
  RankRegistry(const Clock& clock, RegistryOptions opts);

  // A process that maps a probed library (or called into one). Re-tracking a
  // known pid with the same start time only adds libraries.
  void track(int pid, uint64_t start_ticks, const std::string& comm, const RankIdentity& identity,
             const std::vector<std::string>& libraries);
  bool is_tracked(int pid) const;
  bool is_live(int pid) const;
  std::optional<uint64_t> start_ticks(int pid) const;
  // The (job_id, rank) a live tracked process claims; nullopt when not tracked.
  std::optional<std::pair<std::string, int>> job_rank(int pid) const;
  std::vector<int> live_pids() const;

  // Absolute totals for one process, as read from the BPF aggregates.
  void apply_totals(int pid, const std::vector<AggregateRecord>& records);
  // Device memory held now, its peak and the GPU's total (0: unknown, the known one kept), as BPF keeps them.
  void set_gpu_memory(int pid, int64_t held, uint64_t peak, uint64_t total);
  void on_nccl_init(int pid, const NcclInitInfo& info);
  // The communicators the process was seen making (at most max_comm_inits).
  std::vector<NcclInitInfo> comm_inits(int pid) const;
  // A c10d group the process joined, or learnt more of (its description): kept
  // by backend, at most max_comm_inits.
  void on_process_group(int pid, const ProcessGroupInfo& group);
  // The rank's Python interpreter and its GC counters read now (polled, or the
  // probes' snapshot): counters only grow, so each keeps its largest value.
  // New TCP retransmits of the rank's sockets, by remote address (the
  // registry keeps the totals: BPF forgets idle sockets).
  void add_tcp_retransmits(int pid, const std::map<std::string, uint64_t>& by_remote) override;
  void set_input_polls(int pid, const InputWaitView& polls) override;
  void set_python_gc(int pid, const std::string& version, const std::string& anchor,
                     const std::array<uint64_t, 3>& collections) override;
  // Who took the rank's CPU, totals since it was first followed (seconds and
  // count per stealer pid): the window's top few are derived at tick().
  void set_cpu_stealers(int pid, std::vector<CpuStealer> totals) override;
  // Its cgroup's CPU controller read now (totals; the window share at tick()),
  // or nullopt when it has none to read.
  void set_cgroup_cpu(int pid, std::optional<CgroupCpuView> view) override;
  // Its Kubernetes identity and GPU UUID as resolved now (each kept when the new one is unknown).
  void set_pod_identity(int pid, const PodIdentityView& pod) override;
  void set_gpu_uuid(int pid, const std::string& uuid) override;
  // exit_code as the kernel keeps it: (status << 8) | signal. The reason is
  // exit_reason_of's (exit_cause.h); exit_code then holds the signal or the exit
  // status.
  void on_exit(int pid, int exit_code, const ExitCause& cause = {});
  // The process is gone and no exit event came (lost, or before the agent).
  void on_vanished(int pid);

  // Recomputes the per-rank windows and drops ranks past their grace period.
  void tick();

  std::vector<RankSnapshot> snapshot() const;
  // One rank's snapshot, nullopt when not tracked.
  std::optional<RankSnapshot> rank(int pid) const;
  // A tracked process's job and world as known now (exited ones too), without
  // copying its counters.
  struct Membership {
    std::string job_id;
    int world_size = -1;
  };
  std::optional<Membership> membership(int pid) const;
  std::vector<RankPlacement> live_ranks() const override;
  size_t tracked_count() const;  // live tracked processes

 private:
  struct Sample {
    uint64_t mono_ns = 0;
    uint64_t coll_ns = 0;  // inside collective calls, total so far
    uint64_t sync_ns = 0;  // inside CUDA synchronize calls, total so far
    uint64_t gc_ns = 0;      // inside Python collections, total so far
    uint64_t gc_pauses = 0;  // Python collections timed, total so far
    std::map<uint32_t, uint64_t> gc_buckets;  // the pause histogram then
    std::array<uint64_t, 5> offcpu_ns{};       // off CPU by reason, total so far
    uint64_t oncpu_ns = 0;
    uint64_t throttled_ns = 0;                 // its cgroup throttled, total so far
    std::map<int, uint64_t> stealer_ns;        // stealer pid -> runqueue ns charged, total so far
  };
  struct Entry {
    RankSnapshot snap;
    std::deque<Sample> samples;
    std::vector<NcclInitInfo> comms;
    std::vector<CpuStealer> stealer_totals;  // since first followed
  };

  void apply_identity_from_init(Entry& e, const NcclInitInfo& info);
  static void window_gc(const Sample& a, const Sample& b, PythonGcView& gc);
  static void window_offcpu(const Sample& a, const Sample& b, const std::vector<CpuStealer>& totals, Entry& e);
  void mark_exited(Entry& e, ExitReason reason, int code, const ExitCause& cause = {});
  void evict_exited_past_cap(int keep_pid);  // never the rank that just exited

  const Clock& clock_;
  RegistryOptions opts_;
  mutable std::mutex mu_;
  std::map<int, Entry> entries_;
};

}  // namespace argus
