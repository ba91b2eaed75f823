// Ring-buffer records to typed events. A record whose size does not match its
// type is refused (counted by the caller), never read past its end.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <variant>

#include "argus.h"

namespace argus {

using DecodedEvent = std::variant<argus_exec_event, argus_exit_event, argus_tgid_seen_event, argus_nccl_coll_event,
                                  argus_nccl_init_event, argus_nccl_group_event>;

std::optional<DecodedEvent> decode_event(const void* data, size_t size);

// The event's source (enum argus_source), for the events_total{source} counter.
uint32_t event_source(const DecodedEvent& ev);

const char* source_label(uint32_t source);  // "proc", "nccl", "cuda"

}  // namespace argus
