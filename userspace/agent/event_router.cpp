#include "userspace/agent/event_router.h"

#include "userspace/wire/event_decoder.h"
#include "userspace/wire/labels.h"

namespace argus {

void EventRouter::on_record(const void* data, size_t size) {
  auto decoded = decode_event(data, size);
  if (!decoded) {
    counters_.add(AgentCount::kMalformedRecords);
    return;
  }
  counters_.add(event_source(*decoded));
  DecodedEvent& ev = *decoded;
  const double now = static_cast<double>(clock_.monotonic_ns()) / 1e9;
  if (const auto* e = std::get_if<argus_exec_event>(&ev)) {
    if (e->flags & ARGUS_EXEC_F_LINK_MAP)
      discovery_.on_link_map_change(static_cast<int>(e->hdr.tgid), now);
    else
      discovery_.on_exec(static_cast<int>(e->hdr.tgid), now);
  } else if (const auto* e = std::get_if<argus_tgid_seen_event>(&ev)) {
    lifecycle_.on_first_call(static_cast<int>(e->hdr.tgid), now);
  } else if (const auto* e = std::get_if<argus_exit_event>(&ev)) {
    lifecycle_.finish(static_cast<int>(e->hdr.tgid), e->exit_code, &e->cause);
  } else if (const auto* e = std::get_if<argus_nccl_init_event>(&ev)) {
    calls_.on_nccl_init(*e);
  } else if (const auto* e = std::get_if<argus_nccl_child_event>(&ev)) {
    calls_.on_nccl_child(*e);
  } else if (const auto* e = std::get_if<argus_nccl_init_all_event>(&ev)) {
    calls_.on_nccl_init_all(*e);
  } else if (const auto* e = std::get_if<argus_nccl_coll_event>(&ev)) {
    calls_.on_collective(*e);
  } else if (const auto* e = std::get_if<argus_c10d_coll_event>(&ev)) {
    calls_.on_c10d_collective(*e);
  } else if (const auto* e = std::get_if<argus_c10d_backend_event>(&ev)) {
    calls_.on_c10d_backend(*e);
  } else if (const auto* e = std::get_if<argus_c10d_group_event>(&ev)) {
    calls_.on_c10d_group(*e);
  } else if (const auto* e = std::get_if<argus_call_done_event>(&ev)) {
    calls_.on_call_done(*e);
  } else if (auto* e = std::get_if<GpuBatch>(&ev)) {
    calls_.on_gpu_batch(*e);
  } else if (const auto* e = std::get_if<GpuName>(&ev)) {
    calls_.on_gpu_name(*e);
  } else if (const auto* e = std::get_if<argus_gpu_oom_event>(&ev)) {
    ooms_.on_oom(OomRecord{static_cast<int>(e->hdr.tgid), e->hdr.tid, e->hdr.ts_ns,
                           clock_.unix_seconds() - (now - static_cast<double>(e->hdr.ts_ns) / 1e9),
                           cuda_api_label(e->api), cuda_result_name(e->result), e->asked, e->held, e->peak,
                           e->total});
  }
}

}  // namespace argus
