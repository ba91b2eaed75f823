// The agent's event loop and the parts it drives. One thread owns BPF,
// discovery and the state; every turn it drains the ring buffer (the event
// router hands each record on), runs discovery when due, and once a stats pass
// is due: the aggregates, the host collectors, the reaping of vanished ranks,
// the state's windows, the detection pass and the evidence its events need.
// The routes read snapshots (ApiSource) from their own threads.
#pragma once
#include <atomic>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "userspace/agent/call_feed.h"
#include "userspace/agent/config.h"
#include "userspace/agent/detection_pass.h"
#include "userspace/agent/event_router.h"
#include "userspace/agent/evidence.h"
#include "userspace/agent/rank_lifecycle.h"
#include "userspace/agent/snapshot_assembler.h"
#include "userspace/collectors/cgroup_cpu_collector.h"
#include "userspace/collectors/memcg_watch.h"
#include "userspace/collectors/pod_collector.h"
#include "userspace/collectors/python_collector.h"
#include "userspace/collectors/stuck_calls.h"
#include "userspace/collectors/tcp_collector.h"
#include "userspace/common/clock.h"
#include "userspace/comms/collective_tracker.h"
#include "userspace/comms/comm_names.h"
#include "userspace/comms/seq_aligner.h"
#include "userspace/detect/gpu_memory.h"
#include "userspace/discovery/discovery.h"
#include "userspace/events/event_log.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/api_source.h"
#include "userspace/model/host_collector.h"
#include "userspace/probes/bpf_backend.h"
#include "userspace/probes/probe_manager.h"
#include "userspace/registry/rank_registry.h"
#include "userspace/trace/node_timeline.h"

namespace argus {

class AgentRuntime final : public ApiSource {
 public:
  static Result<std::unique_ptr<AgentRuntime>> create(const AgentConfig& cfg, const Clock& clock);
  // On any backend (tests replay recorded records through a fake one).
  static std::unique_ptr<AgentRuntime> with_backend(const AgentConfig& cfg, const Clock& clock,
                                                    std::unique_ptr<BpfBackend> backend);
  ~AgentRuntime() override;

  // A collector of the node's own (RDMA ports, the kernel log), run with the
  // others; added before start(). Returns it.
  template <typename C>
  C* add_collector(std::unique_ptr<C> c) {
    C* raw = c.get();
    extra_collectors_.push_back(std::move(c));
    collectors_.push_back(raw);
    lifecycle_.add(raw);
    return raw;
  }
  // What the collectors that map to ranks read, and where they put events.
  const RankDirectory& ranks() const { return registry_; }
  EventSink& events() { return events_; }
  // What the node's links look like now, added to hang events.
  void set_link_state(std::function<nlohmann::json()> links) { evidence_.set_link_state(std::move(links)); }
  // The apiserver watch's names (--pod-info apiserver); set before start().
  void set_pod_name_source(std::shared_ptr<const pods::PodNameSource> source) { pods_.set_name_source(std::move(source)); }

  void start();  // the event loop's thread, and the collectors'
  void stop();
  // One turn of the event loop: the ring buffer (waiting up to poll_ms), discovery,
  // and, when due by the clock, the stats pass.
  void run_once(int poll_ms);

  // ApiSource.
  Snapshot snapshot() const override { return assembler_.snapshot(); }
  std::vector<DetectedEvent> events_since(double unix_seconds) const override { return events_.since(unix_seconds); }
  std::vector<TraceRank> trace(double seconds, uint64_t* end_ns) const override;
  StepHistory gpu_steps(int pid, size_t last) const override { return timeline_.step_history(pid, last); }
  double seconds_since_heartbeat() const override;
  uint64_t monotonic_ns() const override { return clock_.monotonic_ns(); }
  Result<python::PyStackDump, python::LocateFailure> python_stacks(int pid) const override {
    return python_.stacks(pid);
  }
  Result<std::string> python_profile(int pid, double seconds) const override { return python_.profile(pid, seconds); }

 private:
  AgentRuntime(const AgentConfig& cfg, const Clock& clock, std::unique_ptr<BpfBackend> bpf);
  int next_wait_ms() const;
  int poll_ring_buffers(int timeout_ms);  // records drained (0 on a failed poll)
  void scan(double now);
  void stats_pass(double now);
  void take_aggregates(double now);
  std::vector<InflightWait> blocked_calls() const;
  void detect();
  bool watching() const { return registry_.tracked_count() > 0 || probes_->parses_pending(); }
  double now_s() const { return static_cast<double>(clock_.monotonic_ns()) / 1e9; }

  // While ranks run the loop turns every kBusyTurnSeconds; with nothing to
  // watch, or ranks that sent nothing for kQuietTurnsBeforeRest turns, it waits
  // for the next thing due, at most kIdleTurnMaxSeconds (well inside /healthz's
  // stall limit).
  static constexpr double kBusyTurnSeconds = 0.05;
  // Where Python ranks' main threads are (their input waits) is looked at a
  // few times a second while the Python layer runs and follows a rank's
  // interpreter (other ranks let the loop rest as before).
  bool polls_input() const { return cfg_.python.sample_hz > 0 && python_.has_initialised_python(); }
  static constexpr double kIdleTurnMaxSeconds = 2;
  static constexpr int kQuietTurnsBeforeRest = 20;

  AgentConfig cfg_;
  const Clock& clock_;
  std::unique_ptr<BpfBackend> bpf_;
  AgentCounters counters_;  // before every part that counts into it
  // State.
  RankRegistry registry_;
  CommNames names_;
  ProcessGroups groups_;
  SeqAligner aligner_;
  CollectiveTracker tracker_;
  NodeTimeline timeline_;
  EventLog events_;
  OomReports ooms_;  // failed allocations waiting for their Python stack, and the causes of ends
  // Sources.
  std::unique_ptr<ProbeManager> probes_;
  std::unique_ptr<Discovery> discovery_;
  MemcgWatch memcgs_;
  CgroupCpuCollector cgroup_cpu_;
  PodCollector pods_;
  PythonCollector python_;
  TcpCollector tcp_;
  StuckCallCollector stuck_calls_;
  std::vector<std::unique_ptr<HostCollector>> extra_collectors_;
  std::vector<HostCollector*> collectors_;  // refreshed each stats pass, in this order
  // The loop's parts.
  RankLifecycle lifecycle_;
  CallFeed calls_;
  EventRouter router_;
  DetectionPass detection_;
  Evidence evidence_;
  SnapshotAssembler assembler_;

  std::string python_sampling_error_;  // said by start(): a start-up failure stays one line
  double next_scan_ = 0, next_stats_ = 0, next_input_poll_ = 0;
  std::minstd_rand look_rng_{std::random_device{}()};  // the input looks' intervals
  int quiet_turns_ = 0;  // the loop's own thread only
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> heartbeat_ns_{0};
};

}  // namespace argus
