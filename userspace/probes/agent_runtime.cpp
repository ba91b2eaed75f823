#include "probes/agent_runtime.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <set>

#include "attach/attach_plan.h"

namespace argus {
namespace {

std::string hex_prefix(const uint8_t* bytes, size_t n) {
  std::string out;
  char buf[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", bytes[i]);
    out += buf;
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<AgentRuntime>> AgentRuntime::create(const AgentOptions& opts, const Clock& clock) {
  LoaderOptions lopts;
  lopts.btf_path = opts.btf_path;
  lopts.ringbuf_bytes = opts.ringbuf_bytes;
  auto loader = BpfLoader::create(lopts);
  if (!loader.ok()) return make_error(loader.error());
  std::unique_ptr<AgentRuntime> rt(new AgentRuntime(opts, clock, std::move(*loader)));
  return rt;
}

AgentRuntime::AgentRuntime(const AgentOptions& opts, const Clock& clock, std::unique_ptr<BpfLoader> loader)
    : opts_(opts),
      clock_(clock),
      loader_(std::move(loader)),
      registry_(clock, RegistryOptions{opts.node, opts.exit_grace_seconds, opts.window_seconds,
                                       opts.probes == ProbeSet::Deep}) {
  probes_ = std::make_unique<ProbeManager>(*loader_, opts_.proc_root, opts_.probes);
  DiscoveryOptions dopts;
  dopts.proc_root = opts_.proc_root;
  dopts.self_pid = static_cast<int>(getpid());
  discovery_ = std::make_unique<Discovery>(dopts, *probes_);
  probes_->set_skip_sink(discovery_.get());
  loader_->set_event_handler([this](const void* data, size_t size) { handle_record(data, size); });
}

AgentRuntime::~AgentRuntime() { stop(); }

void AgentRuntime::start() {
  if (running_.exchange(true)) return;
  heartbeat_ns_ = clock_.monotonic_ns();
  thread_ = std::thread([this] { loop(); });
}

void AgentRuntime::stop() {
  if (!running_.exchange(false)) return;
  if (thread_.joinable()) thread_.join();
}

double AgentRuntime::seconds_since_heartbeat() const {
  return static_cast<double>(clock_.monotonic_ns() - heartbeat_ns_.load()) / 1e9;
}

void AgentRuntime::loop() {
  double next_scan = 0;
  double next_stats = 0;
  while (running_) {
    loader_->poll_events(50);
    const double now = now_s();
    for (const auto& f : discovery_->run_due(now)) track_found(f);
    if (now >= next_scan) {
      for (const auto& f : discovery_->scan(now)) track_found(f);
      next_scan = now + opts_.scan_interval_seconds;
    }
    if (now >= next_stats) {
      refresh_stats();
      reap_vanished();
      registry_.tick();
      next_stats = now + opts_.stats_interval_seconds;
    }
    heartbeat_ns_ = clock_.monotonic_ns();
  }
}

void AgentRuntime::track_found(const FoundProcess& f) {
  const bool known = registry_.is_live(f.pid);
  registry_.track(f.pid, f.start_ticks, f.comm, f.identity, f.libraries);
  loader_->set_tgid_state(static_cast<uint32_t>(f.pid), ARGUS_TGID_TRACKED);
  if (!known) {
    spdlog::info("tracking pid {} ({}) job_id={} rank={}", f.pid, f.comm,
                 f.identity.job_id.empty() ? "?" : f.identity.job_id, f.identity.rank);
  }
}

void AgentRuntime::handle_record(const void* data, size_t size) {
  auto ev = decode_event(data, size);
  if (!ev) {
    std::lock_guard lock(counters_mu_);
    ++malformed_records_;
    return;
  }
  {
    std::lock_guard lock(counters_mu_);
    ++events_total_[source_label(event_source(*ev))];
  }
  handle_event(*ev);
}

void AgentRuntime::handle_event(const DecodedEvent& ev) {
  const double now = now_s();
  if (const auto* e = std::get_if<argus_exec_event>(&ev)) {
    discovery_->on_exec(static_cast<int>(e->hdr.tgid), now);
  } else if (const auto* e = std::get_if<argus_tgid_seen_event>(&ev)) {
    // First call into an already-probed library from a process discovery has
    // not met yet: identify it now, while its calls already count in BPF.
    const int pid = static_cast<int>(e->hdr.tgid);
    if (auto f = discovery_->check(pid, now)) {
      track_found(*f);
    } else if (!registry_.is_live(pid)) {
      registry_.track(pid, 0, "", RankIdentity{}, {});
    }
  } else if (const auto* e = std::get_if<argus_exit_event>(&ev)) {
    finish_process(static_cast<int>(e->hdr.tgid), e->exit_code);
  } else if (const auto* e = std::get_if<argus_nccl_init_event>(&ev)) {
    NcclInitInfo info;
    info.rank = e->rank;
    info.nranks = e->nranks;
    info.result = e->result;
    info.api = e->api;
    info.comm = e->comm;
    info.uid_hex = hex_prefix(e->uid, sizeof(e->uid));
    registry_.on_nccl_init(static_cast<int>(e->hdr.tgid), info);
  } else if (const auto* e = std::get_if<argus_nccl_coll_event>(&ev)) {
    registry_.on_collective(static_cast<int>(e->hdr.tgid));
  } else if (const auto* e = std::get_if<argus_nccl_group_event>(&ev)) {
    registry_.on_group(static_cast<int>(e->hdr.tgid), e->is_end != 0);
  }
}

// Final aggregates of a process that ended, then its BPF state is dropped so a
// reused pid starts from zero.
void AgentRuntime::finish_process(int pid, std::optional<int> exit_code) {
  std::vector<AggregateRecord> records;
  for (const auto& s : loader_->read_stats(static_cast<uint32_t>(pid)))
    records.push_back({s.key.tgid, s.key.kind, s.key.sub, s.key.code, s.value.count, s.value.sum});
  if (!registry_.is_tracked(pid) && !records.empty()) registry_.track(pid, 0, "", RankIdentity{}, {});
  registry_.apply_totals(pid, records);
  if (exit_code)
    registry_.on_exit(pid, *exit_code);
  else
    registry_.on_vanished(pid);
  loader_->delete_stats(static_cast<uint32_t>(pid));
  loader_->forget_tgid(static_cast<uint32_t>(pid));
}

void AgentRuntime::refresh_stats() {
  std::map<int, std::vector<AggregateRecord>> by_pid;
  for (const auto& s : loader_->read_stats())
    by_pid[static_cast<int>(s.key.tgid)].push_back(
        {s.key.tgid, s.key.kind, s.key.sub, s.key.code, s.value.count, s.value.sum});
  for (const auto& [pid, records] : by_pid) {
    if (!registry_.is_live(pid)) {
      // Counted in BPF but unknown here: its first-call event was lost (full
      // ring buffer). Identify it now if it still runs, else keep its counts.
      if (registry_.is_tracked(pid)) continue;  // exited, final totals taken
      if (auto f = discovery_->check(pid, now_s())) {
        track_found(*f);
      } else if (auto st = procfs::read_stat(opts_.proc_root, pid); st.ok()) {
        registry_.track(pid, st->starttime_ticks, st->comm, RankIdentity{}, {});
      } else {
        spdlog::warn("pid {} was counted in BPF but is gone before it could be identified", pid);
        finish_process(pid, std::nullopt);
        continue;
      }
    }
    registry_.apply_totals(pid, records);
  }
  auto errors = loader_->read_errors();
  std::lock_guard lock(counters_mu_);
  bpf_errors_ = std::move(errors);
}

// A tracked process that is gone without an exit event (lost, or it exited
// while the agent was not looking) still gets its final counts.
void AgentRuntime::reap_vanished() {
  for (int pid : registry_.live_pids()) {
    auto stat = procfs::read_stat(opts_.proc_root, pid);
    const auto ticks = registry_.start_ticks(pid);
    // A zombie's exit event (with its code) is on the way: wait for it or the reap.
    if (stat.ok() && stat->state == 'Z') continue;
    const bool gone = !stat.ok() && procfs::vanished(stat);
    const bool reused = stat.ok() && ticks && *ticks != 0 && stat->starttime_ticks != *ticks;
    if (gone || reused) finish_process(pid, std::nullopt);
  }
}

Snapshot AgentRuntime::snapshot() const {
  Snapshot snap;
  snap.ranks = registry_.snapshot();
  AgentSnapshot& a = snap.agent;
  a.version = ARGUS_VERSION;
  a.node = opts_.node;
  a.probes = opts_.probes == ProbeSet::Deep ? "deep" : "default";
  a.window_seconds = opts_.window_seconds;
  a.tracked_processes = registry_.tracked_count();
  a.probes_attached = probes_->attached();
  a.probe_attach_errors = probes_->attach_errors();
  a.discovery_skips = discovery_->skips();
  std::lock_guard lock(counters_mu_);
  for (uint32_t src = 0; src < ARGUS_SRC_MAX; ++src) a.events_total[source_label(src)] = 0;
  for (const auto& [k, v] : events_total_) a.events_total[k] = v;
  a.bpf_errors = bpf_errors_;
  a.bpf_errors["malformed_record"] = malformed_records_;
  auto lost = [&](const char* name) {
    auto it = bpf_errors_.find(name);
    return it == bpf_errors_.end() ? 0 : it->second;
  };
  a.events_lost["proc"] = lost("ringbuf_full_proc");
  a.events_lost["nccl"] = lost("ringbuf_full_nccl");
  a.events_lost["cuda"] = lost("ringbuf_full_cuda");
  return snap;
}

}  // namespace argus
