// The records of NCCL and CUDA calls and of GPU activity, into the state that
// keeps them: communicator names, the numbering of late-attached ranks'
// collectives, the collective tracker and the node's timeline.
#pragma once
#include "bpf/argus.h"
#include "userspace/comms/collective_tracker.h"
#include "userspace/comms/comm_names.h"
#include "userspace/comms/seq_aligner.h"
#include "userspace/registry/rank_registry.h"
#include "userspace/trace/node_timeline.h"
#include "userspace/wire/event_decoder.h"

namespace argus {

class CallFeed {
 public:
  CallFeed(RankRegistry& registry, CommNames& names, SeqAligner& aligner, CollectiveTracker& tracker,
           NodeTimeline& timeline)
      : registry_(registry), names_(names), aligner_(aligner), tracker_(tracker), timeline_(timeline) {}

  void on_nccl_init(const argus_nccl_init_event& e);
  void on_collective(const argus_nccl_coll_event& e);
  void on_call_done(const argus_call_done_event& e);
  void on_gpu_batch(GpuBatch& b);  // takes its records
  void on_gpu_name(const GpuName& n);

 private:
  RankRegistry& registry_;
  CommNames& names_;
  SeqAligner& aligner_;
  CollectiveTracker& tracker_;
  NodeTimeline& timeline_;
};

}  // namespace argus
