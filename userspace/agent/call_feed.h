// The records of NCCL and CUDA calls and of GPU activity, into the state that
// keeps them: communicator names (made by init, split, shrink or InitAll), the
// numbering of late-attached ranks' collectives, the collective tracker (its
// members, arrivals and point-to-point operations) and the node's timeline.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>

#include "bpf/argus.h"
#include "userspace/comms/collective_tracker.h"
#include "userspace/comms/comm_names.h"
#include "userspace/comms/process_groups.h"
#include "userspace/comms/seq_aligner.h"
#include "userspace/registry/rank_registry.h"
#include "userspace/trace/node_timeline.h"
#include "userspace/wire/event_decoder.h"

namespace argus {

// Reads 8 bytes of a process's memory (nullopt when it cannot): where NCCL
// wrote a child communicator's handle after the split returned.
using WordReader = std::function<std::optional<uint64_t>(int pid, uint64_t addr)>;
// process_vm_readv: the agent's privileges (CAP_SYS_PTRACE) allow it; reading
// never changes the process.
std::optional<uint64_t> read_process_word(int pid, uint64_t addr);

class CallFeed {
 public:
  CallFeed(RankRegistry& registry, CommNames& names, ProcessGroups& groups, SeqAligner& aligner,
           CollectiveTracker& tracker, NodeTimeline& timeline, WordReader read_word = read_process_word)
      : registry_(registry),
        names_(names),
        groups_(groups),
        aligner_(aligner),
        tracker_(tracker),
        timeline_(timeline),
        read_word_(std::move(read_word)) {}

  void on_nccl_init(const argus_nccl_init_event& e);
  void on_nccl_child(const argus_nccl_child_event& e);
  void on_nccl_init_all(const argus_nccl_init_all_event& e);
  void on_collective(const argus_nccl_coll_event& e);
  void on_call_done(const argus_call_done_event& e);
  void on_c10d_backend(const argus_c10d_backend_event& e);
  void on_c10d_group(const argus_c10d_group_event& e);
  void on_c10d_collective(const argus_c10d_coll_event& e);
  void on_gpu_batch(GpuBatch& b);  // takes its records
  void on_gpu_name(const GpuName& n);

 private:
  // The name of the communicator a call ran on: its making's, a pending
  // child's, else one per handle (a late attach). "" when capped.
  std::string comm_key(int pid, uint64_t handle);
  bool bind_pending_child(int pid, uint64_t handle);
  std::optional<std::string> job_of(int pid) const;
  // One collective or p2p call, from NCCL or c10d, onto the tracker.
  struct Call {
    uint64_t handle = 0;
    uint32_t op = 0;
    int peer = -1;
    uint64_t seq = 0;
    uint64_t bytes = 0;
    uint64_t ts_ns = 0;
    const char* label = "";
  };
  // Returns the communicator's name ("" when capped).
  std::string on_call(int pid, const Call& c);
  void join_nccl_group(int pid, const std::string& comm, const ProcessGroups::NcclJoin& j);

  RankRegistry& registry_;
  CommNames& names_;
  ProcessGroups& groups_;
  SeqAligner& aligner_;
  CollectiveTracker& tracker_;
  NodeTimeline& timeline_;
  WordReader read_word_;
};

}  // namespace argus
