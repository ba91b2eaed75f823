#include "userspace/agent/snapshot_assembler.h"

#include "userspace/wire/labels.h"

namespace argus {
namespace {

const char* label_of(pods::PodInfoMode m) {
  switch (m) {
    case pods::PodInfoMode::kLogs: return "logs";
    case pods::PodInfoMode::kApiserver: return "apiserver";
    case pods::PodInfoMode::kOff: break;
  }
  return "off";
}

}  // namespace

void SnapshotAssembler::publish_verdicts(std::map<int, RankDetection> ranks, std::vector<CommSnapshot> comms) {
  std::lock_guard lock(mu_);
  detections_ = std::move(ranks);
  comms_ = std::move(comms);
}

void SnapshotAssembler::publish_bpf_errors(std::map<uint32_t, uint64_t> errors) {
  std::lock_guard lock(mu_);
  bpf_errors_ = std::move(errors);
}

Snapshot SnapshotAssembler::snapshot() const {
  Snapshot snap;
  snap.ranks = p_.registry.snapshot();
  const uint64_t now_ns = p_.clock.monotonic_ns();
  for (auto& r : snap.ranks) r.gpu = p_.timeline.gpu_view(r.pid, now_ns);
  snap.agent = agent();
  std::lock_guard lock(mu_);
  for (auto& r : snap.ranks)
    if (auto d = detections_.find(r.pid); d != detections_.end()) static_cast<RankDetection&>(r) = d->second;
  snap.comms = comms_;
  return snap;
}

AgentSnapshot SnapshotAssembler::agent() const {
  AgentSnapshot a;
  a.version = ARGUS_VERSION;
  a.node = facts_.node;
  a.probes = facts_.probes == ProbeSet::Deep ? "deep" : "default";
  a.window_seconds = facts_.window_seconds;
  a.capabilities = facts_.capabilities;
  a.tracked_processes = p_.registry.tracked_count();
  a.counters = p_.counters.values();
  add_probe_stats(a);
  a.kernel_probes = p_.bpf.kernel_probes();
  a.uprobe_links = p_.bpf.uprobe_link_kind();
  a.pod_info = label_of(facts_.pod_info);
  a.pod_lookups = p_.pods.resolver().lookups();
  a.pod_source_skips = p_.pods.resolver().skips();
  a.pod_watch_errors = p_.pods.resolver().source_errors();
  add_bpf_counts(a);
  return a;
}

void SnapshotAssembler::add_probe_stats(AgentSnapshot& a) const {
  const ProbeStats s = p_.probes.stats();
  a.probes_attached = s.probes;
  a.probed_files = s.files;
  a.probe_attach_errors = s.attach_errors;
  a.probe_files_released = s.files_released;
  a.usdt_spec_slots_used = s.usdt_slots_used;
  a.usdt_spec_slots_limit = s.usdt_slots_limit;
  a.probes_detaching = s.probes_detaching;
  a.probe_attach_delay = s.attach_delay;
  a.python_gc_files = s.python_gc_files;
  a.python_gc_unprobed_files = s.python_gc_unprobed_files;
}

// A full ring buffer is exported once, as events lost by source (every source
// from the start); every other BPF failure path as a BPF error, with the
// records the agent itself could not use: malformed, or sampled frames whose
// code objects changed before they were named ("[unknown]").
void SnapshotAssembler::add_bpf_counts(AgentSnapshot& a) const {
  for (unsigned src = 0; src < kVocabSize<EventSource>; ++src) a.events_lost[label_of(static_cast<EventSource>(src))] = 0;
  {
    std::lock_guard lock(mu_);
    for (const auto& [err, n] : bpf_errors_) {
      if (auto source = ringbuf_full_source(err))
        a.events_lost[label_of(*source)] = n;
      else
        a.bpf_errors[bpf_error_name(err)] = n;
    }
  }
  a.bpf_errors["malformed_record"] = a.counters.get(AgentCount::kMalformedRecords);
  const auto sampler = p_.python.sampler_stats();
  a.bpf_errors["py_sample_malformed"] = sampler.malformed;
  a.bpf_errors["py_frame_unresolved"] = sampler.unresolved_frames;
}

}  // namespace argus
