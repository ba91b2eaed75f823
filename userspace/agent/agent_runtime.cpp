#include "userspace/agent/agent_runtime.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <set>

#include "userspace/attach/attach_plan.h"
#include "userspace/common/comm_id.h"
#include "userspace/detect/rank_exit.h"
#include "userspace/registry/exit_cause.h"
#include "userspace/procfs/cpu_stat.h"
#include "userspace/procfs/pod_gpu_uuid.h"
#include "userspace/python/stack_groups.h"
#include "userspace/common/thread_name.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

// The grouped Python stacks of a job's live ranks on this node, for a hang event:
// bounded (16 ranks, 64 frames a thread); a few ms a rank on the event loop, and
// hangs are rare.
nlohmann::json hang_python_stacks(const std::string& job_id, const std::vector<RankSnapshot>& ranks,
                                  python::PythonLocator& locator, const std::string& proc_root) {
  std::vector<std::pair<int, int>> rank_pids;
  for (const auto& r : ranks) {
    if (!r.exited && r.job_id == job_id && r.rank >= 0) rank_pids.emplace_back(r.rank, r.pid);
  }
  std::sort(rank_pids.begin(), rank_pids.end());
  return python::grouped_stacks_of(rank_pids, locator, proc_root);
}

bool sched_probe_up(const BpfBackend& b) {
  const auto probes = b.kernel_probes();
  auto it = probes.find("sched_switch");
  return it != probes.end() && (it->second == "tp_btf" || it->second == "raw_tp");
}

constexpr size_t kMaxStealerCgroups = 4096;  // cached stealer cgroup paths (cleared past it)
// A rank whose pod is not fully named is looked up again a few times (the
// kubelet may not have written its log dir yet), 2, 4, 8 and 16 s apart.
constexpr int kMaxPodTries = 5;

pods::PodResolverOptions pod_resolver_options(const AgentOptions& opts) {
  pods::PodResolverOptions o;
  o.mode = opts.pod_info;
  o.proc_root = opts.proc_root;
  o.logs.pod_logs_dir = opts.pod_logs_dir;
  o.logs.container_logs_dir = opts.container_logs_dir;
  return o;
}

}  // namespace

Result<std::unique_ptr<AgentRuntime>> AgentRuntime::create(const AgentOptions& opts, const Clock& clock) {
  LoaderOptions lopts;
  lopts.btf_path = opts.btf_path;
  lopts.ringbuf_bytes = opts.ringbuf_bytes;
  lopts.usdt_spec_slots = opts.usdt_spec_slots;
  lopts.force_raw_tp = opts.force_raw_tp;
  lopts.uprobe_links = opts.uprobe_links;
  if (!opts.offcpu) lopts.kernel_probes_off = {"sched_switch", "sched_wakeup", "sched_wakeup_new"};
  auto loader = BpfLoader::create(lopts);
  if (!loader.ok()) return make_error(loader.error());
  std::unique_ptr<AgentRuntime> rt(new AgentRuntime(opts, clock, std::move(*loader)));
  return rt;
}

std::unique_ptr<AgentRuntime> AgentRuntime::with_backend(const AgentOptions& opts, const Clock& clock,
                                                         std::unique_ptr<BpfBackend> backend) {
  return std::unique_ptr<AgentRuntime>(new AgentRuntime(opts, clock, std::move(backend)));
}

AgentRuntime::AgentRuntime(const AgentOptions& opts, const Clock& clock, std::unique_ptr<BpfBackend> loader)
    : opts_(opts),
      clock_(clock),
      loader_(std::move(loader)),
      registry_(clock, RegistryOptions{.node = opts.node,
                                       .exit_grace_seconds = opts.exit_grace_seconds,
                                       .window_seconds = opts.window_seconds,
                                       .launches_counted = opts.probes == ProbeSet::Deep,
                                       .caps = &counters_,
                                       .sched_probe = sched_probe_up(*loader_)}),
      tracker_(TrackerOptions{.window_seconds = opts.window_seconds, .caps = &counters_}),
      aligner_(&counters_),
      stragglers_(opts.straggler, opts.window_seconds),
      bubbles_(BubbleOptions{}, opts.window_seconds),
      hangs_(opts.hang),
      timeline_(NodeTimelineOptions{.gpu = gpu::TimelineOptions{.window_seconds = opts.window_seconds},
                                    .caps = &counters_}),
      events_(kDefaultMaxDetectedEvents, &counters_),
      profiles_(python::ProfileOptions{.caps = &counters_}),
      pods_(pod_resolver_options(opts)),
      py_locator_(opts.proc_root) {
  probes_ = std::make_unique<ProbeManager>(*loader_, ProbeManagerOptions{.proc_root = opts_.proc_root,
                                                                         .set = opts_.probes,
                                                                         .release_grace_seconds =
                                                                             opts_.probe_release_seconds,
                                                                         .python_gc = opts_.python_gc_probes,
                                                                         .counters = &counters_});
  DiscoveryOptions dopts;
  dopts.proc_root = opts_.proc_root;
  dopts.self_pid = static_cast<int>(getpid());
  if (auto eq = opts_.only_env.find('='); eq != std::string::npos) {
    dopts.only_env_key = opts_.only_env.substr(0, eq);
    dopts.only_env_value = opts_.only_env.substr(eq + 1);
  }
  dopts.counters = &counters_;
  discovery_ = std::make_unique<Discovery>(dopts, *probes_);
  loader_->set_event_handler([this](const void* data, size_t size) { handle_record(data, size); });
  if (opts_.python_sample_hz > 0) {
    loader_->set_py_sample_handler([this](const void* data, size_t size) { py_sampler_.on_record(data, size); });
    // No sampler is no reason to stop: the rest of the agent runs, and the
    // profile route says why it has nothing.
    if (auto cpus = loader_->start_python_sampling(opts_.python_sample_hz); cpus.ok()) {
      py_sampling_ = true;
      spdlog::debug("sampling Python stacks at {} Hz on {} CPUs", opts_.python_sample_hz, *cpus);
    } else {
      py_sampling_error_ = cpus.error();  // said by start(): a start-up failure stays one line
    }
  }
}

AgentRuntime::~AgentRuntime() { stop(); }

Result<python::PyStackDump, python::LocateFailure> AgentRuntime::python_stacks(int pid) const {
  auto p = py_locator_.locate(pid);
  if (!p) return p.failure();
  auto mem = python::process_memory(pid, opts_.proc_root);
  auto dump = python::dump_stacks(*p, *mem, opts_.proc_root);
  if (!dump) return make_error(LocateError::kUnreadable, dump.error());
  return std::move(*dump);
}

void AgentRuntime::start() {
  if (running_.exchange(true)) return;
  if (!py_sampling_error_.empty()) spdlog::warn("no Python stack sampling: {}", py_sampling_error_);
  for (const auto& why : loader_->kernel_probe_errors()) spdlog::warn("kernel layer partly blind: {}", why);
  heartbeat_ns_ = clock_.monotonic_ns();
  thread_ = std::thread([this] {
    name_this_thread("argus-loop");
    loop();
  });
}

void AgentRuntime::stop() {
  if (!running_.exchange(false)) return;
  loader_->interrupt_poll();
  if (thread_.joinable()) thread_.join();
}

double AgentRuntime::seconds_since_heartbeat() const {
  return static_cast<double>(clock_.monotonic_ns() - heartbeat_ns_.load()) / 1e9;
}

// While ranks run or a library is being parsed, the loop turns every 50 ms:
// hot events arrive without a wakeup, and a parsed library's probes attach at
// the next turn. With nothing to watch it sleeps until the next thing due (the
// stats pass, the /proc scan, an exec follow-up), at most kIdleTurnMaxSeconds:
// exec, exit, dlopen and first-call events wake it at once, and stop()
// interrupts the wait. An idle agent's floor is these few turns a second.
// Tracked ranks that sent nothing for kQuietTurnsBeforeRest turns (a process
// that maps NCCL and waits, a job between long steps) get the same rest, up to
// the next stats pass: their first hot events then wait at most that long in
// the ring (which wakes the agent itself when an eighth full), and the
// detectors, which run at the stats pass, see them drained first.
void AgentRuntime::loop() {
  while (running_) run_once(next_wait_ms());
}

bool AgentRuntime::watching() const { return registry_.tracked_count() > 0 || probes_->parses_pending(); }

int AgentRuntime::next_wait_ms() const {
  const double due = std::min({next_scan_, next_stats_, discovery_->next_followup()});
  const bool busy = probes_->parses_pending() ||
                    (registry_.tracked_count() > 0 && quiet_turns_ < kQuietTurnsBeforeRest);
  const double cap = busy ? kBusyTurnSeconds : kIdleTurnMaxSeconds;
  return static_cast<int>(std::ceil(std::clamp(due - now_s(), 0.0, cap) * 1000));
}

// A failed poll (not a signal) is counted and logged once: the loop goes on.
int AgentRuntime::poll_ring_buffers(int timeout_ms) {
  const int n = loader_->poll_events(timeout_ms);
  if (n < 0 && n != -EINTR) {
    if (counters_.get(AgentCount::kRingbufPollErrors) == 0) spdlog::error("ring buffer poll failed: error {}", -n);
    counters_.add(AgentCount::kRingbufPollErrors);
  }
  return std::max(n, 0);
}

void AgentRuntime::run_once(int poll_ms) {
  quiet_turns_ = poll_ring_buffers(poll_ms) > 0 ? 0 : std::min(quiet_turns_ + 1, kQuietTurnsBeforeRest);
  const double now = now_s();
  // Libraries parsed since the last pass: the processes that map them are ranks now.
  for (int pid : probes_->complete_parses())
    if (auto f = discovery_->check(pid, now)) track_found(*f);
  for (const auto& f : discovery_->run_due(now)) track_found(f);
  if (now >= next_scan_) {
    for (const auto& f : discovery_->scan(now)) track_found(f);
    probes_->sweep(now, discovery_->alive_pids());
    std::erase_if(workers_seen_, [&](int pid) { return !discovery_->alive_pids().count(pid); });
    next_scan_ = now + (watching() ? opts_.scan_interval_seconds
                                   : std::max(opts_.scan_interval_seconds, opts_.idle_scan_interval_seconds));
  }
  if (now >= next_stats_) {
    refresh_stats();
    reap_vanished();
    registry_.tick();
    evaluate_detectors();
    // With no rank the pass only refreshes the agent's own counters and looks
    // for ranks whose first-call event was lost: at the idle scan's pace.
    next_stats_ = now + (watching() ? opts_.stats_interval_seconds
                                    : std::max(opts_.stats_interval_seconds, opts_.idle_scan_interval_seconds));
  }
  heartbeat_ns_ = clock_.monotonic_ns();
}

void AgentRuntime::track_found(const FoundProcess& f) {
  if (!f.selected) {
    // Not ours (--only-env): BPF stops counting it; anything counted is dropped.
    loader_->set_tgid_state(static_cast<uint32_t>(f.pid), ARGUS_TGID_IGNORED);
    loader_->delete_stats(static_cast<uint32_t>(f.pid));
    return;
  }
  const bool known = registry_.is_live(f.pid);
  if (!known && is_worker_of_rank(f)) {
    // Its own collectives and syncs would be none; its GC and stacks are not the rank's.
    loader_->set_tgid_state(static_cast<uint32_t>(f.pid), ARGUS_TGID_IGNORED);
    loader_->delete_stats(static_cast<uint32_t>(f.pid));
    if (workers_seen_.insert(f.pid).second) {
      counters_.add(SkipReason::kRankWorker);
      spdlog::debug("pid {} ({}) is a worker of job_id={} rank={} (forked by the rank): not tracked as a rank", f.pid,
                    f.comm, f.identity.job_id, f.identity.rank);
    }
    return;
  }
  registry_.track(f.pid, f.start_ticks, f.comm, f.identity, f.libraries);
  loader_->set_tgid_state(static_cast<uint32_t>(f.pid), ARGUS_TGID_TRACKED);
  if (!known) {
    watch_memcg(f.pid);
    resolve_kube_identity(f.pid, f.identity);
  }
  probes_->attach_python_gc_for(f.pid);  // its interpreter's collector, once per file
  if (!known) {
    spdlog::info("tracking pid {} ({}) job_id={} rank={}", f.pid, f.comm,
                 f.identity.job_id.empty() ? "?" : f.identity.job_id, f.identity.rank);
  }
}

// A process forked by a tracked rank that claims that same rank: a DataLoader
// worker or another multiprocessing child. It inherited the rank's environment
// and mappings (so NCCL and libpython), but it is not the rank: tracked, it
// would put two processes behind one (job_id, rank) and answer for the rank's
// stacks and GC. A rank found after its own workers is not caught (the scan
// goes by ascending pid, so the rank is normally first).
bool AgentRuntime::is_worker_of_rank(const FoundProcess& f) const {
  if (f.identity.rank < 0 || f.identity.job_id.empty()) return false;
  int pid = f.ppid;
  for (int depth = 0; depth < 8 && pid > 1; ++depth) {
    if (auto jr = registry_.job_rank(pid)) return jr->first == f.identity.job_id && jr->second == f.identity.rank;
    auto st = procfs::read_stat(opts_.proc_root, pid);
    if (!st.ok()) return false;
    pid = st->ppid;
  }
  return false;
}

// A process that calls into a probed library although discovery found none in
// its maps (a file it could not read, a mapping that changed): tracked all the
// same, named from its environment as a discovered rank is.
void AgentRuntime::track_unmapped(int pid) {
  RankIdentity identity;
  if (auto env = procfs::read_environ(opts_.proc_root, pid); env.ok()) identity = identity_from_environ(*env);
  uint64_t start_ticks = 0;
  std::string comm;
  if (auto st = procfs::read_stat(opts_.proc_root, pid); st.ok()) {
    start_ticks = st->starttime_ticks;
    comm = st->comm;
  }
  registry_.track(pid, start_ticks, comm, identity, {});
  watch_memcg(pid);
  resolve_kube_identity(pid, identity);
}

// The GPU's UUID where the environment names it, else by its host index
// through the driver's files; "" when neither says.
std::string AgentRuntime::gpu_uuid_of(const RankIdentity& identity) {
  const GpuRef gpu = rank_gpu_from_strings(identity.cuda_visible_devices, identity.nvidia_visible_devices,
                                           identity.local_rank);
  if (gpu.form == GpuRef::Form::Uuid) return gpu.id;
  if (gpu.form != GpuRef::Form::Index) return "";
  if (!gpu_uuids_) gpu_uuids_ = procfs::gpu_uuids_by_index(opts_.proc_root);
  return gpu.index >= 0 && static_cast<size_t>(gpu.index) < gpu_uuids_->size() ? (*gpu_uuids_)[gpu.index] : "";
}

void AgentRuntime::resolve_kube_identity(int pid, const RankIdentity& identity) {
  registry_.set_gpu_uuid(pid, gpu_uuid_of(identity));
  if (pods_.mode() == pods::PodInfoMode::kOff) return;
  pod_tries_[pid] = PodTry{};
  resolve_pod(pid);
}

void AgentRuntime::resolve_pod(int pid) {
  auto it = pod_tries_.find(pid);
  if (it == pod_tries_.end()) return;
  const pods::PodResolver::Lookup l = pods_.resolve(pid);
  registry_.set_pod_identity(pid, l.pod);
  PodTry& t = it->second;
  ++t.tries;
  if (l.final || t.tries >= kMaxPodTries) {
    if (l.pod.present())
      spdlog::info("pid {}: pod {}/{} container {} (uid {}, {})", pid, l.pod.namespace_name.empty() ? "?" : l.pod.namespace_name,
                   l.pod.pod.empty() ? "?" : l.pod.pod, l.pod.container.empty() ? "?" : l.pod.container, l.pod.pod_uid,
                   l.result);
    pod_tries_.erase(it);
    return;
  }
  t.next_try = now_s() + static_cast<double>(1 << t.tries);
}

void AgentRuntime::retry_pod_identities() {
  const double now = now_s();
  std::vector<int> due;
  for (const auto& [pid, t] : pod_tries_)
    if (now >= t.next_try) due.push_back(pid);
  for (int pid : due) {
    if (!registry_.is_live(pid)) {
      pod_tries_.erase(pid);
      continue;
    }
    resolve_pod(pid);
  }
}

// Where the rank's memory cgroup is, and its OOM kills so far: an OOM kill
// when it dies is told from this count rising (when mark_victim is blind).
void AgentRuntime::watch_memcg(int pid) {
  auto dir = procfs::memcg_dir(opts_.proc_root, opts_.sysfs_root, pid);
  if (!dir) return;
  MemcgWatch w{*dir, std::nullopt};
  if (auto m = procfs::read_memcg(*dir); m.ok()) w.oom_kills = m->oom_kills;
  memcgs_[pid] = std::move(w);
}

// Why the process ended: the kernel's word (exit code, fatal signal and sender,
// mark_victim), its memory cgroup's OOM figures, and its newest Python stack.
ExitCause AgentRuntime::exit_cause(int pid, int exit_code, const argus_exit_info* info) {
  std::optional<procfs::MemcgState> memcg;
  auto w = memcgs_.find(pid);
  if (w != memcgs_.end())
    if (auto m = procfs::read_memcg(w->second.dir); m.ok()) memcg = std::move(*m);
  const bool rose = memcg && memcg->oom_kills && w->second.oom_kills && *memcg->oom_kills > *w->second.oom_kills;
  ExitCause c = exit_cause_of(exit_code, info, rose);
  if (c.oom) {
    const bool victim = info && (info->flags & ARGUS_EXIT_F_OOM);
    c.oom_details = memcg ? oom_details(*memcg, victim ? "mark_victim" : "memory_cgroup")
                          : nlohmann::json{{"source", "mark_victim"}};
  }
  if (auto stack = profiles_.newest(pid)) {
    const uint64_t now = clock_.monotonic_ns();
    c.last_python_stack = {{"frames", stack->frames},
                           {"age_seconds", now > stack->ts_ns ? static_cast<double>(now - stack->ts_ns) / 1e9 : 0.0}};
  }
  return c;
}

void AgentRuntime::handle_record(const void* data, size_t size) {
  auto ev = decode_event(data, size);
  if (!ev) {
    counters_.add(AgentCount::kMalformedRecords);
    return;
  }
  counters_.add(event_source(*ev));
  handle_event(*ev);
}

void AgentRuntime::handle_event(DecodedEvent& ev) {
  const double now = now_s();
  if (const auto* e = std::get_if<argus_exec_event>(&ev)) {
    if (e->flags & ARGUS_EXEC_F_LINK_MAP)
      discovery_->on_link_map_change(static_cast<int>(e->hdr.tgid), now);
    else
      discovery_->on_exec(static_cast<int>(e->hdr.tgid), now);
  } else if (const auto* e = std::get_if<argus_tgid_seen_event>(&ev)) {
    // First call into an already-probed library from a process discovery has
    // not met yet: identify it now, while its calls already count in BPF.
    const int pid = static_cast<int>(e->hdr.tgid);
    if (auto f = discovery_->check(pid, now)) {
      track_found(*f);
    } else if (!registry_.is_live(pid) && opts_.only_env.empty()) {
      track_unmapped(pid);
    }
  } else if (const auto* e = std::get_if<argus_exit_event>(&ev)) {
    finish_process(static_cast<int>(e->hdr.tgid), e->exit_code, &e->cause);
  } else if (const auto* e = std::get_if<argus_nccl_init_event>(&ev)) {
    if (e->result == 0) {
      const int pid = static_cast<int>(e->hdr.tgid);
      const std::string name = comm_id_from_uid(e->uid, sizeof(e->uid));  // never the raw id
      if (remember_comm(pid, e->comm, name)) {
        tracker_.add_member(name, pid, e->nranks);
        anchored_comms_[pid].insert(e->comm);  // every call on it is counted from the first
      }
    }
    NcclInitInfo info;
    info.rank = e->rank;
    info.nranks = e->nranks;
    info.result = e->result;
    info.api = e->api;
    info.comm = e->comm;
    info.comm_id = comm_id_from_uid(e->uid, sizeof(e->uid));
    registry_.on_nccl_init(static_cast<int>(e->hdr.tgid), info);
  } else if (const auto* e = std::get_if<argus_nccl_coll_event>(&ev)) {
    on_collective(*e);
  } else if (const auto* e = std::get_if<argus_call_done_event>(&ev)) {
    on_call_done(*e);
  } else if (auto* e = std::get_if<GpuBatch>(&ev)) {
    on_gpu_batch(*e);
  } else if (const auto* e = std::get_if<GpuName>(&ev)) {
    timeline_.on_gpu_name(static_cast<int>(e->hdr.tgid), e->name_id, e->name);
  }
}

void AgentRuntime::on_call_done(const argus_call_done_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  const bool collective = e.cls == ARGUS_CLS_NCCL;
  const std::string comm = collective ? comm_name(pid, e.ptr) : std::string();
  timeline_.on_call(pid, collective, collective ? nccl_op_label(e.id) : cuda_api_label(e.id), comm, e.start_ns,
                    e.hdr.ts_ns, e.ret);
  if (!collective && e.kind == ARGUS_STAT_CUDA_SYNC) tracker_.on_sync(pid, e.start_ns, e.hdr.ts_ns);
}

void AgentRuntime::on_gpu_batch(GpuBatch& b) {
  const int pid = static_cast<int>(b.hdr.tgid);
  const uint64_t truncated = b.sent > b.recs.size() ? b.sent - b.recs.size() : 0;
  auto step = step_seconds_.find(pid);
  timeline_.on_gpu_batch(pid, std::move(b.recs), b.dropped + truncated, step == step_seconds_.end() ? 0 : step->second);
}

std::vector<TraceRank> AgentRuntime::trace(double seconds, uint64_t* end_ns) const {
  const uint64_t now = clock_.monotonic_ns();
  const auto span = static_cast<uint64_t>(seconds * 1e9);
  if (end_ns) *end_ns = now;
  return timeline_.trace(now > span ? now - span : 0, now);
}

// Final aggregates of a process that ended, then its BPF state is dropped so a
// reused pid starts from zero.
void AgentRuntime::finish_process(int pid, std::optional<int> exit_code, const argus_exit_info* cause) {
  if (registry_.is_tracked(pid) && !registry_.is_live(pid)) {
    // Ended already (reaped before its event came): one rank ends once.
    spdlog::debug("pid {} ended already: a late end of it is ignored", pid);
    return;
  }
  std::vector<AggregateRecord> records;
  for (const auto& s : loader_->read_stats(static_cast<uint32_t>(pid))) records.push_back(aggregate_of(s));
  if (!registry_.is_tracked(pid) && !records.empty()) registry_.track(pid, 0, "", RankIdentity{}, {});
  registry_.apply_totals(pid, records);
  {
    StealerComms comms;  // its last stealers; its cgroup figures stay as last read
    refresh_kernel_cpu(pid, loader_->read_stealers(static_cast<uint32_t>(pid)), comms, /*cgroup=*/false);
  }
  loader_->delete_stealers(static_cast<uint32_t>(pid));
  cpu_stat_bad_.erase(pid);
  take_python_gc(pid);  // the probes' last counters: the process can no longer be polled
  loader_->forget_python_proc(static_cast<uint32_t>(pid));
  py_ranks_.erase(pid);
  if (exit_code)
    registry_.on_exit(pid, *exit_code, exit_cause(pid, *exit_code, cause));
  else
    registry_.on_vanished(pid);
  memcgs_.erase(pid);
  loader_->delete_stats(static_cast<uint32_t>(pid));
  loader_->delete_seqs(static_cast<uint32_t>(pid));
  loader_->forget_tgid(static_cast<uint32_t>(pid));
  py_sampler_.forget(pid);
  {
    std::lock_guard lock(counters_mu_);
    py_status_.erase(pid);  // a reused pid is located afresh
  }
  tracker_.on_exit(pid);
  aligner_.forget(pid);
  anchored_comms_.erase(pid);
  for (const auto& r : registry_.snapshot()) {
    if (r.pid != pid || !r.identified()) continue;
    DetectedEvent ev = rank_exit_event(r, clock_.unix_seconds());
    spdlog::warn("{}", ev.summary);
    events_.add(std::move(ev));
  }
}

// The communicator a collective ran on, by the name all its ranks share (from
// ncclCommInitRank). A process whose init the agent missed (attached late) but
// that uses a single communicator is taken to use its job's world communicator.
std::string AgentRuntime::comm_key(int pid, uint64_t handle) {
  auto& names = comm_names_[pid];
  if (auto it = names.find(handle); it != names.end()) return it->second;
  if (names.size() >= kDefaultMaxCommsPerRank) {  // counted: no more names kept for this process
    counters_.add(Cap::kCommHandles);
    return "pid:" + std::to_string(pid);
  }
  for (const auto& r : registry_.snapshot()) {
    if (r.pid != pid) continue;
    const std::string name = "job:" + (r.job_id.empty() ? "pid" + std::to_string(pid) : r.job_id);
    names[handle] = name;  // a member of the tracker once numbered (on_collective)
    return name;
  }
  return "pid:" + std::to_string(pid);
}

int AgentRuntime::world_size_of(int pid) const {
  for (const auto& r : registry_.snapshot())
    if (r.pid == pid) return r.world_size;
  return 0;
}

// A process keeps at most kDefaultMaxCommsPerRank communicator names (one that
// creates and destroys communicators forever stays bounded); false when refused.
bool AgentRuntime::remember_comm(int pid, uint64_t handle, const std::string& name) {
  auto& names = comm_names_[pid];
  if (names.size() >= kDefaultMaxCommsPerRank && !names.count(handle)) {
    counters_.add(Cap::kCommHandles);
    return false;
  }
  names[handle] = name;
  return true;
}

std::string AgentRuntime::comm_name(int pid, uint64_t handle) const {
  auto names = comm_names_.find(pid);
  if (names == comm_names_.end()) return {};
  auto n = names->second.find(handle);
  return n == names->second.end() ? std::string() : n->second;
}

void AgentRuntime::on_collective(const argus_nccl_coll_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  auto step = step_seconds_.find(pid);
  timeline_.on_collective_enter(pid, e.hdr.ts_ns, step == step_seconds_.end() ? 0 : step->second);
  timeline_.on_collective_call(pid, nccl_op_label(e.op), comm_name(pid, e.comm), e.hdr.ts_ns);
  if (e.seq == 0) return;  // p2p
  const std::string key = comm_key(pid, e.comm);
  auto anchored = anchored_comms_.find(pid);
  const bool init_seen = anchored != anchored_comms_.end() && anchored->second.count(e.comm) != 0;
  const auto a = aligner_.on_arrival(key, pid, init_seen, e.seq, e.hdr.ts_ns, {e.op, e.bytes});
  if (!a) return;  // a late-attached rank's calls, held back until numbered like its peers'
  if (a->first) {
    if (!init_seen) {
      tracker_.add_member(key, pid, world_size_of(pid));
      spdlog::info("pid {} on {}: attached after its communicator began; its collectives numbered as its peers': "
                   "{}, {:+} on its own count",
                   pid, key, label_of(a->how), a->shift);
    }
  }
  tracker_.on_arrival(key, pid, a->seq, a->ts_ns);
}

void AgentRuntime::evaluate_detectors() {
  const uint64_t now_ns = clock_.monotonic_ns();
  const double now_unix = clock_.unix_seconds();
  const auto ranks = registry_.snapshot();

  std::vector<RankSignal> signals;
  std::map<int, RankInfoForHang> facts;
  std::map<int, RankLagStats> lags;
  for (const auto& r : ranks) {
    const RankLagStats lag = tracker_.lag_stats(r.pid, now_ns);
    lags[r.pid] = lag;
    const GpuRankView gpu = timeline_.gpu_view(r.pid, now_ns);
    facts[r.pid] = {r.job_id, r.rank, r.exited, r.exit_reason, r.exit_code, lag.step_seconds,
                    static_cast<double>(gpu.latest_end_ns)};
    if (r.exited) {
      facts[r.pid].exit_summary = exit_phrase(r);
      facts[r.pid].exit_cause = exit_evidence(r);
    }
    if (r.exited) continue;
    RankSignal sig;
    sig.pid = r.pid;
    sig.job_id = r.job_id;
    sig.rank = r.rank;
    sig.cgroup = r.cgroup_cpu.path;  // named in a throttled straggler's summary
    sig.coll_wait_ratio = r.collective_wait_ratio;
    sig.sync_wait_ratio = r.sync_wait_ratio;
    sig.coverage = std::min(1.0, (now_unix - r.first_seen_unix) / opts_.window_seconds);
    sig.lag = lag;
    sig.gpu_valid = gpu.window_valid;
    sig.gpu_nccl_ratio = gpu.nccl_ratio;
    sig.bubble_ratio = gpu.bubble_ratio;
    sig.gc_valid = r.python_gc.present && r.python_gc.anchor != "none";
    sig.gc_seconds = r.python_gc.window_seconds;
    sig.gc_span_s = r.python_gc.window_span_seconds;
    sig.gc_pauses = r.python_gc.window_pauses;
    sig.gc_max_pause_s = r.python_gc.window_max_pause_seconds;
    sig.offcpu_valid = r.offcpu.present && r.offcpu.window_span_seconds > 0;
    sig.runqueue_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_RUNQUEUE];
    sig.io_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_IO];
    sig.lock_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_LOCK];
    sig.sleep_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_SLEEP];
    sig.oncpu_share = r.offcpu.window_oncpu_share;
    sig.stealers = r.offcpu.stealers;
    sig.throttle_valid = r.cgroup_cpu.present;
    sig.throttled_share = r.cgroup_cpu.window_throttled_share;
    step_seconds_[r.pid] = lag.step_seconds;
    signals.push_back(sig);
  }
  for (auto& ev : stragglers_.evaluate(signals, now_unix)) {
    add_python_evidence(ev, signals, now_ns);
    spdlog::warn("{}", ev.summary);
    events_.add(std::move(ev));
  }
  for (auto& ev : bubbles_.evaluate(signals, now_unix)) {
    spdlog::warn("{}", ev.summary);
    events_.add(std::move(ev));
  }

  std::vector<InflightWait> inflight;
  for (const auto& call : loader_->read_inflight_waits()) {
    const int pid = static_cast<int>(call.tgid);
    auto names = comm_names_.find(pid);
    if (names == comm_names_.end()) continue;
    if (call.kind == ARGUS_STAT_CUDA_SYNC) {
      inflight.push_back({pid, "", true, cuda_api_label(call.op), call.start_ns});
      continue;
    }
    auto n = names->second.find(call.comm);
    if (n != names->second.end()) inflight.push_back({pid, n->second, false, nccl_op_label(call.op), call.start_ns});
  }
  const auto comms = tracker_.comms();
  for (auto& ev : hangs_.evaluate(comms, inflight, facts, now_ns, now_unix)) {
    std::function<nlohmann::json()> links;
    {
      std::lock_guard lock(counters_mu_);
      links = link_state_;
    }
    if (links) ev.evidence["links"] = links();
    ev.evidence["python_stacks"] = hang_python_stacks(ev.job_id, ranks, py_locator_, opts_.proc_root);
    spdlog::warn("{}", ev.summary);
    events_.add(std::move(ev));
  }

  std::map<int, std::map<std::string, uint64_t>> seqs;
  std::vector<CommSnapshot> health;
  for (const auto& c : comms) {
    CommSnapshot cs;
    cs.comm = c.comm;
    cs.nranks = c.nranks;
    cs.ranks_here = static_cast<int>(c.members.size());
    cs.newest_seq = c.newest_seq;
    for (const auto& [pid, m] : c.members) {
      seqs[pid][c.comm] = m.last_seq;
      if (cs.job_id.empty() && facts.count(pid)) cs.job_id = facts[pid].job_id;
    }
    if (auto h = hangs_.health().find(c.comm); h != hangs_.health().end()) {
      cs.stalled_seconds = h->second.stalled_seconds;
      cs.hung = h->second.hung;
      for (int pid : h->second.missing_pids) cs.missing_ranks.push_back(facts.count(pid) ? facts[pid].rank : -1);
    }
    health.push_back(std::move(cs));
  }
  std::map<int, RankDetection> detections;
  for (const auto& r : ranks) {
    RankDetection& d = detections[r.pid];
    const auto& lag = lags[r.pid];
    d.arrival_lag_seconds = lag.mean_lag_s;
    d.late_fraction = lag.late_fraction;
    d.step_seconds = lag.step_seconds;
    const auto st = stragglers_.state(r.pid);
    d.straggler = st.straggler && !r.exited;
    d.straggler_score = r.exited ? 0 : st.score;
    d.straggler_reason = d.straggler ? st.reason : StragglerReason::kNone;
    d.pipeline_bubble = !r.exited && bubbles_.flagged(r.pid);
    d.hang_missing = hangs_.missing(r.pid);
    d.comm_seq = seqs[r.pid];
  }
  // Processes the registry dropped (grace over) are dropped here too.
  std::set<int> known;
  for (const auto& r : ranks) known.insert(r.pid);
  for (auto it = comm_names_.begin(); it != comm_names_.end();) {
    if (known.count(it->first)) {
      ++it;
      continue;
    }
    tracker_.forget(it->first);
    aligner_.forget(it->first);
    anchored_comms_.erase(it->first);
    stragglers_.forget(it->first);
    bubbles_.forget(it->first);
    it = comm_names_.erase(it);
  }
  timeline_.retain(known);
  profiles_.expire(now_ns);
  profiles_.retain(known);
  std::erase_if(step_seconds_, [&](const auto& kv) { return !known.count(kv.first); });
  std::erase_if(memcgs_, [&](const auto& kv) { return !known.count(kv.first); });
  std::lock_guard lock(counters_mu_);
  comm_health_ = std::move(health);
  detections_ = std::move(detections);
}

// The sampler's side of a rank refresh_python has located: its frames can be
// named from now on (the py_procs entry that makes BPF sample it is written
// there, once the interpreter is initialised), or why not.
void AgentRuntime::python_sampling_status(int pid, const std::string& why_not, const python::PyProcess* p) {
  if (!py_sampling_) return;
  if (p != nullptr && !py_sampler_.has_process(pid)) py_sampler_.add_process(pid, python::make_frame_resolver(*p));
  std::lock_guard lock(counters_mu_);
  py_status_[pid] = why_not;
}

Result<std::string> AgentRuntime::python_profile(int pid, double seconds) const {
  if (!py_sampling_)
    return make_error(opts_.python_sample_hz == 0 ? "Python stack sampling is off (--python-sample-hz 0)"
                                                  : "Python stack sampling could not start on this node");
  if (!profiles_.has(pid)) {  // an exited rank's samples stay while the rank is listed
    std::lock_guard lock(counters_mu_);
    auto st = py_status_.find(pid);
    if (st == py_status_.end()) return make_error("no Python interpreter located in pid " + std::to_string(pid) + " (yet)");
    if (!st->second.empty()) return make_error("pid " + std::to_string(pid) + " is not sampled: " + st->second);
  }
  const uint64_t now = clock_.monotonic_ns();
  const auto span = static_cast<uint64_t>(seconds * 1e9);
  return profiles_.folded(pid, now > span ? now - span : 0);
}

// A straggler's own Python frames against its peers' (the other ranks of its
// job here), over the window (at least 30 s, so that a 19 Hz sampler has seen
// enough): the functions that hold a much larger share of its samples.
void AgentRuntime::add_python_evidence(DetectedEvent& ev, const std::vector<RankSignal>& signals,
                                       uint64_t now_ns) const {
  if (!py_sampling_) return;
  const auto span = static_cast<uint64_t>(std::max(opts_.window_seconds, 30.0) * 1e9);
  const uint64_t since = now_ns > span ? now_ns - span : 0;
  std::vector<int> own, peers;
  for (const auto& s : signals) {
    if (s.job_id != ev.job_id) continue;
    (s.rank == ev.rank ? own : peers).push_back(s.pid);
  }
  python::add_python_evidence(ev, profiles_, own, peers, since);
}

void AgentRuntime::refresh_stats() {
  std::map<int, std::vector<AggregateRecord>> by_pid;
  for (const auto& s : loader_->read_stats()) by_pid[static_cast<int>(s.key.tgid)].push_back(aggregate_of(s));
  for (const auto& [pid, records] : by_pid) {
    if (!registry_.is_live(pid)) {
      // Counted in BPF but unknown here: its first-call event was lost (full
      // ring buffer). Identify it now if it still runs, else keep its counts.
      if (registry_.is_tracked(pid)) continue;  // exited, final totals taken
      if (auto f = discovery_->check(pid, now_s())) {
        track_found(*f);
      } else if (procfs::read_stat(opts_.proc_root, pid).ok()) {
        if (!opts_.only_env.empty()) continue;  // cannot tell whether it is ours
        track_unmapped(pid);
      } else if (!opts_.only_env.empty()) {
        loader_->delete_stats(static_cast<uint32_t>(pid));
        continue;
      } else {
        spdlog::warn("pid {} was counted in BPF but is gone before it could be identified", pid);
        finish_process(pid, std::nullopt);
        continue;
      }
    }
    registry_.apply_totals(pid, records);
  }
  refresh_kernel_cpu_all();
  retry_pod_identities();
  refresh_python();
  refresh_tcp();
  auto errors = loader_->read_errors();
  std::lock_guard lock(counters_mu_);
  bpf_errors_ = std::move(errors);
  py_sample_stats_ = py_sampler_.stats();
}

// Each stats pass: every live rank that runs Python is located once (cached by
// file), its py_procs entry written once its interpreter is initialised (the
// GC probes and the sampler act only then), and its GC counters read. The
// exported counts are the interpreter's own: polled here, or the probes' last
// snapshot, whichever is larger (they only grow).
void AgentRuntime::refresh_python() {
  const double now = now_s();
  const auto live = registry_.live_pids();
  const std::set<int> live_set(live.begin(), live.end());
  for (auto it = py_ranks_.begin(); it != py_ranks_.end();) {  // ended without an exit event seen here
    if (live_set.count(it->first)) {
      ++it;
      continue;
    }
    loader_->forget_python_proc(static_cast<uint32_t>(it->first));
    py_sampler_.forget(it->first);
    it = py_ranks_.erase(it);
  }
  for (int pid : live) {
    PyRank& pr = py_ranks_[pid];
    if (!pr.proc) {
      if (now < pr.next_try) continue;
      auto located = py_locator_.locate(pid);
      if (!located.ok()) {
        python_sampling_status(pid, located.error(), nullptr);
        // Not Python (most NCCL-only tools), or an interpreter it refuses: look
        // again later, in case the process loads one.
        pr.next_try = now + 30;
        if (!pr.said && located.failure().kind != LocateError::kNotPython) {
          spdlog::info("pid {}: Python not followed: {}", pid, located.error());
          pr.said = true;
        }
        continue;
      }
      pr.proc = std::move(*located);
      pr.mem = python::process_memory(pid, opts_.proc_root);
    }
    const python::PyProcess& p = *pr.proc;
    if (pr.gc_stats_addr == 0) pr.gc_stats_addr = python::gc_stats_address(p, *pr.mem);
    if (pr.gc_stats_addr != 0 && !pr.configured) {
      argus_py_proc cfg = python::bpf_config(p, pr.gc_stats_addr);
      if (p.file->gc_anchor == "usdt") cfg.flags |= ARGUS_PY_F_GC_BY_USDT;
      pr.configured = loader_->set_python_proc(static_cast<uint32_t>(pid), cfg);
      if (pr.configured)
        spdlog::info("pid {}: Python {} (GC anchor {}{})", pid, p.file->layout.version.str(), p.file->gc_anchor,
                     opts_.python_gc_probes ? "" : ", probes off: polled");
      python_sampling_status(pid, pr.configured ? "" : "cannot write the py_procs map", pr.configured ? &p : nullptr);
    }
    if (pr.gc_stats_addr == 0) continue;  // not initialised yet: nothing to count
    std::array<uint64_t, 3> counts{};
    if (auto polled = python::read_gc_collections(p, *pr.mem))
      for (size_t g = 0; g < 3; ++g) counts[g] = static_cast<uint64_t>(std::max<int64_t>(0, (*polled)[g]));
    registry_.set_python_gc(pid, p.file->layout.version.str(), opts_.python_gc_probes ? p.file->gc_anchor : "none",
                            counts);
    take_python_gc(pid);
  }
}

void AgentRuntime::refresh_tcp() {
  const auto entries = loader_->read_tcp_retransmits();
  auto got = tcp_attr_.update(entries, registry_.live_pids(),
                              [this](const argus_tcp_key& k) { return loader_->take_tcp_retransmit(k); });
  for (const auto& [pid, by_remote] : got.by_pid) registry_.add_tcp_retransmits(pid, by_remote);
  counters_.add(AgentCount::kTcpUnattributed, got.unattributed);
}

// The probes' newest absolute counters for a rank, folded in (larger wins).
void AgentRuntime::take_python_gc(int pid) {
  auto it = py_ranks_.find(pid);
  if (it == py_ranks_.end() || !it->second.proc) return;
  auto snap = loader_->read_python_gc(static_cast<uint32_t>(pid));
  if (!snap || snap->updated_ns == 0) return;
  std::array<uint64_t, 3> counts{};
  for (size_t g = 0; g < 3; ++g) counts[g] = static_cast<uint64_t>(std::max<int64_t>(0, snap->collections[g]));
  registry_.set_python_gc(pid, "", "", counts);
}

// A stealer's cgroup path (the cpu controller's, else v2), read once per
// (pid, cgroup id); "" when the process is gone.
std::string AgentRuntime::stealer_cgroup(int pid, uint64_t cgroup_id) {
  if (auto it = stealer_cgroups_.find(pid); it != stealer_cgroups_.end() && it->second.first == cgroup_id)
    return it->second.second;
  if (stealer_cgroups_.size() >= kMaxStealerCgroups) stealer_cgroups_.clear();
  std::string path;
  if (auto cg = procfs::read_cgroup(opts_.proc_root, pid); cg.ok()) {
    if (auto dir = procfs::cgroup_dir(*cg, opts_.sysfs_root, "cpu")) {
      path = dir->path;
    } else {
      for (const auto& line : cg->lines)
        if (line.hierarchy == 0) path = line.path;
    }
  }
  stealer_cgroups_[pid] = {cgroup_id, path};
  return path;
}

// Every live rank's CPU stealers and cgroup throttling: one walk of the
// stealer map and one comm read per stealer for the whole pass (ranks on a
// shared node steal from each other: per rank, it grew with ranks squared).
void AgentRuntime::refresh_kernel_cpu_all() {
  const std::vector<int> live = registry_.live_pids();
  std::vector<uint32_t> victims(live.begin(), live.end());
  auto by_victim = loader_->read_stealers_of(victims);
  StealerComms comms;
  for (int pid : live) refresh_kernel_cpu(pid, by_victim[static_cast<uint32_t>(pid)], comms, /*cgroup=*/true);
}

// A rank's CPU stealers (BPF totals, named) and its cgroup's CPU throttling.
void AgentRuntime::refresh_kernel_cpu(int pid, const std::vector<StealerEntry>& entries, StealerComms& comms,
                                      bool cgroup) {
  std::vector<CpuStealer> stealers;
  for (const auto& e : entries) {
    CpuStealer s;
    s.pid = static_cast<int>(e.key.stealer_tgid);
    s.comm.assign(e.value.comm, strnlen(e.value.comm, sizeof(e.value.comm)));
    // BPF kept the name it had when it first took the CPU; a process that
    // exec'd since (taskset, a shell wrapper) is named as it runs now.
    auto [named, first] = comms.try_emplace(s.pid);
    if (first)
      if (auto now = procfs::read_file(procfs::pid_path(opts_.proc_root, s.pid, "comm"), 64); now.ok() && !now->empty())
        named->second = now->substr(0, now->find('\n'));
    if (!named->second.empty()) s.comm = named->second;
    s.cgroup = stealer_cgroup(s.pid, e.value.cgroup_id);
    s.seconds = static_cast<double>(e.value.ns) / 1e9;
    s.count = e.value.count;
    stealers.push_back(std::move(s));
  }
  registry_.set_cpu_stealers(pid, std::move(stealers));
  if (!cgroup) return;

  // Resolved each pass: a rank may be moved (systemd, a job scheduler) after it starts.
  std::optional<procfs::CgroupDir> found;
  if (auto cg = procfs::read_cgroup(opts_.proc_root, pid); cg.ok()) found = procfs::cgroup_dir(*cg, opts_.sysfs_root, "cpu");
  if (!found) return registry_.set_cgroup_cpu(pid, std::nullopt);
  const procfs::CgroupDir dir = *found;
  auto text = procfs::read_file(dir.dir + "/cpu.stat", 64 << 10);
  if (!text.ok()) return registry_.set_cgroup_cpu(pid, std::nullopt);  // moved or gone meanwhile
  auto stat = procfs::parse_cpu_stat(*text, dir.version);
  if (!stat.ok()) {
    if (cpu_stat_bad_.insert(pid).second) {
      counters_.add(SkipReason::kCgroupCpuStatMalformed);
      spdlog::warn("pid {}: {}/cpu.stat skipped: {}", pid, dir.dir, stat.error());
    }
    return registry_.set_cgroup_cpu(pid, std::nullopt);
  }
  if (!stat->has_quota_counters) return registry_.set_cgroup_cpu(pid, std::nullopt);
  CgroupCpuView v;
  v.present = true;
  v.path = dir.path;
  v.periods = stat->nr_periods;
  v.throttled_periods = stat->nr_throttled;
  v.throttled_seconds = static_cast<double>(stat->throttled_ns) / 1e9;
  registry_.set_cgroup_cpu(pid, std::move(v));
}

// A tracked process that is gone without an exit event (lost, or it exited
// while the agent was not looking) still gets its final counts.
void AgentRuntime::reap_vanished() {
  std::vector<int> ended;
  for (int pid : registry_.live_pids()) {
    auto stat = procfs::read_stat(opts_.proc_root, pid);
    const auto ticks = registry_.start_ticks(pid);
    // A zombie's exit event (with its code) is on the way: wait for it or the reap.
    if (stat.ok() && stat->state == 'Z') continue;
    const bool gone = !stat.ok() && procfs::vanished(stat);
    const bool reused = stat.ok() && ticks && *ticks != 0 && stat->starttime_ticks != *ticks;
    if (gone || reused) ended.push_back(pid);
  }
  if (ended.empty()) return;
  // The kernel wrote its exit event before its parent could reap it: one that
  // exited since this turn's poll has it waiting in the ring buffer. Take it
  // first, or the rank would end twice (code unknown, then its real code).
  poll_ring_buffers(0);
  for (int pid : ended)
    if (registry_.is_live(pid)) finish_process(pid, std::nullopt);
}

Snapshot AgentRuntime::snapshot() const {
  Snapshot snap;
  snap.ranks = registry_.snapshot();
  const uint64_t now_ns = clock_.monotonic_ns();
  for (auto& r : snap.ranks) r.gpu = timeline_.gpu_view(r.pid, now_ns);
  {
    std::lock_guard lock(counters_mu_);
    for (auto& r : snap.ranks)
      if (auto d = detections_.find(r.pid); d != detections_.end()) static_cast<RankDetection&>(r) = d->second;
  }
  AgentSnapshot& a = snap.agent;
  a.version = ARGUS_VERSION;
  a.node = opts_.node;
  a.probes = opts_.probes == ProbeSet::Deep ? "deep" : "default";
  a.window_seconds = opts_.window_seconds;
  a.tracked_processes = registry_.tracked_count();
  const ProbeStats probe_stats = probes_->stats();
  a.probes_attached = probe_stats.probes;
  a.probed_files = probe_stats.files;
  a.probe_attach_errors = probe_stats.attach_errors;
  a.probe_files_released = probe_stats.files_released;
  a.usdt_spec_slots_used = probe_stats.usdt_slots_used;
  a.usdt_spec_slots_limit = probe_stats.usdt_slots_limit;
  a.probes_detaching = probe_stats.probes_detaching;
  a.probe_attach_delay = probe_stats.attach_delay;
  a.python_gc_files = probe_stats.python_gc_files;
  a.python_gc_unprobed_files = probe_stats.python_gc_unprobed_files;
  a.capabilities = opts_.capabilities;
  a.kernel_probes = loader_->kernel_probes();
  a.uprobe_links = loader_->uprobe_link_kind();
  a.pod_info = opts_.pod_info == pods::PodInfoMode::kLogs        ? "logs"
               : opts_.pod_info == pods::PodInfoMode::kApiserver ? "apiserver"
                                                                 : "off";
  a.pod_lookups = pods_.lookups();
  a.pod_source_skips = pods_.skips();
  a.pod_watch_errors = pods_.source_errors();
  a.counters = counters_.values();
  std::lock_guard lock(counters_mu_);
  // A full ring buffer is exported once, as events lost by source (every source
  // from the start); every other BPF failure path as a BPF error, with the
  // records the agent could not decode.
  for (unsigned src = 0; src < kVocabSize<EventSource>; ++src) a.events_lost[label_of(static_cast<EventSource>(src))] = 0;
  for (const auto& [err, n] : bpf_errors_) {
    if (auto source = ringbuf_full_source(err))
      a.events_lost[label_of(*source)] = n;
    else
      a.bpf_errors[bpf_error_name(err)] = n;
  }
  a.bpf_errors["malformed_record"] = a.counters.get(AgentCount::kMalformedRecords);
  // The sampler's records the agent could not use: malformed, or whose code
  // objects changed before they were named (frames read "[unknown]").
  a.bpf_errors["py_sample_malformed"] = py_sample_stats_.malformed;
  a.bpf_errors["py_frame_unresolved"] = py_sample_stats_.unresolved_frames;
  snap.comms = comm_health_;
  return snap;
}

}  // namespace argus
