// The node's recent timeline: every rank's GPU records (gpu::Timeline) and the
// host calls the probes timed (collectives, synchronize waits). Fed by the
// event loop; read by exporters (metrics, trace) through copies. Thread-safe.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "bpf/argus.h"
#include "userspace/model/agent_counters.h"
#include "userspace/common/defaults.h"
#include "userspace/gpu_timeline/timeline.h"
#include "userspace/model/pid_scoped.h"
#include "userspace/model/snapshot.h"
#include "userspace/model/trace.h"

namespace argus {


struct NodeTimelineOptions {
  gpu::TimelineOptions gpu;
  double host_trace_seconds = kDefaultTraceSeconds;
  size_t max_host_spans = kDefaultMaxHostSpansPerRank;  // per rank
  size_t max_trace_spans = kDefaultMaxTraceAnswerSpans;  // per trace() answer, all ranks
  AgentCounters* caps = nullptr;  // also the GPU timelines' when gpu.caps is null
  // BPF sends a timed call's return only when it failed or took this long
  // (--span-min-us): a collective drawn from its entry says so.
  uint64_t span_min_us = ARGUS_SPAN_MIN_NS / 1000;
};

class NodeTimeline final : public PidScoped {
 public:
  explicit NodeTimeline(NodeTimelineOptions opts = {}) : opts_(opts) {
    if (opts_.gpu.caps == nullptr) opts_.gpu.caps = opts_.caps;
  }

  void on_gpu_name(int pid, uint32_t id, std::string name);
  // lost: records the producer dropped plus any BPF could not copy.
  void on_gpu_batch(int pid, std::vector<argus_gpu_rec> recs, uint64_t lost, double step_seconds);
  // A timed call returned. label: op or api name; comm: communicator name (collectives).
  // A collective's return completes the span its entry opened (same start), if any.
  void on_call(int pid, bool collective, const std::string& label, const std::string& comm, uint64_t start_ns,
               uint64_t end_ns, int ret);
  // A collective entered: drawn at once as a call that returned within
  // span_min_us, since BPF sends its return only when it was longer or failed.
  void on_collective_call(int pid, const std::string& label, const std::string& comm, uint64_t start_ns);
  // A collective entered: the first after a quiet gap starts a step (for the per-step sketches).
  void on_collective_enter(int pid, uint64_t ts_ns, double step_seconds);
  void forget(int pid);
  void retain(const std::set<int>& pids) override;  // forgets every other rank

  GpuRankView gpu_view(int pid, uint64_t now_ns) const;
  // The rank's last `last` per-step kernel summaries, oldest first, and its kernel names.
  StepHistory step_history(int pid, size_t last) const;
  // The spans of [from, to]: at most max_trace_spans, split evenly between the
  // ranks, each keeping its newest (a rank's left_out says how many went). Under
  // the lock only a bounded copy of plain records is taken; the spans are built
  // after it is released.
  std::vector<TraceRank> trace(uint64_t from_ns, uint64_t to_ns) const;

 private:
  struct HostSpan {
    bool collective;
    std::string label, comm;
    uint64_t start_ns, end_ns;
    int ret;
    bool return_unseen = false;  // entered, no return event yet: returned within span_min_us, or still running
  };
  struct Rank {
    explicit Rank(const gpu::TimelineOptions& o) : gpu(o) {}
    gpu::Timeline gpu;
    bool gpu_seen = false;
    uint64_t last_enter_ns = 0;
    std::deque<HostSpan> host;
  };
  // What trace() copies of one rank under the lock.
  struct RawTrace {
    int pid = 0;
    std::vector<argus_gpu_rec> gpu;
    std::vector<gpu::Timeline::Gap> gaps;
    std::vector<HostSpan> host;
    std::map<uint32_t, std::string> names;  // of the kernels copied
    size_t left_out = 0;
  };
  Rank& rank(int pid);
  void add_host_span(Rank& r, HostSpan span);
  static RawTrace copy_trace(int pid, const Rank& r, uint64_t from_ns, uint64_t to_ns, size_t budget);
  TraceRank build_trace(const RawTrace& raw) const;

  NodeTimelineOptions opts_;
  mutable std::mutex mu_;
  std::map<int, Rank> ranks_;
};

}  // namespace argus
