#include "decoder/event_decoder.h"

#include <cstring>

namespace argus {
namespace {

template <typename T>
std::optional<DecodedEvent> copy_as(const void* data, size_t size) {
  if (size < sizeof(T)) return std::nullopt;  // BPF records are 8-byte padded: larger is fine
  T ev;
  std::memcpy(&ev, data, sizeof(T));
  return DecodedEvent{ev};
}

}  // namespace

std::optional<DecodedEvent> decode_event(const void* data, size_t size) {
  if (data == nullptr || size < sizeof(argus_event_header)) return std::nullopt;
  argus_event_header hdr;
  std::memcpy(&hdr, data, sizeof(hdr));
  switch (hdr.type) {
    case ARGUS_EV_EXEC: return copy_as<argus_exec_event>(data, size);
    case ARGUS_EV_EXIT: return copy_as<argus_exit_event>(data, size);
    case ARGUS_EV_TGID_SEEN: return copy_as<argus_tgid_seen_event>(data, size);
    case ARGUS_EV_NCCL_COLL: return copy_as<argus_nccl_coll_event>(data, size);
    case ARGUS_EV_NCCL_INIT: return copy_as<argus_nccl_init_event>(data, size);
    case ARGUS_EV_NCCL_GROUP: return copy_as<argus_nccl_group_event>(data, size);
    default: return std::nullopt;
  }
}

uint32_t event_source(const DecodedEvent& ev) {
  struct Visitor {
    uint32_t operator()(const argus_exec_event&) const { return ARGUS_SRC_PROC; }
    uint32_t operator()(const argus_exit_event&) const { return ARGUS_SRC_PROC; }
    uint32_t operator()(const argus_tgid_seen_event&) const { return ARGUS_SRC_PROC; }
    uint32_t operator()(const argus_nccl_coll_event&) const { return ARGUS_SRC_NCCL; }
    uint32_t operator()(const argus_nccl_init_event&) const { return ARGUS_SRC_NCCL; }
    uint32_t operator()(const argus_nccl_group_event&) const { return ARGUS_SRC_NCCL; }
  };
  return std::visit(Visitor{}, ev);
}

const char* source_label(uint32_t source) {
  switch (source) {
    case ARGUS_SRC_PROC: return "proc";
    case ARGUS_SRC_NCCL: return "nccl";
    case ARGUS_SRC_CUDA: return "cuda";
    default: return "unknown";
  }
}

}  // namespace argus
