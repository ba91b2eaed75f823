// The agent's moving parts wired together: BPF, discovery, probes, registry.
// One event-loop thread owns BPF and discovery; exporters read snapshots.
#pragma once
#include "userspace/common/defaults.h"
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <set>
#include <thread>

#include "userspace/model/agent_counters.h"
#include "userspace/common/clock.h"
#include "userspace/wire/event_decoder.h"
#include "userspace/comms/collective_tracker.h"
#include "userspace/detect/detectors.h"
#include "userspace/events/event_log.h"
#include "userspace/comms/seq_aligner.h"
#include "userspace/model/api_source.h"
#include "userspace/discovery/discovery.h"
#include "userspace/model/snapshot.h"
#include "userspace/pods/pod_resolver.h"
#include "userspace/probes/bpf_loader.h"
#include "userspace/probes/probe_manager.h"
#include "userspace/procfs/memcg.h"
#include "userspace/procfs/socket_owners.h"
#include "userspace/procfs/cgroup.h"
#include "userspace/python/py_profile.h"
#include "userspace/python/py_runtime.h"
#include "userspace/registry/rank_registry.h"
#include "userspace/trace/node_timeline.h"

namespace argus {

struct AgentOptions {
  std::string node;
  std::string proc_root = "/proc";
  bool offcpu = true;               // the scheduler probes (off-CPU time, CPU stealers)
  std::string btf_path = "/sys/kernel/btf/vmlinux";
  ProbeSet probes = ProbeSet::Default;
  double window_seconds = kDefaultWindowSeconds;
  double exit_grace_seconds = kDefaultExitGraceSeconds;
  double probe_release_seconds = kDefaultProbeReleaseSeconds;
  double scan_interval_seconds = 1;
  // With no rank to watch, /proc is scanned this often instead (new processes
  // still come at once through exec events; only rechecks wait longer).
  double idle_scan_interval_seconds = 2;
  double stats_interval_seconds = 1;
  uint32_t ringbuf_bytes = kDefaultRingbufKiB * 1024u;
  uint32_t usdt_spec_slots = kUsdtSpecSlots;
  std::string only_env;  // KEY=VALUE, or empty
  bool python_gc_probes = true;  // probe Python collectors (false: GC counts by polling only)
  std::map<std::string, bool> capabilities;  // held at start (CAP_BPF, ...), for /metrics
  StragglerOptions straggler;
  HangOptions hang;
  uint32_t python_sample_hz = kDefaultPythonSampleHz;  // 0: no Python stack sampling
  std::string sysfs_root = "/sys";  // where fs/cgroup is (a rank's memory cgroup, for OOM kills)
  bool force_raw_tp = false;  // --tp-flavour raw_tp: every tracepoint program as raw_tp
  // --uprobe-links: uprobe_multi links where the kernel has them, or required, or never.
  LoaderOptions::UprobeLinks uprobe_links = LoaderOptions::UprobeLinks::kAuto;
  // --pod-info, --pod-logs-dir, --container-logs-dir: the ranks' Kubernetes identity.
  pods::PodInfoMode pod_info = pods::PodInfoMode::kLogs;
  std::string pod_logs_dir = "/var/log/pods";
  std::string container_logs_dir = "/var/log/containers";
};

class AgentRuntime : public ApiSource {
 public:
  static Result<std::unique_ptr<AgentRuntime>> create(const AgentOptions& opts, const Clock& clock);
  // On any backend (tests replay recorded records through a fake one).
  static std::unique_ptr<AgentRuntime> with_backend(const AgentOptions& opts, const Clock& clock,
                                                    std::unique_ptr<BpfBackend> backend);
  ~AgentRuntime() override;

  void start();  // the event loop thread
  void stop();
  // One pass of the event loop: poll the ring buffer (up to poll_ms), discovery,
  // and, when due by the clock, aggregates, reaping and detection.
  void run_once(int poll_ms);
  Snapshot snapshot() const override;
  std::vector<DetectedEvent> events_since(double unix_seconds) const override { return events_.since(unix_seconds); }
  // An event found outside the runtime (the RDMA poller's link_degraded): the same
  // bounded, counted log serves it.
  void add_event(DetectedEvent ev) { events_.add(std::move(ev)); }
  // What the node's links look like now (the RDMA layer's ports: state and
  // degraded reasons), added to hang events: a stuck collective with no rank
  // missing is often a dead link. Called from the event loop.
  void set_link_state_provider(std::function<nlohmann::json()> provider) {
    std::lock_guard lock(counters_mu_);
    link_state_ = std::move(provider);
  }
  // The apiserver watch's names (--pod-info apiserver); set before start().
  void set_pod_name_source(std::shared_ptr<const pods::PodNameSource> source) { pods_.set_name_source(std::move(source)); }
  // Seconds since the event loop last went round: /healthz fails when stuck.
  double seconds_since_heartbeat() const override;
  // The node's timeline over the last `seconds` (GET /api/v1/trace), and the
  // CLOCK_MONOTONIC time it ends at.
  std::vector<TraceRank> trace(double seconds, uint64_t* end_ns) const override;
  StepHistory gpu_steps(int pid, size_t last) const override { return timeline_.step_history(pid, last); }
  uint64_t monotonic_ns() const override { return clock_.monotonic_ns(); }
  // Read on the caller's thread (the HTTP server's), never the event loop's.
  Result<python::PyStackDump, python::LocateFailure> python_stacks(int pid) const override;
  Result<std::string> python_profile(int pid, double seconds) const override;

 private:
  AgentRuntime(const AgentOptions& opts, const Clock& clock, std::unique_ptr<BpfBackend> loader);
  void loop();
  bool watching() const;     // a rank is tracked or a library is being parsed
  int next_wait_ms() const;  // the loop's wait before its next turn
  int poll_ring_buffers(int timeout_ms);  // records drained (0 on a failed poll)
  static constexpr double kBusyTurnSeconds = 0.05;
  static constexpr double kIdleTurnMaxSeconds = 2;  // well inside /healthz's stall limit
  // Busy turns in a row that drained nothing before the loop waits for the
  // next stats pass instead (its ranks are quiet: between steps, or idle).
  static constexpr int kQuietTurnsBeforeRest = 20;
  int quiet_turns_ = 0;  // the loop's own thread only
  void handle_record(const void* data, size_t size);
  void handle_event(DecodedEvent& ev);
  void track_found(const FoundProcess& f);
  bool is_worker_of_rank(const FoundProcess& f) const;
  void track_unmapped(int pid);
  void refresh_stats();
  void refresh_python();  // locate ranks' interpreters, configure py_procs, read GC counters
  void take_python_gc(int pid);
  void refresh_tcp();  // new TCP retransmits, attributed to ranks through their sockets
  void reap_vanished();
  using StealerComms = std::map<int, std::string>;  // stealer pid -> its comm now ("" unreadable), one pass
  void refresh_kernel_cpu_all();
  void refresh_kernel_cpu(int pid, const std::vector<StealerEntry>& entries, StealerComms& comms,
                          bool cgroup);  // its CPU stealers and its cgroup's cpu.stat
  std::string stealer_cgroup(int pid, uint64_t cgroup_id);
  void finish_process(int pid, std::optional<int> exit_code, const argus_exit_info* cause = nullptr);
  void watch_memcg(int pid);
  void resolve_kube_identity(int pid, const RankIdentity& identity);  // pod and GPU UUID, when first tracked
  void retry_pod_identities();  // the ranks whose pod was not (fully) named, a few more times
  void resolve_pod(int pid);
  std::string gpu_uuid_of(const RankIdentity& identity);
  ExitCause exit_cause(int pid, int exit_code, const argus_exit_info* info);
  void on_collective(const argus_nccl_coll_event& e);
  void on_call_done(const argus_call_done_event& e);
  std::string comm_name(int pid, uint64_t handle) const;  // "" when the communicator is unknown
  void on_gpu_batch(GpuBatch& b);  // takes its records
  std::string comm_key(int pid, uint64_t handle);
  int world_size_of(int pid) const;
  bool remember_comm(int pid, uint64_t handle, const std::string& name);
  void evaluate_detectors();
  void python_sampling_status(int pid, const std::string& why_not, const python::PyProcess* p);
  void add_python_evidence(DetectedEvent& ev, const std::vector<RankSignal>& signals, uint64_t now_ns) const;
  double now_s() const { return static_cast<double>(clock_.monotonic_ns()) / 1e9; }

  AgentOptions opts_;
  const Clock& clock_;
  std::unique_ptr<BpfBackend> loader_;
  double next_scan_ = 0, next_stats_ = 0;  // run_once: when discovery and the stats pass are due
  AgentCounters counters_;  // the agent's own counts (before the parts that count into it)
  std::unique_ptr<ProbeManager> probes_;
  std::unique_ptr<Discovery> discovery_;
  RankRegistry registry_;
  CollectiveTracker tracker_;
  SeqAligner aligner_;  // numbers late-attached ranks' collectives as their peers'
  std::map<int, std::set<uint64_t>> anchored_comms_;  // pid -> ncclComm_t whose init was seen
  StragglerDetector stragglers_;
  BubbleDetector bubbles_;
  HangDetector hangs_;
  NodeTimeline timeline_;
  std::map<int, double> step_seconds_;  // pid -> step period at the last evaluation
  EventLog events_;
  std::map<int, std::map<uint64_t, std::string>> comm_names_;  // pid -> ncclComm_t -> communicator name
  std::vector<CommSnapshot> comm_health_;  // guarded by counters_mu_
  std::map<int, RankDetection> detections_;
  std::set<int> workers_seen_;  // pids found to be a rank's forked workers (logged once)
  // Python stack sampling: per rank located by refresh_python (pid -> "" when
  // sampled, else why not; guarded by counters_mu_), their samples.
  std::map<int, std::string> py_status_;
  std::string py_sampling_error_;  // why the sampler could not start ("" when it did, or is off)
  python::ProfileStore profiles_;
  python::PySampler py_sampler_{profiles_};
  bool py_sampling_ = false;
  // Python ranks (event loop only).
  struct PyRank {
    std::optional<python::PyProcess> proc;
    std::unique_ptr<python::RemoteMemory> mem;
    uint64_t gc_stats_addr = 0;  // 0 until the interpreter is initialised
    double next_try = 0;         // when to try locating it again
    bool configured = false;     // its py_procs entry is written
    bool said = false;           // its refusal was logged
  };
  std::map<int, PyRank> py_ranks_;
  // Each rank's memory cgroup, found while it lives (a dead process's /proc
  // entry no longer names it), and its oom_kill count then (event loop only).
  struct MemcgWatch {
    procfs::CgroupDir dir;
    std::optional<uint64_t> oom_kills;
  };
  std::map<int, MemcgWatch> memcgs_;
  // Kernel layer (event loop only): a stealer's cgroup path by pid (with the
  // cgroup id it was read for), and the ranks whose cpu.stat was malformed
  // (counted once).
  std::map<int, std::pair<uint64_t, std::string>> stealer_cgroups_;
  std::set<int> cpu_stat_bad_;
  // Kubernetes identity (event loop only): the ranks still being named, and the
  // driver's GPU UUIDs by index (read once, at the first rank that needs them).
  pods::PodResolver pods_;
  struct PodTry {
    int tries = 0;
    double next_try = 0;
  };
  std::map<int, PodTry> pod_tries_;
  std::optional<std::vector<std::string>> gpu_uuids_;
  std::function<nlohmann::json()> link_state_;  // guarded by counters_mu_  // the last evaluation's verdicts by pid; guarded by counters_mu_

  mutable python::PythonLocator py_locator_;  // thread-safe; interpreter files cached by inode

  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> heartbeat_ns_{0};

  mutable std::mutex counters_mu_;
  std::map<uint32_t, uint64_t> bpf_errors_;  // by BPF error id
  python::PySampler::Stats py_sample_stats_;  // the sampler's, as of the last stats pass

  // TCP retransmits to ranks by socket inode (stats thread only), and those no rank owned.
  TcpRetransAttributor tcp_attr_{opts_.proc_root};
};

}  // namespace argus
