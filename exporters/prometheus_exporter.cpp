#include "exporters/prometheus_exporter.h"

#include "exporters/agent_metrics.h"
#include "exporters/kernel_metrics.h"
#include "exporters/metric_family.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include <prometheus/text_serializer.h>

namespace argus {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

constexpr double kNsPerSecond = 1e9;

// Buckets of argus_cuda_launch_duration_seconds: le = 2^b ns for b in this range
// (about 1 us to 1 s), from the BPF log2 histogram (bucket b: [2^(b-1), 2^b) ns).
constexpr uint32_t kLaunchBucketFirst = 10;
constexpr uint32_t kLaunchBucketLast = 30;

MetricFamily family(std::string name, std::string help, MetricType type) {
  return metric_family(std::move(name), std::move(help), type);
}

void add(MetricFamily& f, Labels labels, double value) { add_sample(f, std::move(labels), value); }

Labels with(const Labels& base, std::initializer_list<ClientMetric::Label> extra) {
  Labels l = base;
  l.insert(l.end(), extra.begin(), extra.end());
  return l;
}

std::string int_or_empty(int v) { return v < 0 ? std::string() : std::to_string(v); }

// The process whose gauges speak for a (job_id, rank): running first, then the newest.
const RankSnapshot* preferred(const std::vector<const RankSnapshot*>& members) {
  const RankSnapshot* best = nullptr;
  for (const auto* r : members) {
    if (!best) {
      best = r;
      continue;
    }
    auto key = [](const RankSnapshot* x) { return std::make_tuple(!x->exited, x->first_seen_unix, x->pid); };
    if (key(r) > key(best)) best = r;
  }
  return best;
}

// Buckets of argus_python_gc_pause_seconds: le = 2^b ns, about 4 us to 17 s.
constexpr uint32_t kGcBucketFirst = 12;
constexpr uint32_t kGcBucketLast = 34;

// The log2 histogram as cumulative Prometheus buckets (+Inf last).
void add_launch_histogram(MetricFamily& f, Labels labels, const LaunchTiming& t,
                          uint32_t first = kLaunchBucketFirst, uint32_t last = kLaunchBucketLast) {
  add_log2_histogram(f, std::move(labels), t, first, last);
}

}  // namespace

std::vector<MetricFamily> collect_metrics(const Snapshot& snap) {
  auto info = family("argus_rank_info", "A tracked training rank on this node (value 1).", MetricType::Gauge);
  auto coll = family("argus_nccl_collectives_total", "NCCL collective and point-to-point API calls.",
                     MetricType::Counter);
  auto bytes = family("argus_nccl_bytes_total", "NCCL payload bytes (count times datatype size).",
                      MetricType::Counter);
  auto coll_wait = family("argus_nccl_wait_seconds_total",
                          "Seconds spent inside NCCL API calls (entry to return).", MetricType::Counter);
  auto sync_wait = family("argus_cuda_sync_wait_seconds_total",
                          "Seconds blocked in CUDA synchronize calls.", MetricType::Counter);
  auto sync_calls = family("argus_cuda_sync_calls_total", "CUDA synchronize calls.", MetricType::Counter);
  auto launches = family("argus_cuda_kernel_launches_total",
                         "CUDA kernel launches (only where launches are counted: --probes deep).",
                         MetricType::Counter);
  auto cuda_err = family("argus_cuda_errors_total", "CUDA driver calls that returned an error.",
                         MetricType::Counter);
  auto launch_s = family("argus_cuda_launch_seconds_total",
                         "Host time inside CUDA kernel-launch calls (only where launches are timed: --probes deep).",
                         MetricType::Counter);
  auto launch_hist = family("argus_cuda_launch_duration_seconds",
                            "Host time inside one CUDA kernel-launch call (only where launches are timed: --probes "
                            "deep).",
                            MetricType::Histogram);
  auto gc_colls = family("argus_python_gc_collections_total",
                         "Python garbage collections by generation: the interpreter's own counters (gc.get_stats()).",
                         MetricType::Counter);
  auto gc_secs = family("argus_python_gc_seconds_total",
                        "Seconds inside the Python garbage collector (where its collector is probed).",
                        MetricType::Counter);
  auto gc_hist = family("argus_python_gc_pause_seconds",
                        "One Python garbage collection's pause (where its collector is probed).",
                        MetricType::Histogram);
  auto py_info = family("argus_python_info",
                        "A rank runs Python (value 1): its version, and how its GC is followed (gc_anchor: "
                        "gc_collect_main, usdt or pygc_collect_call probed; none: counts by polling only).",
                        MetricType::Gauge);
  auto copy_bytes = family("argus_cuda_memcpy_bytes_total",
                           "Bytes passed to the CUDA host copy APIs (cuMemcpyHtoD/DtoH/DtoD and their Async "
                           "variants), by direction.",
                           MetricType::Counter);
  auto copy_calls = family("argus_cuda_memcpy_calls_total",
                           "Calls of the CUDA host copy APIs (cuMemcpyHtoD/DtoH/DtoD and their Async variants), by "
                           "direction.",
                           MetricType::Counter);
  auto nccl_err = family("argus_nccl_errors_total", "NCCL calls that returned an error.", MetricType::Counter);
  auto ratio = family("argus_collective_wait_ratio",
                      "Share of wall time blocked inside NCCL collective calls, last window (near 0 on real "
                      "NCCL, whose calls only enqueue).",
                      MetricType::Gauge);
  auto sync_ratio = family("argus_sync_wait_ratio",
                           "Share of wall time blocked in CUDA synchronize (stream, event, context), last window.",
                           MetricType::Gauge);
  auto exits = family("argus_rank_exits_total", "Rank processes that ended, by reason: exit, signal (a fatal signal), oom (the OOM killer, or an error exit after a GPU out-of-memory).", MetricType::Counter);
  auto lag = family("argus_nccl_arrival_lag_seconds",
                    "Mean lag behind the earliest rank of this node at the same collective, last window.",
                    MetricType::Gauge);
  auto straggler = family("argus_straggler", "1 while this rank is a straggler.", MetricType::Gauge);
  auto score = family("argus_straggler_score", "How much slower than the median rank (0 = on time).",
                      MetricType::Gauge);
  auto missing = family("argus_hang_missing_rank",
                        "1 while this rank has not reached a collective its peers sit in.", MetricType::Gauge);
  auto step = family("argus_step_seconds", "Step time from the period of the collective pattern (0 = unknown).",
                     MetricType::Gauge);
  auto last_seq = family("argus_nccl_last_seq",
                         "Number of the newest collective this rank entered on a communicator.", MetricType::Gauge);
  auto stalled = family("argus_collective_stalled_seconds",
                        "How long the communicator's newest collective has waited for missing ranks (0 when moving).",
                        MetricType::Gauge);

  auto gpu_busy = family("argus_gpu_busy_ratio", "Share of the last window with a kernel running on the rank's GPU.",
                         MetricType::Gauge);
  auto gpu_idle = family("argus_gpu_idle_seconds_total", "GPU idle time between kernels inside steps.",
                         MetricType::Counter);
  auto bubble = family("argus_pipeline_bubble_ratio",
                       "Share of the last window the GPU sat idle before a pipeline P2P receive.", MetricType::Gauge);
  auto bubble_s = family("argus_pipeline_bubble_seconds_total",
                         "GPU idle time that ended at a pipeline P2P kernel.", MetricType::Counter);
  auto nccl_kernel = family("argus_nccl_kernel_seconds_total", "GPU time in NCCL kernels.", MetricType::Counter);
  auto nccl_kernel_ratio = family("argus_gpu_nccl_kernel_ratio",
                                  "Share of the last window with an NCCL kernel running (long while waiting for a "
                                  "late peer).",
                                  MetricType::Gauge);
  auto gpu_kernel = family("argus_gpu_kernel_seconds_total", "GPU time in kernels (all kernels).",
                           MetricType::Counter);
  auto gpu_records = family("argus_gpu_records_total", "GPU activity records received, by kind.",
                            MetricType::Counter);
  auto gpu_lost = family("argus_gpu_records_lost_total",
                         "GPU activity records lost before the agent (producer buffer full, truncated batch).",
                         MetricType::Counter);
  auto gpu_copy = family("argus_gpu_memcpy_bytes_total", "Bytes the GPU copied, by direction.", MetricType::Counter);
  auto sketch = family("argus_gpu_step_summary_bytes",
                       "Bytes of the per-step kernel-duration summary kept per step (mean of the last 100 steps).",
                       MetricType::Gauge);
  auto bubble_flag = family("argus_pipeline_bubble", "1 while this rank's pipeline bubbles stand out.",
                            MetricType::Gauge);

  // Identified ranks grouped by (job_id, rank), in that order.
  std::map<std::pair<std::string, int>, std::vector<const RankSnapshot*>> groups;
  for (const auto& r : snap.ranks) {
    if (r.identified()) groups[{r.job_id, r.rank}].push_back(&r);
  }

  // GPU counters sum over the processes of a (job_id, rank); gauges come from the lead.
  auto add_gpu = [&](const std::vector<const RankSnapshot*>& members, const RankSnapshot& lead, const Labels& base) {
    GpuRankView sum;
    for (const auto* r : members) {
      const auto& g = r->gpu;
      if (!g.seen) continue;
      sum.seen = true;
      sum.idle_ns += g.idle_ns;
      sum.bubble_ns += g.bubble_ns;
      sum.nccl_kernel_ns += g.nccl_kernel_ns;
      sum.kernel_ns += g.kernel_ns;
      sum.kernels += g.kernels;
      sum.memcpys += g.memcpys;
      sum.memsets += g.memsets;
      sum.lost += g.lost;
      for (const auto& [dir, b] : g.memcpy_bytes) sum.memcpy_bytes[dir] += b;
    }
    if (!sum.seen) return;
    add(gpu_idle, base, static_cast<double>(sum.idle_ns) / kNsPerSecond);
    add(bubble_s, base, static_cast<double>(sum.bubble_ns) / kNsPerSecond);
    add(nccl_kernel, base, static_cast<double>(sum.nccl_kernel_ns) / kNsPerSecond);
    add(gpu_kernel, base, static_cast<double>(sum.kernel_ns) / kNsPerSecond);
    add(gpu_records, with(base, {{"kind", "kernel"}}), static_cast<double>(sum.kernels));
    add(gpu_records, with(base, {{"kind", "memcpy"}}), static_cast<double>(sum.memcpys));
    add(gpu_records, with(base, {{"kind", "memset"}}), static_cast<double>(sum.memsets));
    add(gpu_lost, base, static_cast<double>(sum.lost));
    for (const auto& [dir, b] : sum.memcpy_bytes) add(gpu_copy, with(base, {{"direction", dir}}), static_cast<double>(b));
    const auto& g = lead.gpu;
    if (g.window_valid && !lead.exited) {
      add(gpu_busy, base, g.busy_ratio);
      add(bubble, base, g.bubble_ratio);
      add(nccl_kernel_ratio, base, g.nccl_ratio);
    }
    if (g.steps_summarized > 0) add(sketch, base, g.step_summary_bytes);
    add(bubble_flag, base, lead.pipeline_bubble ? 1 : 0);
  };

  for (auto& [key, members] : groups) {
    std::sort(members.begin(), members.end(),
              [](const RankSnapshot* a, const RankSnapshot* b) { return a->pid < b->pid; });
    const Labels base{{"job_id", key.first}, {"rank", std::to_string(key.second)}};
    const RankSnapshot* lead = preferred(members);

    Labels info_labels = with(base, {{"local_rank", int_or_empty(lead->local_rank)},
                                     {"world_size", int_or_empty(lead->world_size)},
                                     {"pid", std::to_string(lead->pid)},
                                     {"node", lead->node.empty() ? snap.agent.node : lead->node}});
    // gpu_uuid only where known (CONTRACT): as the registry decided it (the
    // environment's UUID, or the index's through the driver's files).
    if (!lead->gpu_uuid.empty()) info_labels.push_back({"gpu_uuid", lead->gpu_uuid});
    // The Kubernetes identity, on the info metric only (join on job_id, rank for it).
    const PodIdentityView& pod = lead->pod;
    if (!pod.namespace_name.empty()) info_labels.push_back({"namespace", pod.namespace_name});
    if (!pod.pod.empty()) info_labels.push_back({"pod", pod.pod});
    if (!pod.container.empty()) info_labels.push_back({"container", pod.container});
    add(info, std::move(info_labels), 1);

    std::map<std::string, OpCounters> nccl;
    std::map<std::string, SyncCounters> sync;
    std::map<std::pair<std::string, std::string>, uint64_t> cerr, nerr;
    std::map<std::string, uint64_t> exit_reasons;
    uint64_t launch_count = 0;
    bool counted = false;
    LaunchTiming timing;
    std::map<std::string, CopyCounters> copies;
    std::array<uint64_t, 3> gc_counts{};
    LaunchTiming gc_timing;
    bool gc_present = false;
    for (const auto* r : members) {
      if (r->python_gc.present) {
        gc_present = true;
        for (size_t g = 0; g < 3; ++g) gc_counts[g] += r->python_gc.collections[g];
        gc_timing.count += r->python_gc.timed;
        gc_timing.ns += r->python_gc.ns;
        for (const auto& [b, n] : r->python_gc.log2_buckets) gc_timing.log2_buckets[b] += n;
      }
      for (const auto& [op, c] : r->nccl) {
        auto& t = nccl[op];
        t.calls += c.calls;
        t.bytes += c.bytes;
        t.wait_ns += c.wait_ns;
      }
      for (const auto& [api, c] : r->sync) {
        auto& t = sync[api];
        t.calls += c.calls;
        t.wait_ns += c.wait_ns;
      }
      for (const auto& [k, v] : r->cuda_errors) cerr[k] += v;
      for (const auto& [k, v] : r->nccl_errors) nerr[k] += v;
      if (r->launches_counted) {
        counted = true;
        launch_count += r->kernel_launches;
        timing.count += r->launch_timing.count;
        timing.ns += r->launch_timing.ns;
        for (const auto& [b, n] : r->launch_timing.log2_buckets) timing.log2_buckets[b] += n;
      }
      for (const auto& [dir, c] : r->memcpy) {
        auto& t = copies[dir];
        t.calls += c.calls;
        t.bytes += c.bytes;
      }
      // The contract's reasons only: exit, signal, oom (a rank whose end was not seen exited).
      if (r->exited) exit_reasons[r->exit_reason == ExitReason::kNone ? label_of(ExitReason::kExit) : label_of(r->exit_reason)] += 1;
    }

    for (const auto& [op, c] : nccl) {
      add(coll, with(base, {{"op", op}}), static_cast<double>(c.calls));
      add(bytes, with(base, {{"op", op}}), static_cast<double>(c.bytes));
      add(coll_wait, with(base, {{"op", op}}), static_cast<double>(c.wait_ns) / kNsPerSecond);
    }
    for (const auto& [api, c] : sync) {
      add(sync_wait, with(base, {{"api", api}}), static_cast<double>(c.wait_ns) / kNsPerSecond);
      add(sync_calls, with(base, {{"api", api}}), static_cast<double>(c.calls));
    }
    if (counted) {
      add(launches, base, static_cast<double>(launch_count));
      add(launch_s, base, static_cast<double>(timing.ns) / kNsPerSecond);
      add_launch_histogram(launch_hist, base, timing);
    }
    if (gc_present) {
      for (size_t g = 0; g < 3; ++g)
        add(gc_colls, with(base, {{"generation", std::to_string(g)}}), static_cast<double>(gc_counts[g]));
      const std::string anchor = lead->python_gc.anchor.empty() ? "none" : lead->python_gc.anchor;
      add(py_info, with(base, {{"version", lead->python_gc.version}, {"gc_anchor", anchor}}), 1);
      if (anchor != "none") {
        add(gc_secs, base, static_cast<double>(gc_timing.ns) / kNsPerSecond);
        add_launch_histogram(gc_hist, base, gc_timing, kGcBucketFirst, kGcBucketLast);
      }
    }
    for (const auto& [dir, c] : copies) {
      add(copy_bytes, with(base, {{"direction", dir}}), static_cast<double>(c.bytes));
      add(copy_calls, with(base, {{"direction", dir}}), static_cast<double>(c.calls));
    }
    for (const auto& [k, v] : cerr) add(cuda_err, with(base, {{"api", k.first}, {"code", k.second}}), static_cast<double>(v));
    for (const auto& [k, v] : nerr) add(nccl_err, with(base, {{"api", k.first}, {"code", k.second}}), static_cast<double>(v));
    add(ratio, base, lead->collective_wait_ratio);
    add(sync_ratio, base, lead->sync_wait_ratio);
    add(lag, base, lead->arrival_lag_seconds);
    add(straggler, base, lead->straggler ? 1 : 0);
    add(score, base, lead->straggler_score);
    add(missing, base, lead->hang_missing ? 1 : 0);
    add(step, base, lead->step_seconds);
    for (const auto& [comm, seq] : lead->comm_seq) add(last_seq, with(base, {{"comm", comm}}), static_cast<double>(seq));
    for (const auto& [reason, n] : exit_reasons) add(exits, with(base, {{"reason", reason}}), static_cast<double>(n));
    add_gpu(members, *lead, base);
  }

  for (const auto& c : snap.comms) {
    if (c.job_id.empty()) continue;
    add(stalled, {{"job_id", c.job_id}, {"comm", c.comm}}, c.stalled_seconds);
  }

  std::vector<MetricFamily> out;
  out.reserve(70);
  for (auto* f : {&info, &coll, &bytes, &coll_wait, &sync_wait, &sync_calls, &launches, &launch_s, &launch_hist, &cuda_err,
                  &copy_bytes, &copy_calls, &nccl_err, &gc_colls, &gc_secs, &gc_hist, &py_info, &ratio, &sync_ratio, &exits,
                  &lag, &straggler, &score, &missing, &step, &last_seq, &stalled, &gpu_busy, &gpu_idle, &bubble,
                  &bubble_s, &bubble_flag, &nccl_kernel, &nccl_kernel_ratio, &gpu_kernel, &gpu_records, &gpu_lost,
                  &gpu_copy, &sketch}) {
    out.push_back(std::move(*f));
  }
  append_agent_metrics(snap.agent, out);
  const auto rank_group_list = rank_groups(snap);
  append_sched_metrics(rank_group_list, out);
  append_net_metrics(rank_group_list, out);
  append_framework_metrics(rank_group_list, out);
  append_gpu_memory_metrics(rank_group_list, out);
  return out;
}

MetricFamily http_rejection_metrics(const std::map<std::string, uint64_t>& by_reason) {
  auto f = agent_family(AgentMetric::kHttpRejections);
  for (const auto& [reason, n] : by_reason) add(f, {{"reason", reason}}, static_cast<double>(n));
  return f;
}

std::string serialize_metrics(const std::vector<MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

std::string render_metrics(const Snapshot& snap) { return serialize_metrics(collect_metrics(snap)); }

}  // namespace argus
