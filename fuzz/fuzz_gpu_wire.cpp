// GPU wire records and the other ring-buffer records: their bytes come from a
// producer inside a training process (the argus:gpu_batch / gpu_name USDT
// arguments are copied by BPF from the producer's memory; a shrink's excluded
// ranks and an InitAll's counts are the process's arguments), so sizes, counts,
// names and timestamps are anything. Each record goes through decode_event and,
// as AgentRuntime dispatches it, into the NodeTimeline and the communicator
// names; then every reader the API uses runs over the result, and the step
// sketches must decode again.
//
// Input: frames of [u16 little-endian length][length bytes] (a short last frame
// is passed as it is). The frame's bytes are also given to StepSketch::decode.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <set>
#include <vector>

#include "userspace/comms/comm_names.h"
#include "userspace/wire/event_decoder.h"
#include "userspace/gpu_timeline/sketch.h"
#include "userspace/trace/node_timeline.h"
#include "userspace/wire/labels.h"

namespace {

using argus::NodeTimeline;

// As CallFeed names communicators: the counts are clamped to the arrays.
void name_comms(argus::CommNames& names, const argus::DecodedEvent& ev) {
  if (const auto* c = std::get_if<argus_nccl_child_event>(&ev)) {
    const int pid = static_cast<int>(c->hdr.tgid % 16);
    const std::string parent = names.key_for(pid, c->parent, std::string("j"));
    std::string name;
    if (c->api == ARGUS_NCCL_COMM_SHRINK) {
      const size_t n = static_cast<size_t>(std::clamp(c->n_excluded, 0, ARGUS_NCCL_EXCLUDE_MAX));
      std::vector<int> excluded(c->excluded, c->excluded + n);
      name = argus::shrink_child_name(parent, c->nth, excluded, c->n_excluded);
      (void)argus::shrink_rank(c->color, c->key, excluded, c->n_excluded);
    } else {
      name = argus::split_child_name(parent, c->nth, c->color);
    }
    if (name.empty()) return;
    if (c->comm != 0) (void)names.on_init(pid, c->comm, name);
    else names.on_pending_child(pid, c->newcomm_ptr, name);
    (void)names.bind_pending(pid, c->key % 2 ? c->newcomm_ptr : 0, c->parent ^ 1);
  } else if (const auto* a = std::get_if<argus_nccl_init_all_event>(&ev)) {
    const int pid = static_cast<int>(a->hdr.tgid % 16);
    const std::string name = argus::init_all_name(pid, names.next_init_all(pid));
    for (int i = 0; i < std::clamp(a->ndev, 0, ARGUS_NCCL_INIT_ALL_MAX); ++i) (void)names.on_init(pid, a->comms[i], name);
  } else if (const auto* c = std::get_if<argus_nccl_coll_event>(&ev)) {
    (void)names.key_for(static_cast<int>(c->hdr.tgid % 16), c->comm, std::nullopt);
  }
}

void dispatch(NodeTimeline& tl, const argus::DecodedEvent& ev, std::set<int>& pids, uint64_t& now) {
  if (const auto* b = std::get_if<argus::GpuBatch>(&ev)) {
    if (b->recs.size() > ARGUS_GPU_BATCH_MAX) std::abort();
    const int pid = static_cast<int>(b->hdr.tgid);
    pids.insert(pid);
    const uint64_t truncated = b->sent > b->recs.size() ? b->sent - b->recs.size() : 0;
    tl.on_gpu_batch(pid, b->recs, b->dropped + truncated, static_cast<double>(b->hdr.pad % 8));
    now = std::max<uint64_t>(now, b->hdr.ts_ns);
  } else if (const auto* n = std::get_if<argus::GpuName>(&ev)) {
    if (n->name.size() > ARGUS_GPU_NAME_MAX) std::abort();  // strnlen over the fixed field
    pids.insert(static_cast<int>(n->hdr.tgid));
    tl.on_gpu_name(static_cast<int>(n->hdr.tgid), n->name_id, n->name);
  } else if (const auto* c = std::get_if<argus_nccl_coll_event>(&ev)) {
    pids.insert(static_cast<int>(c->hdr.tgid));
    tl.on_collective_enter(static_cast<int>(c->hdr.tgid), c->hdr.ts_ns, static_cast<double>(c->op % 8));
    now = std::max<uint64_t>(now, c->hdr.ts_ns);
  } else if (const auto* d = std::get_if<argus_call_done_event>(&ev)) {
    pids.insert(static_cast<int>(d->hdr.tgid));
    tl.on_call(static_cast<int>(d->hdr.tgid), d->cls == ARGUS_CLS_NCCL, "op", "comm", d->start_ns, d->hdr.ts_ns, d->ret);
    now = std::max<uint64_t>(now, d->hdr.ts_ns);
  }
  (void)argus::label_of(argus::event_source(ev));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  NodeTimeline tl;
  argus::CommNames names(nullptr, 8);  // a small bound, so that the fuzzer reaches it
  std::set<int> pids;
  uint64_t now = 0;
  for (size_t off = 0; off + 2 <= size;) {
    size_t len = data[off] | (size_t{data[off + 1]} << 8);
    off += 2;
    len = std::min(len, size - off);
    const uint8_t* rec = data + off;
    off += len;
    if (auto ev = argus::decode_event(len ? rec : nullptr, len)) {
      dispatch(tl, *ev, pids, now);
      name_comms(names, *ev);
    }
    (void)argus::gpu::StepSketch::decode(std::vector<uint8_t>(rec, rec + len));
    if (pids.size() > 8) break;  // a few ranks say it all; more only costs time
  }
  for (int pid : pids) {
    (void)tl.gpu_view(pid, now);
    for (const auto& step : tl.step_history(pid, 600).steps) {
      if (!argus::gpu::StepSketch::decode(step.sketch)) std::abort();  // our own encoding reads back
    }
  }
  (void)tl.trace(0, std::numeric_limits<uint64_t>::max());
  (void)tl.trace(now > 10'000'000'000ULL ? now - 10'000'000'000ULL : 0, now);
  return 0;
}
