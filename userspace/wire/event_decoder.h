// Ring-buffer records to typed events. A record whose size does not match its
// type is refused (counted by the caller), never read past its end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "bpf/argus.h"
#include "userspace/model/vocab.h"

namespace argus {

// argus:gpu_batch: only the records that were sent (the BPF record is variable-sized).
struct GpuBatch {
  argus_event_header hdr{};
  uint32_t sent = 0;     // records the producer passed (> recs.size() when BPF truncated)
  uint64_t dropped = 0;  // records the producer lost before this batch
  std::vector<argus_gpu_rec> recs;
};

struct GpuName {
  argus_event_header hdr{};
  uint32_t name_id = 0;
  std::string name;
};

// Communicator records are copied whole; their counts (n_excluded, ndev) are
// the process's arguments, so a reader bounds them by the arrays' sizes.
using DecodedEvent = std::variant<argus_exec_event, argus_exit_event, argus_tgid_seen_event, argus_nccl_coll_event,
                                  argus_nccl_init_event, argus_call_done_event, GpuBatch, GpuName,
                                  argus_nccl_child_event, argus_nccl_init_all_event, argus_c10d_backend_event,
                                  argus_c10d_group_event, argus_c10d_coll_event, argus_gpu_oom_event>;

std::optional<DecodedEvent> decode_event(const void* data, size_t size);

// The event's source, for the events_total{source} counter.
EventSource event_source(const DecodedEvent& ev);


}  // namespace argus
