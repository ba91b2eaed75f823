// Arrivals of the node's ranks at each collective of each communicator: the
// arrival lag of every rank behind the earliest one (one clock per node, so
// exact), the step period, and what a stalled communicator is waiting for.
// Pure logic on timestamps: tested on recorded streams with no clock at all.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "userspace/comms/arrival_order.h"
#include "userspace/comms/p2p_tracker.h"
#include "userspace/comms/step_pattern.h"
#include "userspace/model/agent_counters.h"
#include "userspace/common/defaults.h"
#include "userspace/model/pid_scoped.h"
#include "userspace/model/signals.h"

namespace argus {

struct TrackerOptions {
  double window_seconds = kDefaultWindowSeconds;
  size_t max_open_seqs = 512;     // incomplete collectives kept per communicator
  double late_threshold_s = 0.001;  // ranks further apart than this at a collective "spread out" (the step's bursts)
  size_t max_comms = kDefaultMaxCommunicators;  // communicators followed; a new one past this is ignored
  size_t max_samples = kDefaultMaxCollectiveSamplesPerRank;  // arrival and lag samples per rank
  AgentCounters* caps = nullptr;
};


class CollectiveTracker final : public PidScoped {
 public:
  explicit CollectiveTracker(TrackerOptions opts = {});

  // `pid` belongs to `comm` (nranks: the whole communicator's size, every node;
  // comm_rank: its rank in it, -1 when unknown, e.g. a split child whose order
  // the agent cannot see).
  void add_member(const std::string& comm, int pid, int nranks, int comm_rank = -1);
  // What the framework calls a communicator it holds (a c10d group's label).
  void set_label(const std::string& comm, const std::string& label);
  // A member of a split child (ncclCommSplit): its key and its rank in the
  // parent. NCCL orders the child's ranks by (key, parent rank); the members
  // this node sees are ranked so, which is right where the child lives on this
  // node (tensor and expert groups usually do), for pairing its sends and receives.
  void add_split_member(const std::string& comm, int pid, int key, int parent_rank);
  // A point-to-point operation entered (ncclSend or ncclRecv, alone or inside a
  // group): `peer` is the other side's rank in `comm`. The n-th send from A to B
  // is matched with B's n-th receive from A.
  void on_p2p(const std::string& comm, int pid, bool send, int peer, uint64_t ts_ns);
  // In the step's pattern: ARGUS_OP_SEND / ARGUS_OP_RECV, and a synchronize.
  static constexpr uint32_t kSendOp = 6, kRecvOp = 7, kSyncOp = 0xfe;
  // A collective entered (seq from BPF, counted per process and communicator;
  // op and bytes, when known, make the step's pattern).
  void on_arrival(const std::string& comm, int pid, uint64_t seq, uint64_t ts_ns, uint32_t op = 0,
                  uint64_t bytes = 0);
  // A CUDA synchronize call of the process returned: [start, end]. Lateness
  // that its own synchronize waits explain is its GPU's (or stream's), not its host's.
  void on_sync(int pid, uint64_t start_ns, uint64_t end_ns);
  // The process ended: it will not arrive again; collectives no longer wait for it.
  void on_exit(int pid);
  // Forget a process entirely (its grace period is over).
  void forget(int pid);
  void rank_ended(int pid) override { on_exit(pid); }
  void retain(const std::set<int>& pids) override;

  RankLagStats lag_stats(int pid, uint64_t now_ns) const;
  // Once a stats pass: every process's lag stats as of now_ns, kept for
  // last_lag_stats() and step_seconds() until the next pass.
  void update(uint64_t now_ns);
  RankLagStats last_lag_stats(int pid) const;
  // The process's step period at the last update (0 when unknown): where the
  // GPU timeline marks its steps.
  double step_seconds(int pid) const { return last_lag_stats(pid).step_seconds; }

  // The calls the node's hosts are blocked in now (set each stats pass): what a
  // stalled communicator waits on.
  void set_blocked_calls(std::vector<InflightWait> calls) { blocked_ = std::move(calls); }
  const std::vector<InflightWait>& blocked_calls() const { return blocked_; }

  std::vector<CommView> comms() const;
  // Point-to-point sends and receives of the node's ranks, matched.
  const P2pTracker& p2p() const { return p2p_; }
  // Whether any call of the process reached the tracker (a collective, a
  // point-to-point operation, a synchronize) since it was first seen.
  bool heard_from(int pid) const { return heard_.count(pid) != 0; }
  // The communicators a process belongs to.
  std::vector<std::string> comms_of(int pid) const;

 private:
  struct LagSample {
    uint64_t ts_ns;
    double lag_s;  // behind the earliest rank (argus_nccl_arrival_lag_seconds)
  };
  struct OpenSeq {
    std::map<int, uint64_t> arrivals;  // pid -> ts
  };
  struct Comm {
    CommView view;
    std::map<uint64_t, OpenSeq> open;  // seq -> arrivals so far
    std::deque<uint64_t> spread_starts;  // first arrival at each spread-out collective: one per step
  };
  Comm* find_or_add(const std::string& comm);  // null when max_comms are followed (counted)
  void try_complete(Comm& c, uint64_t seq);
  void complete(Comm& c, uint64_t seq, OpenSeq& s);
  void trim(uint64_t now_ns);
  double sync_share(int pid, uint64_t from_ns, uint64_t to_ns) const;
  void note_call(const std::string& comm, int pid, uint32_t op, uint64_t bytes, uint64_t ts_ns);
  void order(const std::string& comm, const std::map<int, uint64_t>& arrivals, StepStatistic stat);
  double step_of(int pid, uint64_t now_ns) const;
  double consensus_step(int pid, const std::map<int, double>& own) const;
  RankLagStats lag_stats_at(int pid, uint64_t now_ns, double step_s) const;

  TrackerOptions opts_;
  P2pTracker p2p_;
  ArrivalOrder order_;
  std::set<int> heard_;
  std::map<std::string, std::map<int, std::pair<int, int>>> split_order_;  // comm -> pid -> (key, parent rank)
  std::map<int, StepPattern> patterns_;     // per pid: its calls' pattern (the step)
  std::map<std::string, Comm> comms_;
  std::map<int, std::deque<LagSample>> lags_;
  std::map<int, std::deque<uint64_t>> arrivals_;  // per pid: all arrival times in the window (step period)
  std::map<int, std::deque<std::pair<uint64_t, uint64_t>>> syncs_;  // per pid: recent synchronize spans
  std::map<int, RankLagStats> last_stats_;  // per pid, at the last update()
  std::vector<InflightWait> blocked_;
  static constexpr size_t kMaxSyncSpans = 256;
};

// Step period from collective arrival times: the collectives of a step come in
// a burst after the compute phase, so the period is the median distance between
// bursts (arrivals that follow a gap of at least half the largest gap).
// `bursts`: how many bursts it found.
double step_period_seconds(const std::deque<uint64_t>& arrivals_ns, size_t* bursts = nullptr);

}  // namespace argus
