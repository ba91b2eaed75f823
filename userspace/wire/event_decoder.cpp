#include "userspace/wire/event_decoder.h"

#include <cstddef>
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

// Header, count, then exactly `n` records: a size that disagrees is refused.
std::optional<DecodedEvent> decode_gpu_batch(const void* data, size_t size) {
  constexpr size_t head = offsetof(argus_gpu_batch_event, recs);
  if (size < head) return std::nullopt;
  argus_gpu_batch_event ev;
  std::memcpy(&ev, data, head);
  if (ev.n > ARGUS_GPU_BATCH_MAX || size < head + ev.n * sizeof(argus_gpu_rec)) return std::nullopt;
  GpuBatch b;
  b.hdr = ev.hdr;
  b.sent = ev.sent;
  b.dropped = ev.dropped;
  b.recs.resize(ev.n);
  if (ev.n) std::memcpy(b.recs.data(), static_cast<const char*>(data) + head, ev.n * sizeof(argus_gpu_rec));
  return DecodedEvent{std::move(b)};
}

std::optional<DecodedEvent> decode_gpu_name(const void* data, size_t size) {
  if (size < sizeof(argus_gpu_name_event)) return std::nullopt;
  argus_gpu_name_event ev;
  std::memcpy(&ev, data, sizeof(ev));
  GpuName n;
  n.hdr = ev.hdr;
  n.name_id = ev.name_id;
  n.name.assign(ev.name, strnlen(ev.name, sizeof(ev.name)));
  return DecodedEvent{std::move(n)};
}

// A child made by an api that makes none is not a child record.
std::optional<DecodedEvent> decode_child(const void* data, size_t size) {
  auto ev = copy_as<argus_nccl_child_event>(data, size);
  if (!ev) return ev;
  const uint32_t api = std::get<argus_nccl_child_event>(*ev).api;
  if (api != ARGUS_NCCL_COMM_SPLIT && api != ARGUS_NCCL_COMM_SHRINK) return std::nullopt;
  return ev;
}

// A group's text is NUL-terminated here whatever BPF copied.
std::optional<DecodedEvent> decode_c10d_group(const void* data, size_t size) {
  auto ev = copy_as<argus_c10d_group_event>(data, size);
  if (ev) std::get<argus_c10d_group_event>(*ev).text[ARGUS_C10D_TEXT_MAX - 1] = '\0';
  return ev;
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
    case ARGUS_EV_NCCL_CHILD: return decode_child(data, size);
    case ARGUS_EV_NCCL_INIT_ALL: return copy_as<argus_nccl_init_all_event>(data, size);
    case ARGUS_EV_CALL_DONE: return copy_as<argus_call_done_event>(data, size);
    case ARGUS_EV_GPU_BATCH: return decode_gpu_batch(data, size);
    case ARGUS_EV_GPU_NAME: return decode_gpu_name(data, size);
    case ARGUS_EV_C10D_BACKEND: return copy_as<argus_c10d_backend_event>(data, size);
    case ARGUS_EV_C10D_GROUP: return decode_c10d_group(data, size);
    case ARGUS_EV_C10D_COLL: return copy_as<argus_c10d_coll_event>(data, size);
    case ARGUS_EV_GPU_OOM: return copy_as<argus_gpu_oom_event>(data, size);
    default: return std::nullopt;
  }
}

EventSource event_source(const DecodedEvent& ev) {
  struct Visitor {
    EventSource operator()(const argus_exec_event&) const { return EventSource::kProc; }
    EventSource operator()(const argus_exit_event&) const { return EventSource::kProc; }
    EventSource operator()(const argus_tgid_seen_event&) const { return EventSource::kProc; }
    EventSource operator()(const argus_nccl_coll_event&) const { return EventSource::kNccl; }
    EventSource operator()(const argus_nccl_init_event&) const { return EventSource::kNccl; }
    EventSource operator()(const argus_nccl_child_event&) const { return EventSource::kNccl; }
    EventSource operator()(const argus_nccl_init_all_event&) const { return EventSource::kNccl; }
    EventSource operator()(const argus_call_done_event& e) const {
      return e.cls == ARGUS_CLS_NCCL ? EventSource::kNccl : EventSource::kCuda;
    }
    EventSource operator()(const argus_c10d_backend_event&) const { return EventSource::kNccl; }
    EventSource operator()(const argus_c10d_group_event&) const { return EventSource::kNccl; }
    EventSource operator()(const argus_c10d_coll_event&) const { return EventSource::kNccl; }
    EventSource operator()(const argus_gpu_oom_event&) const { return EventSource::kCuda; }
    EventSource operator()(const GpuBatch&) const { return EventSource::kGpu; }
    EventSource operator()(const GpuName&) const { return EventSource::kGpu; }
  };
  return std::visit(Visitor{}, ev);
}

}  // namespace argus
