#include "userspace/agent/call_feed.h"

#include <spdlog/spdlog.h>

#include "userspace/common/comm_id.h"
#include "userspace/wire/labels.h"

namespace argus {

void CallFeed::on_nccl_init(const argus_nccl_init_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  const std::string name = comm_id_from_uid(e.uid, sizeof(e.uid));  // never the raw id
  if (e.result == 0 && names_.on_init(pid, e.comm, name)) tracker_.add_member(name, pid, e.nranks);
  NcclInitInfo info;
  info.rank = e.rank;
  info.nranks = e.nranks;
  info.result = e.result;
  info.api = e.api;
  info.comm = e.comm;
  info.comm_id = name;
  registry_.on_nccl_init(pid, info);
}

// The communicator a collective ran on, by the name all its ranks share; a
// late-attached rank's calls held back until numbered like its peers'.
void CallFeed::on_collective(const argus_nccl_coll_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  timeline_.on_collective_enter(pid, e.hdr.ts_ns, tracker_.step_seconds(pid));
  timeline_.on_collective_call(pid, nccl_op_label(e.op), names_.name_of(pid, e.comm), e.hdr.ts_ns);
  if (e.seq == 0) return;  // p2p
  std::string key = names_.name_of(pid, e.comm);
  if (key.empty()) {  // a handle whose init was not seen: rare, so the registry is asked only then
    const auto m = registry_.membership(pid);
    key = names_.key_for(pid, e.comm, m ? std::optional(m->job_id) : std::nullopt);
  }
  const bool init_seen = names_.anchored(pid, e.comm);
  const auto a = aligner_.on_arrival(key, pid, init_seen, e.seq, e.hdr.ts_ns, {e.op, e.bytes});
  if (!a) return;
  if (a->first && !init_seen) {
    const auto m = registry_.membership(pid);
    tracker_.add_member(key, pid, m ? m->world_size : 0);
    spdlog::info("pid {} on {}: attached after its communicator began; its collectives numbered as its peers': "
                 "{}, {:+} on its own count",
                 pid, key, label_of(a->how), a->shift);
  }
  tracker_.on_arrival(key, pid, a->seq, a->ts_ns);
}

void CallFeed::on_call_done(const argus_call_done_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  const bool collective = e.cls == ARGUS_CLS_NCCL;
  const std::string comm = collective ? names_.name_of(pid, e.ptr) : std::string();
  timeline_.on_call(pid, collective, collective ? nccl_op_label(e.id) : cuda_api_label(e.id), comm, e.start_ns,
                    e.hdr.ts_ns, e.ret);
  if (!collective && e.kind == ARGUS_STAT_CUDA_SYNC) tracker_.on_sync(pid, e.start_ns, e.hdr.ts_ns);
}

void CallFeed::on_gpu_batch(GpuBatch& b) {
  const int pid = static_cast<int>(b.hdr.tgid);
  const uint64_t truncated = b.sent > b.recs.size() ? b.sent - b.recs.size() : 0;
  timeline_.on_gpu_batch(pid, std::move(b.recs), b.dropped + truncated, tracker_.step_seconds(pid));
}

void CallFeed::on_gpu_name(const GpuName& n) { timeline_.on_gpu_name(static_cast<int>(n.hdr.tgid), n.name_id, n.name); }

}  // namespace argus
