// What the detectors read: per-rank signals over the window, the node's
// communicators as the collective tracker sees them, and the calls hosts are
// blocked in now. Plain values, built by the detection pass from state.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/model/snapshot.h"
#include "userspace/model/vocab.h"

namespace argus {

// How a rank arrives at the operations of one communicator against its peers
// there, over its recent steps (comms/arrival_order.h). Offsets are from the
// median of its peers: + behind them, - ahead of them (it waits for them).
struct CommLateness {
  // "<comm>" for collectives, "<comm>/p2p" (p2p_name) for matched sends and receives
  std::string comm;
  std::string label;  // what the framework calls it (a c10d group's label), "" when not known
  int peers = 0;     // the peers it was compared with (at its newest step)
  size_t bins = 0;   // steps compared
  double ops_per_step = 1;  // its operations here in a step (median over the steps compared)
  double late_share = 0, early_share = 0;  // of those steps: behind its peers, ahead of them
  double median_offset_s = 0;  // its typical offset per step
  double max_offset_s = 0;     // its largest offset in a step (a pause: a checkpoint, an evaluation)
  double since_pause_s = -1;   // since it was last behind by over half a step (-1: never seen)
  double t_score = 0;          // median offset over its robust standard error (+ late, - early)
  double offset_se_s = 0;      // that standard error
  double p_late = 1, p_early = 1;  // sign tests: chance of being late (early) this often, healthy
  double serial_correlation = 0;   // of its step offsets when on time: the tests count fewer independent steps
  double late_sync_excess = 0;  // late steps: share of the span before its arrival spent in its own
                                // synchronize calls, above its peers' share before theirs (mean)
};

// The name a communicator's matched sends and receives are judged under.
inline constexpr std::string_view kP2pSuffix = "/p2p";
inline std::string p2p_name(const std::string& comm) { return comm + std::string(kP2pSuffix); }
inline bool is_p2p(const CommLateness& c) { return c.comm.ends_with(kP2pSuffix); }

// A rank's arrivals at the collectives of its communicators, over the window.
struct RankLagStats {
  std::vector<CommLateness> comms;  // one per communicator it was compared on
  size_t samples = 0;          // completed collectives in the window
  double mean_lag_s = 0;       // over all of them
  // The summary, from the communicator where it is most surely late:
  size_t spread_samples = 0;   // steps compared there
  double median_lag_s = 0;     // its typical lag behind its peers' median there, per step
  double late_fraction = 0;    // share of those steps it was behind them
  double late_sync_share = 0;  // where it arrived late: the share of the span before its arrival it spent in its own
                               // synchronize calls above its peers' share before theirs (its GPU or stream held it)
  std::string sync_comm;       // where late_sync_share was read, when not where the lag was
  double step_seconds = 0;     // 0 when no period is seen

  // The summary as communicator c states it.
  void summarize_from(const CommLateness& c) {
    spread_samples = c.bins;
    median_lag_s = c.median_offset_s;
    late_fraction = c.late_share;
    late_sync_share = c.late_sync_excess;
    sync_comm.clear();
  }
};

struct CommMember {
  int pid = 0;
  int comm_rank = -1;  // its rank in the communicator (-1: unknown)
  uint64_t last_seq = 0;
  uint64_t last_arrival_ns = 0;
  bool exited = false;
  bool pending = false;  // its newest operation here still waits for a member of this node
};

struct CommView {
  std::string comm;
  std::string label;  // what the framework calls it (a c10d group's description or name); "" for NCCL's
  int nranks = 0;  // from ncclCommInitRank: the whole communicator, all nodes
  uint64_t newest_seq = 0;
  uint64_t newest_arrival_ns = 0;        // the latest arrival at any collective
  uint64_t newest_first_arrival_ns = 0;  // the first arrival at newest_seq
  std::map<int, CommMember> members;  // the ranks of this node
};

struct RankSignal {
  int pid = 0;
  std::string job_id;
  int rank = -1;
  double coll_wait_ratio = 0;  // inside collective calls, last window (~0 on real NCCL: async)
  double sync_wait_ratio = 0;  // inside CUDA synchronize calls, last window
  double coverage = 0;    // share of the window the rank has been watched
  RankLagStats lag;
  // GPU side (from the GPU-activity records), when the rank has current ones:
  // share of the window its NCCL kernels run. They run long while waiting for a
  // late peer, so the rank whose GPU is slow has the lowest.
  bool gpu_valid = false;
  double gpu_nccl_ratio = 0;
  double bubble_ratio = 0;  // share of the window idle before a pipeline P2P receive
  // Python GC (when its collector is probed): time, pauses and the longest pause, last window.
  bool gc_valid = false;
  double gc_seconds = 0;
  double gc_span_s = 0;  // the span gc_seconds covers (0: the detector's window)
  uint64_t gc_pauses = 0;
  double gc_max_pause_s = 0;
  // Where its main thread was when the agent looked, last window (InputWaitView):
  // the share of looks inside its DataLoader's __next__, once there are enough.
  bool input_valid = false;
  double input_share = 0;
  int input_polls = 0;
  InputWorkersView input_workers;  // its DataLoader workers over the same span
  // Kernel layer (when the sched_switch probe follows it), last window, in
  // thread-seconds per wall second (OffCpuView): why a host straggler is late.
  bool offcpu_valid = false;
  double runqueue_share = 0;  // runnable, waiting for a CPU
  double io_share = 0;        // blocked in block I/O
  double lock_share = 0;      // blocked in futex
  double sleep_share = 0;
  double oncpu_share = 0;
  bool throttle_valid = false;  // its cgroup's cpu.stat was read
  double throttled_share = 0;   // its cgroup throttled, seconds per wall second
  std::vector<CpuStealer> stealers;  // who took its CPU, most first
  std::string cgroup;  // its cgroup (CgroupCpuView::path), named in a "throttled" summary
};

// A host blocked in a call right now (from the BPF in-flight map): a
// collective (comm set) or a CUDA synchronize (sync = true, api named).
struct InflightWait {
  int pid = 0;
  std::string comm;  // collectives only
  bool sync = false;
  std::string api;   // "cuStreamSynchronize", ... or the collective's op
  uint64_t start_ns = 0;
  // Entered before the agent's probes (seen on the thread's stack, not by an
  // entry probe): start_ns is when the agent first saw it, not when it began.
  bool before_agent = false;
};

// What the hang detector needs to know of each rank (by pid).
struct RankInfoForHang {
  std::string job_id;
  int rank = -1;
  bool exited = false;
  ExitReason exit_reason = ExitReason::kNone;
  int exit_code = 0;
  double step_seconds = 0;
  double gpu_last_activity_ns = 0;  // CLOCK_MONOTONIC end of its newest GPU record (0: no GPU layer)
  // Kernel layer, last window (when the sched_switch probe follows it): a rank
  // outside any call that is on CPU or in I/O is busy (a checkpoint, an eval).
  bool offcpu_valid = false;
  double oncpu_share = 0, io_share = 0;
  bool heard = true;  // the agent saw a call of it (a collective, a send, a synchronize)
  std::string exit_summary{};  // exited: how it died ("killed by SIGKILL from pid 900 (`kill`)"); see rank_exit.h
  nlohmann::json exit_cause = nullptr;  // exited: its rank_exit evidence
};

// The job ranks of a communicator's members here, sorted (unknown ranks left
// out): a group as users name it ("tp (ranks 4-5)", group_phrase).
inline std::vector<int> member_ranks(const CommView& c, const std::map<int, RankInfoForHang>& ranks) {
  std::vector<int> out;
  for (const auto& [pid, m] : c.members)
    if (auto it = ranks.find(pid); it != ranks.end() && it->second.rank >= 0) out.push_back(it->second.rank);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace argus
