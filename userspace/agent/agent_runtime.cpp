#include "userspace/agent/agent_runtime.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "userspace/common/thread_name.h"
#include "userspace/wire/aggregates.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

bool sched_probe_up(const BpfLifecycle& b) {
  const auto probes = b.kernel_probes();
  auto it = probes.find("sched_switch");
  return it != probes.end() && (it->second == "tp_btf" || it->second == "raw_tp");
}

LoaderOptions loader_options(const AgentConfig& cfg) {
  LoaderOptions o = cfg.bpf;
  if (!cfg.offcpu) o.kernel_probes_off = {"sched_switch", "sched_wakeup", "sched_wakeup_new"};
  return o;
}

DiscoveryOptions discovery_options(const AgentConfig& cfg, AgentCounters& counters) {
  DiscoveryOptions o;
  o.proc_root = cfg.paths.proc_root;
  o.self_pid = static_cast<int>(getpid());
  if (auto eq = cfg.discovery.only_env.find('='); eq != std::string::npos) {
    o.only_env_key = cfg.discovery.only_env.substr(0, eq);
    o.only_env_value = cfg.discovery.only_env.substr(eq + 1);
  }
  o.counters = &counters;
  return o;
}

pods::PodResolverOptions pod_options(const AgentConfig& cfg) {
  pods::PodResolverOptions o;
  o.mode = cfg.pods.mode;
  o.proc_root = cfg.paths.proc_root;
  o.logs.pod_logs_dir = cfg.pods.logs_dir;
  o.logs.container_logs_dir = cfg.pods.container_logs_dir;
  return o;
}

}  // namespace

Result<std::unique_ptr<AgentRuntime>> AgentRuntime::create(const AgentConfig& cfg, const Clock& clock) {
  auto loader = BpfLoader::create(loader_options(cfg));
  if (!loader.ok()) return make_error(loader.error());
  return with_backend(cfg, clock, std::move(*loader));
}

std::unique_ptr<AgentRuntime> AgentRuntime::with_backend(const AgentConfig& cfg, const Clock& clock,
                                                         std::unique_ptr<BpfBackend> backend) {
  return std::unique_ptr<AgentRuntime>(new AgentRuntime(cfg, clock, std::move(backend)));
}

// The window is every part's: one setting, handed to each here.
AgentRuntime::AgentRuntime(const AgentConfig& cfg, const Clock& clock, std::unique_ptr<BpfBackend> bpf)
    : cfg_(cfg),
      clock_(clock),
      bpf_(std::move(bpf)),
      registry_(clock, RegistryOptions{.node = cfg.node,
                                       .exit_grace_seconds = cfg.detection.exit_grace_seconds,
                                       .window_seconds = cfg.detection.window_seconds,
                                       .launches_counted = cfg.discovery.probes == ProbeSet::Deep,
                                       .caps = &counters_,
                                       .sched_probe = sched_probe_up(*bpf_)}),
      names_(&counters_),
      groups_(&counters_),
      aligner_(&counters_),
      tracker_(TrackerOptions{.window_seconds = cfg.detection.window_seconds, .caps = &counters_}),
      timeline_(NodeTimelineOptions{.gpu = gpu::TimelineOptions{.window_seconds = cfg.detection.window_seconds},
                                    .caps = &counters_,
                                    .span_min_us = cfg.bpf.span_min_us}),
      events_(kDefaultMaxDetectedEvents, &counters_),
      probes_(std::make_unique<ProbeManager>(*bpf_, ProbeManagerOptions{.proc_root = cfg.paths.proc_root,
                                                                       .set = cfg.discovery.probes,
                                                                       .release_grace_seconds =
                                                                           cfg.discovery.probe_release_seconds,
                                                                       .python_gc = cfg.python.gc_probes,
                                                                       .counters = &counters_})),
      discovery_(std::make_unique<Discovery>(discovery_options(cfg, counters_), *probes_)),
      memcgs_(cfg.paths.proc_root, cfg.paths.sysfs_root),
      cgroup_cpu_(*bpf_, registry_, CgroupCpuOptions{cfg.paths.proc_root, cfg.paths.sysfs_root, &counters_}),
      pods_(registry_, pod_options(cfg)),
      python_(*bpf_, registry_, clock,
              PythonOptions{cfg.paths.proc_root, cfg.python.gc_probes, cfg.python.sample_hz, &counters_,
                            cfg.detection.window_seconds}),
      tcp_(*bpf_, registry_, cfg.paths.proc_root, &counters_),
      stuck_calls_([this](int pid) { return !tracker_.heard_from(pid); }, [this] { return clock_.monotonic_ns(); },
                   cfg.paths.proc_root),
      collectors_{&cgroup_cpu_, &pods_, &python_, &tcp_, &stuck_calls_},
      lifecycle_(LifecycleParts{registry_, *bpf_, *discovery_, *probes_, memcgs_, pods_, python_, events_, counters_,
                                ooms_},
                 clock, cfg.paths.proc_root, !cfg.discovery.only_env.empty()),
      calls_(registry_, names_, groups_, aligner_, tracker_, timeline_),
      router_(clock, counters_, *discovery_, lifecycle_, calls_, ooms_),
      detection_(DetectionOptions{cfg.detection.window_seconds, cfg.detection.straggler, cfg.detection.hang}),
      evidence_(python_, cfg.detection.window_seconds),
      assembler_(AssemblerParts{registry_, timeline_, *probes_, *bpf_, pods_, python_, counters_, clock},
                 AgentFacts{cfg.node, cfg.discovery.probes, cfg.detection.window_seconds, cfg.capabilities,
                            cfg.pods.mode}) {
  // Told of an end in this order: the last readings (CPU stealers, Python GC)
  // before the state lets go.
  for (PidScoped* part : std::initializer_list<PidScoped*>{&cgroup_cpu_, &python_, &memcgs_, &pods_, &tcp_, &stuck_calls_, &tracker_,
                                                           &aligner_, &names_, &groups_, &timeline_, &detection_, &ooms_})
    lifecycle_.add(part);
  bpf_->set_event_handler([this](const void* data, size_t size) { router_.on_record(data, size); });
  // No sampler is no reason to stop: the rest of the agent runs, and the
  // profile route says why it has nothing.
  python_sampling_error_ = python_.start_sampling(*bpf_);
  python_.set_oom_stack_handler([this](int pid, uint32_t tid, uint64_t ts_ns, std::vector<std::string> frames) {
    ooms_.on_stack(pid, tid, ts_ns, std::move(frames));
  });
}

AgentRuntime::~AgentRuntime() { stop(); }

void AgentRuntime::start() {
  if (running_.exchange(true)) return;
  if (!python_sampling_error_.empty()) spdlog::warn("no Python stack sampling: {}", python_sampling_error_);
  for (const auto& why : bpf_->kernel_probe_errors()) spdlog::warn("kernel layer partly blind: {}", why);
  for (HostCollector* c : collectors_) c->start();
  heartbeat_ns_ = clock_.monotonic_ns();
  thread_ = std::thread([this] {
    name_this_thread("argus-loop");
    while (running_) run_once(next_wait_ms());
  });
}

void AgentRuntime::stop() {
  if (!running_.exchange(false)) return;
  bpf_->interrupt_poll();
  if (thread_.joinable()) thread_.join();
  for (HostCollector* c : collectors_) c->stop();
}

double AgentRuntime::seconds_since_heartbeat() const {
  return static_cast<double>(clock_.monotonic_ns() - heartbeat_ns_.load()) / 1e9;
}

std::vector<TraceRank> AgentRuntime::trace(double seconds, uint64_t* end_ns) const {
  const uint64_t now = clock_.monotonic_ns();
  const auto span = static_cast<uint64_t>(seconds * 1e9);
  if (end_ns) *end_ns = now;
  return timeline_.trace(now > span ? now - span : 0, now);
}

// While ranks run or a library is being parsed, the loop turns every 50 ms:
// hot events arrive without a wakeup, and a parsed library's probes attach at
// the next turn. With nothing to watch it sleeps until the next thing due (the
// stats pass, the /proc scan, an exec follow-up): exec, exit, dlopen and
// first-call events wake it at once, and stop() interrupts the wait. Tracked
// ranks that sent nothing for a while (a process that maps NCCL and waits, a job
// between long steps) get the same rest, up to the next stats pass: their first
// hot events then wait at most that long in the ring (which wakes the agent
// itself when an eighth full), and the detectors see them drained first.
int AgentRuntime::next_wait_ms() const {
  const double due = std::min({next_scan_, next_stats_, discovery_->next_followup(),
                               polls_input() ? next_input_poll_ : next_stats_});
  const bool busy = probes_->parses_pending() ||
                    (registry_.tracked_count() > 0 && quiet_turns_ < kQuietTurnsBeforeRest);
  const double cap = busy ? kBusyTurnSeconds : kIdleTurnMaxSeconds;
  return static_cast<int>(std::ceil(std::clamp(due - now_s(), 0.0, cap) * 1000));
}

// A failed poll (not a signal) is counted and logged once: the loop goes on.
int AgentRuntime::poll_ring_buffers(int timeout_ms) {
  const int n = bpf_->poll_events(timeout_ms);
  if (n < 0 && n != -EINTR) {
    if (counters_.get(AgentCount::kRingbufPollErrors) == 0) spdlog::error("ring buffer poll failed: error {}", -n);
    counters_.add(AgentCount::kRingbufPollErrors);
  }
  return std::max(n, 0);
}

void AgentRuntime::run_once(int poll_ms) {
  quiet_turns_ = poll_ring_buffers(poll_ms) > 0 ? 0 : std::min(quiet_turns_ + 1, kQuietTurnsBeforeRest);
  const double now = now_s();
  // Libraries parsed since the last turn: the processes that map them are ranks now.
  for (int pid : probes_->complete_parses())
    if (auto f = discovery_->check(pid, now)) lifecycle_.track_found(*f);
  for (const auto& f : discovery_->run_due(now)) lifecycle_.track_found(f);
  if (now >= next_scan_) scan(now);
  if (now >= next_stats_) stats_pass(now);
  if (polls_input() && now >= next_input_poll_) {
    python_.poll_input(now);
    // At random intervals around the mean: looks at a fixed period alias with
    // a step near a multiple of it, and see one phase of the step only (a
    // rank 56% of its step in its DataLoader read 28% so).
    next_input_poll_ = now + PythonCollector::kInputPollSeconds * std::uniform_real_distribution<double>(0.5, 1.5)(look_rng_);
  }
  heartbeat_ns_ = clock_.monotonic_ns();
}

// With no rank to watch, /proc is scanned (and the stats pass, which then only
// refreshes the agent's own counters and looks for ranks whose first-call event
// was lost, runs) at the idle pace.
void AgentRuntime::scan(double now) {
  for (const auto& f : discovery_->scan(now)) lifecycle_.track_found(f);
  probes_->sweep(now, discovery_->alive_pids());
  lifecycle_.forget_gone_workers(discovery_->alive_pids());
  const auto& d = cfg_.discovery;
  next_scan_ = now + (watching() ? d.scan_interval_seconds : std::max(d.scan_interval_seconds, d.idle_scan_interval_seconds));
}

void AgentRuntime::stats_pass(double now) {
  take_aggregates(now);
  const std::vector<int> live = registry_.live_pids();
  for (HostCollector* c : collectors_) c->refresh(now, live);
  assembler_.publish_bpf_errors(bpf_->read_errors());
  lifecycle_.reap_vanished([this] { poll_ring_buffers(0); });
  registry_.tick();
  // What the registry dropped is let go of before anything judges it: a
  // communicator of ranks just dropped (a job stopped mid-collective) would
  // read as stalled on ranks nobody knows, "alive" for want of their exit.
  lifecycle_.forget_dropped();
  detect();
  const double every = cfg_.stats_interval_seconds;
  next_stats_ = now + (watching() ? every : std::max(every, cfg_.discovery.idle_scan_interval_seconds));
}

// BPF's totals per process. A process BPF counted that the registry does not
// know lost its first-call event (full ring buffer): identified now.
void AgentRuntime::take_aggregates(double now) {
  std::map<int, std::vector<AggregateRecord>> by_pid;
  for (const auto& s : bpf_->read_stats()) by_pid[static_cast<int>(s.key.tgid)].push_back(aggregate_of(s));
  for (const auto& [pid, records] : by_pid) {
    if (!registry_.is_live(pid) && !lifecycle_.on_counted_unknown(pid, now)) continue;
    registry_.apply_totals(pid, records);
  }
  for (const auto& [tgid, m] : bpf_->read_gpu_memory()) {
    const int pid = static_cast<int>(tgid);
    if (registry_.is_live(pid)) registry_.set_gpu_memory(pid, m.held, m.peak, m.total);
  }
}

// The calls hosts are blocked in now, named: a synchronize, or a collective on
// a communicator the process is known to use.
std::vector<InflightWait> AgentRuntime::blocked_calls() const {
  std::vector<InflightWait> out;
  for (const auto& call : bpf_->read_inflight_waits()) {
    const int pid = static_cast<int>(call.tgid);
    if (!names_.knows(pid)) continue;
    if (call.kind == ARGUS_STAT_CUDA_SYNC) {
      out.push_back({pid, "", true, cuda_api_label(call.op), call.start_ns});
      continue;
    }
    if (auto name = names_.name_of(pid, call.comm); !name.empty())
      out.push_back({pid, name, false, nccl_call_label(call.kind, call.op), call.start_ns});
  }
  // Calls that began before the agent's probes, seen on the ranks' stacks.
  for (auto& w : stuck_calls_.waits()) out.push_back(std::move(w));
  return out;
}

// The detection pass on the state as it is now; each event it raises gets its
// evidence, is said once in the log, and goes to the event log.
void AgentRuntime::detect() {
  const uint64_t now_ns = clock_.monotonic_ns();
  tracker_.set_blocked_calls(blocked_calls());
  tracker_.update(now_ns);
  const auto ranks = registry_.snapshot();
  auto verdicts = detection_.run(ranks, tracker_, timeline_, now_ns, clock_.unix_seconds());
  for (auto& ev : verdicts.events) {
    evidence_.add(ev, ranks, now_ns);
    spdlog::warn("{}", ev.summary);
    events_.add(std::move(ev));
  }
  assembler_.publish_verdicts(std::move(verdicts.ranks), std::move(verdicts.comms));
  for (auto& ev : ooms_.take_ready(now_ns, [this](int pid) { return registry_.rank(pid); })) {
    spdlog::warn("{}", ev.summary);
    events_.add(std::move(ev));
  }
}

}  // namespace argus
