// render_metrics: exact names, types, values, labels and escaping of the /metrics text.
// One file because nearly every test reads the rendering of the one make_snapshot() below,
// whose figures its expectations name.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/promtool_check.h"

#include "exporters/prometheus_exporter.h"

namespace argus {
namespace {

Snapshot make_snapshot() {
  Snapshot s;
  s.agent.version = "0.1.0";
  s.agent.window_seconds = 7.5;
  s.agent.node = "gpu-node-1";
  s.agent.probes = "default";
  s.agent.counters.set(EventSource::kNccl, 1000);
  s.agent.counters.set(EventSource::kCuda, 42);
  s.agent.events_lost = {{"nccl", 3}};
  s.agent.bpf_errors = {{"map_full", 2}};
  s.agent.probe_attach_errors = {{"libcuda.so.1", 1}};
  s.agent.probes_attached = {{"libnccl.so.2", 24}};
  s.agent.counters.set(SkipReason::kVanished, 5);
  s.agent.tracked_processes = 4;
  s.agent.counters.set(Cap::kStepSketchTime, 2);
  s.agent.counters.set(Cap::kDetectedEvents, 3);
  s.agent.counters.set(AgentCount::kRingbufPollErrors, 6);
  s.agent.counters.set(Numbering::kAnchored, 8);
  s.agent.counters.set(Numbering::kMatched, 3);
  s.agent.counters.set(AgentCount::kCollectivesUnnumbered, 45);
  add_to_log2(s.agent.probe_attach_delay["nccl"], 50'000'000);  // 50 ms: in [2^25, 2^26) ns
  add_to_log2(s.agent.probe_attach_delay["nccl"], 3'000'000'000);  // 3 s

  RankSnapshot r0;
  r0.pid = 100;
  r0.comm = "python3";
  r0.job_id = "job1";
  r0.rank = 0;
  r0.local_rank = 0;
  r0.world_size = 2;
  r0.local_world_size = 2;
  r0.node = "gpu-node-1";
  r0.nccl["all_reduce"] = {10, 4096, 1'500'000'000};
  r0.nccl["send"] = {2, 128, 250'000'000};
  r0.sync["cuStreamSynchronize"] = {5, 250'000'000};
  r0.cuda_errors[{"cuLaunchKernel", "CUDA_ERROR_OUT_OF_MEMORY"}] = 2;
  r0.process_group_calls[{"default_pg", "gloo", "all_reduce"}] = 390;
  r0.process_group_calls[{"pair_group", "gloo", "barrier"}] = 1;
  r0.nccl_errors[{"ncclAllReduce", "ncclSystemError"}] = 1;
  r0.collective_wait_ratio = 0.25;
  r0.sync_wait_ratio = 0.125;
  r0.kernel_launches = 999;  // not counted: must not be exported
  r0.launches_counted = false;
  r0.launch_timing.count = 7;  // not timed either
  r0.python_gc.present = true;  // probed: counts, seconds, pauses
  r0.python_gc.version = "3.12.1";
  r0.python_gc.anchor = "gc_collect_main";
  r0.python_gc.collections = {120, 11, 3};
  r0.python_gc.timed = 40;
  r0.python_gc.ns = 250'000'000;
  r0.python_gc.log2_buckets = {{17, 30}, {22, 9}, {36, 1}};  // ~100 us, ~4 ms, ~60 s
  r0.offcpu.present = true;  // the sched_switch probe follows it
  r0.offcpu.offcpu_ns = {1'500'000'000, 250'000'000, 0, 4'000'000'000, 5'000'000};
  r0.offcpu.oncpu_ns = 7'250'000'000;
  r0.cgroup_cpu.present = true;
  r0.cgroup_cpu.path = "/job1";
  r0.cgroup_cpu.periods = 500;
  r0.cgroup_cpu.throttled_periods = 120;
  r0.cgroup_cpu.throttled_seconds = 9.5;
  r0.memcpy["htod"] = {3, 12288};
  r0.memcpy["dtoh"] = {15, 960};
  r0.memcpy["dtod"] = {16, 69632};

  RankSnapshot r1;
  r1.pid = 101;
  r1.comm = "python3";
  r1.job_id = "job1";
  r1.rank = 1;
  r1.local_rank = 1;
  r1.world_size = 2;
  r1.node = "";  // falls back to the agent's node
  r1.launches_counted = true;
  r1.kernel_launches = 12345;
  // 10 launches of [2^14, 2^15) ns, 2 of [2^20, 2^21) ns, 1 of [2^40, 2^41) ns (beyond the last le).
  r1.python_gc.present = true;  // polling only: counts, no time
  r1.python_gc.version = "3.11.2";
  r1.python_gc.anchor = "none";
  r1.python_gc.collections = {5, 0, 1};
  r1.launch_timing.count = 13;
  r1.launch_timing.ns = 1'500'000'000;
  r1.launch_timing.log2_buckets = {{15, 10}, {21, 2}, {41, 1}};
  r1.exited = true;
  r1.exit_reason = ExitReason::kOom;
  r1.collective_wait_ratio = 0.5;

  RankSnapshot unknown;
  unknown.pid = 200;
  unknown.comm = "python3";
  unknown.nccl["all_reduce"] = {7, 7, 7};

  RankSnapshot half;  // job known, rank not: not exported per rank either
  half.pid = 201;
  half.job_id = "job1";
  half.sync["cuCtxSynchronize"] = {1, 1};

  RankSnapshot weird;
  weird.pid = 300;
  weird.job_id = "we\"ird\\job\nx";
  weird.rank = 2;
  weird.collective_wait_ratio = 0;

  s.ranks = {weird, unknown, r1, half, r0};
  return s;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// name -> type, from "# TYPE" lines; also checks every sample follows its TYPE line.
std::map<std::string, std::string> types_of(const std::vector<std::string>& lines) {
  std::map<std::string, std::string> types;
  std::string current;
  for (const auto& l : lines) {
    if (l.rfind("# TYPE ", 0) == 0) {
      std::istringstream in(l.substr(7));
      std::string name, type;
      in >> name >> type;
      EXPECT_EQ(types.count(name), 0u) << "TYPE twice: " << name;
      types[name] = type;
      current = name;
    } else if (l.rfind("# HELP ", 0) == 0) {
      continue;
    } else if (!l.empty()) {
      std::string name = l.substr(0, l.find_first_of("{ "));
      if (types[current] == "histogram") {
        for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
          if (name == current + suffix) name = current;
        }
      }
      EXPECT_EQ(name, current) << "sample outside its family: " << l;
    }
  }
  return types;
}

bool has_line(const std::vector<std::string>& lines, const std::string& want) {
  for (const auto& l : lines) {
    if (l == want) return true;
  }
  return false;
}

std::size_t count_prefix(const std::vector<std::string>& lines, const std::string& prefix) {
  std::size_t n = 0;
  for (const auto& l : lines) {
    if (l.rfind(prefix, 0) == 0) ++n;
  }
  return n;
}

TEST(PrometheusExporter, TypesAreExact) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  auto types = types_of(lines);
  const std::map<std::string, std::string> want = {
      {"argus_rank_info", "gauge"},
      {"argus_nccl_collectives_total", "counter"},
      {"argus_nccl_bytes_total", "counter"},
      {"argus_process_group_collectives_total", "counter"},
      {"argus_nccl_wait_seconds_total", "counter"},
      {"argus_cuda_sync_wait_seconds_total", "counter"},
      {"argus_cuda_sync_calls_total", "counter"},
      {"argus_cuda_kernel_launches_total", "counter"},
      {"argus_cuda_launch_seconds_total", "counter"},
      {"argus_cuda_launch_duration_seconds", "histogram"},
      {"argus_cuda_memcpy_bytes_total", "counter"},
      {"argus_cuda_memcpy_calls_total", "counter"},
      {"argus_cuda_errors_total", "counter"},
      {"argus_nccl_errors_total", "counter"},
      {"argus_collective_wait_ratio", "gauge"},
      {"argus_sync_wait_ratio", "gauge"},
      {"argus_rank_exits_total", "counter"},
      {"argus_nccl_arrival_lag_seconds", "gauge"},
      {"argus_straggler", "gauge"},
      {"argus_straggler_score", "gauge"},
      {"argus_hang_missing_rank", "gauge"},
      {"argus_step_seconds", "gauge"},
      {"argus_nccl_last_seq", "gauge"},
      {"argus_collective_stalled_seconds", "gauge"},
      {"argus_gpu_busy_ratio", "gauge"},
      {"argus_gpu_idle_seconds_total", "counter"},
      {"argus_pipeline_bubble_ratio", "gauge"},
      {"argus_pipeline_bubble_seconds_total", "counter"},
      {"argus_pipeline_bubble", "gauge"},
      {"argus_nccl_kernel_seconds_total", "counter"},
      {"argus_gpu_nccl_kernel_ratio", "gauge"},
      {"argus_gpu_kernel_seconds_total", "counter"},
      {"argus_gpu_records_total", "counter"},
      {"argus_gpu_records_lost_total", "counter"},
      {"argus_gpu_memcpy_bytes_total", "counter"},
      {"argus_gpu_step_summary_bytes", "gauge"},
      {"argus_agent_events_total", "counter"},
      {"argus_agent_events_lost_total", "counter"},
      {"argus_agent_tracked_processes", "gauge"},
      {"argus_agent_pod_lookups_total", "counter"},
      {"argus_agent_pod_source_skips_total", "counter"},
      {"argus_agent_pod_watch_errors_total", "counter"},
      {"argus_agent_probe_attach_errors_total", "counter"},
      {"argus_agent_probes_attached", "gauge"},
      {"argus_agent_probed_files", "gauge"},
      {"argus_agent_probe_files_released_total", "counter"},
      {"argus_agent_uprobe_links_info", "gauge"},
      {"argus_agent_usdt_spec_slots", "gauge"},
      {"argus_agent_probes_detaching", "gauge"},
      {"argus_agent_probe_attach_delay_seconds", "histogram"},
      {"argus_agent_kernel_probe_up", "gauge"},
      {"argus_tcp_retransmits_total", "counter"},
      {"argus_block_io_latency_seconds", "histogram"},
      {"argus_agent_tcp_retransmits_unattributed_total", "counter"},
      {"argus_offcpu_seconds_total", "counter"},
      {"argus_cpu_seconds_total", "counter"},
      {"argus_cpu_throttled_seconds_total", "counter"},
      {"argus_cpu_throttled_periods_total", "counter"},
      {"argus_cpu_periods_total", "counter"},
      {"argus_agent_capability", "gauge"},
      {"argus_agent_bpf_errors_total", "counter"},
      {"argus_agent_discovery_skips_total", "counter"},
      {"argus_agent_build_info", "gauge"},
      {"argus_agent_window_seconds", "gauge"},
      {"argus_agent_detected_events_dropped_total", "counter"},
      {"argus_agent_capped_total", "counter"},
      {"argus_agent_ringbuf_poll_errors_total", "counter"},
      {"argus_agent_collective_numbering_total", "counter"},
      {"argus_agent_collectives_unnumbered_total", "counter"},
      {"argus_agent_comms_unseen_total", "counter"},
      {"argus_agent_p2p_unpaired_total", "counter"},
      {"argus_python_gc_collections_total", "counter"},
      {"argus_python_gc_seconds_total", "counter"},
      {"argus_python_gc_pause_seconds", "histogram"},
      {"argus_python_info", "gauge"},
      {"argus_agent_python_gc_files", "gauge"},
      {"argus_agent_python_gc_unprobed_files_total", "counter"},
      {"argus_gpu_memory_held_bytes", "gauge"},
      {"argus_gpu_memory_peak_bytes", "gauge"},
      {"argus_gpu_memory_total_bytes", "gauge"},
      {"argus_gpu_memory_growth_bytes_per_second", "gauge"},
      {"argus_gpu_memory_allocations_total", "counter"},
      {"argus_gpu_memory_allocated_bytes_total", "counter"},
      {"argus_gpu_memory_alloc_failures_total", "counter"},
      {"argus_gpu_memory_frees_total", "counter"},
      {"argus_gpu_memory_freed_bytes_total", "counter"},
      {"argus_gpu_memory_unpaired_frees_total", "counter"},
      {"argus_gpu_memory_maps_total", "counter"},
      {"argus_gpu_memory_mapped_bytes_total", "counter"},
  };
  EXPECT_EQ(types, want);
  EXPECT_TRUE(has_line(lines, "# TYPE argus_nccl_collectives_total counter"));
  for (const auto& [name, type] : types) {
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0) {
      EXPECT_EQ(type, "counter") << name;
    }
    EXPECT_EQ(count_prefix(lines, "# HELP " + name + " "), 1u) << name;
  }
}

TEST(PrometheusExporter, SampleValues) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  for (const char* want : {
           R"(argus_rank_info{job_id="job1",rank="0",local_rank="0",world_size="2",pid="100",node="gpu-node-1"} 1)",
           R"(argus_rank_info{job_id="job1",rank="1",local_rank="1",world_size="2",pid="101",node="gpu-node-1"} 1)",
           R"(argus_nccl_collectives_total{job_id="job1",rank="0",op="all_reduce"} 10)",
           R"(argus_nccl_collectives_total{job_id="job1",rank="0",op="send"} 2)",
           R"(argus_process_group_collectives_total{job_id="job1",rank="0",group="default_pg",backend="gloo",op="all_reduce"} 390)",
           R"(argus_process_group_collectives_total{job_id="job1",rank="0",group="pair_group",backend="gloo",op="barrier"} 1)",
           R"(argus_nccl_bytes_total{job_id="job1",rank="0",op="all_reduce"} 4096)",
           R"(argus_nccl_wait_seconds_total{job_id="job1",rank="0",op="all_reduce"} 1.5)",
           R"(argus_nccl_wait_seconds_total{job_id="job1",rank="0",op="send"} 0.25)",
           R"(argus_cuda_sync_wait_seconds_total{job_id="job1",rank="0",api="cuStreamSynchronize"} 0.25)",
           R"(argus_cuda_sync_calls_total{job_id="job1",rank="0",api="cuStreamSynchronize"} 5)",
           R"(argus_cuda_kernel_launches_total{job_id="job1",rank="1"} 12345)",
           R"(argus_cuda_errors_total{job_id="job1",rank="0",api="cuLaunchKernel",code="CUDA_ERROR_OUT_OF_MEMORY"} 2)",
           R"(argus_nccl_errors_total{job_id="job1",rank="0",api="ncclAllReduce",code="ncclSystemError"} 1)",
           R"(argus_collective_wait_ratio{job_id="job1",rank="0"} 0.25)",
           R"(argus_collective_wait_ratio{job_id="job1",rank="1"} 0.5)",
           R"(argus_sync_wait_ratio{job_id="job1",rank="0"} 0.125)",
           R"(argus_agent_window_seconds 7.5)",
           R"(argus_agent_detected_events_dropped_total 3)",
           R"(argus_rank_exits_total{job_id="job1",rank="1",reason="oom"} 1)",
           R"(argus_agent_events_total{source="cuda"} 42)",
           R"(argus_agent_events_total{source="nccl"} 1000)",
           R"(argus_agent_events_lost_total{source="nccl"} 3)",
           R"(argus_agent_tracked_processes 4)",
           R"(argus_agent_probe_attach_errors_total{library="libcuda.so.1"} 1)",
           R"(argus_agent_probes_attached{library="libnccl.so.2"} 24)",
           R"(argus_agent_probe_attach_delay_seconds_count{library="nccl"} 2)",
           R"(argus_agent_probe_attach_delay_seconds_sum{library="nccl"} 3.05)",
           R"(argus_agent_probe_attach_delay_seconds_bucket{library="nccl",le="0.067108864"} 1)",
           R"(argus_agent_probe_attach_delay_seconds_bucket{library="nccl",le="4.294967296"} 2)",
           R"(argus_agent_probe_attach_delay_seconds_bucket{library="nccl",le="+Inf"} 2)",
           R"(argus_agent_bpf_errors_total{error="map_full"} 2)",
           R"(argus_agent_discovery_skips_total{reason="vanished"} 5)",
           R"(argus_agent_build_info{version="0.1.0"} 1)",
       }) {
    EXPECT_TRUE(has_line(lines, want)) << "missing: " << want;
  }
  // Launches only where counted; exits only for exited ranks.
  EXPECT_EQ(count_prefix(lines, "argus_cuda_kernel_launches_total{"), 1u);
  EXPECT_EQ(count_prefix(lines, "argus_rank_exits_total{"), 1u);
}

TEST(PrometheusExporter, HostCopiesByDirection) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  for (const char* want : {
           R"(argus_cuda_memcpy_bytes_total{job_id="job1",rank="0",direction="htod"} 12288)",
           R"(argus_cuda_memcpy_bytes_total{job_id="job1",rank="0",direction="dtoh"} 960)",
           R"(argus_cuda_memcpy_bytes_total{job_id="job1",rank="0",direction="dtod"} 69632)",
           R"(argus_cuda_memcpy_calls_total{job_id="job1",rank="0",direction="htod"} 3)",
           R"(argus_cuda_memcpy_calls_total{job_id="job1",rank="0",direction="dtoh"} 15)",
           R"(argus_cuda_memcpy_calls_total{job_id="job1",rank="0",direction="dtod"} 16)",
       }) {
    EXPECT_TRUE(has_line(lines, want)) << "missing: " << want;
  }
  EXPECT_EQ(count_prefix(lines, "argus_cuda_memcpy_bytes_total{"), 3u);
  EXPECT_EQ(count_prefix(lines, "argus_cuda_memcpy_calls_total{"), 3u);
}

TEST(PrometheusExporter, LaunchTimingOnlyWhereLaunchesAreTimed) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  // Rank 1 runs under --probes deep; rank 0 does not (no sample at all).
  EXPECT_TRUE(has_line(lines, R"(argus_cuda_launch_seconds_total{job_id="job1",rank="1"} 1.5)"));
  EXPECT_EQ(count_prefix(lines, "argus_cuda_launch_seconds_total{"), 1u);
  EXPECT_TRUE(has_line(lines, R"(argus_cuda_launch_duration_seconds_count{job_id="job1",rank="1"} 13)"));
  EXPECT_TRUE(has_line(lines, R"(argus_cuda_launch_duration_seconds_sum{job_id="job1",rank="1"} 1.5)"));
  EXPECT_EQ(count_prefix(lines, "argus_cuda_launch_duration_seconds_count{"), 1u);
  // le = 2^b ns for b = 10..30, then +Inf; cumulative.
  EXPECT_EQ(count_prefix(lines, R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le=)"), 22u);
  for (const char* want : {
           R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le="1.024e-06"} 0)",
           R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le="1.6384e-05"} 0)",
           R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le="3.2768e-05"} 10)",
           R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le="0.001048576"} 10)",
           R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le="0.002097152"} 12)",
           R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le="1.073741824"} 12)",
           R"(argus_cuda_launch_duration_seconds_bucket{job_id="job1",rank="1",le="+Inf"} 13)",
       }) {
    EXPECT_TRUE(has_line(lines, want)) << "missing: " << want;
  }
}

// TCP retransmits by remote and block I/O latency by op: summed over the
// processes of one (job_id, rank); none for a rank with none.
TEST(PrometheusExporter, NetAndBlockSeries) {
  Snapshot s;
  RankSnapshot a;
  a.pid = 10;
  a.job_id = "job1";
  a.rank = 0;
  a.tcp_retransmits = {{"10.0.0.7", 3}, {"fd00::7", 1}};
  LaunchTiming w;
  w.count = 3;
  w.ns = 3'000'000;
  w.log2_buckets = {{15, 1}, {20, 2}};  // [16, 32) us, [0.5, 1) ms
  a.block_io["write"] = w;
  RankSnapshot b = a;  // an older process of the same rank, exited
  b.pid = 9;
  b.exited = true;
  b.tcp_retransmits = {{"10.0.0.7", 2}};
  b.block_io.clear();
  LaunchTiming f;
  f.count = 1;
  f.ns = 40'000'000'000;  // 40 s: past the last bucket
  f.log2_buckets = {{36, 1}};
  b.block_io["flush"] = f;
  RankSnapshot idle;
  idle.pid = 11;
  idle.job_id = "job1";
  idle.rank = 1;
  s.ranks = {a, b, idle};
  s.agent.counters.set(AgentCount::kTcpUnattributed, 4);
  auto lines = lines_of(render_metrics(s));
  for (const char* want : {
           R"(argus_tcp_retransmits_total{job_id="job1",rank="0",remote="10.0.0.7"} 5)",
           R"(argus_tcp_retransmits_total{job_id="job1",rank="0",remote="fd00::7"} 1)",
           R"(argus_block_io_latency_seconds_count{job_id="job1",rank="0",op="write"} 3)",
           R"(argus_block_io_latency_seconds_sum{job_id="job1",rank="0",op="write"} 0.003)",
           R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="write",le="1.6384e-05"} 0)",
           R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="write",le="3.2768e-05"} 1)",
           R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="write",le="0.000524288"} 1)",
           R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="write",le="0.001048576"} 3)",
           R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="write",le="17.179869184"} 3)",
           R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="flush",le="17.179869184"} 0)",
           R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="flush",le="+Inf"} 1)",
           R"(argus_agent_tcp_retransmits_unattributed_total 4)",
       }) {
    EXPECT_TRUE(has_line(lines, want)) << "missing: " << want;
  }
  // le = 2^b ns for b = 14..34, then +Inf.
  EXPECT_EQ(count_prefix(lines, R"(argus_block_io_latency_seconds_bucket{job_id="job1",rank="0",op="write",le=)"), 22u);
  EXPECT_EQ(count_prefix(lines, "argus_tcp_retransmits_total{"), 2u);
  EXPECT_EQ(count_prefix(lines, R"(argus_block_io_latency_seconds_count{job_id="job1",rank="1")"), 0u);
}

// Off-CPU time by reason (all five once the probe follows the rank), CPU time,
// and the cgroup's throttling; nothing for a rank the probe does not follow.
TEST(PrometheusExporter, SchedSeries) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  for (const char* want : {
           R"(argus_offcpu_seconds_total{job_id="job1",rank="0",reason="runqueue"} 1.5)",
           R"(argus_offcpu_seconds_total{job_id="job1",rank="0",reason="io"} 0.25)",
           R"(argus_offcpu_seconds_total{job_id="job1",rank="0",reason="lock"} 0)",
           R"(argus_offcpu_seconds_total{job_id="job1",rank="0",reason="sleep"} 4)",
           R"(argus_offcpu_seconds_total{job_id="job1",rank="0",reason="other"} 0.005)",
           R"(argus_cpu_seconds_total{job_id="job1",rank="0"} 7.25)",
           R"(argus_cpu_throttled_seconds_total{job_id="job1",rank="0"} 9.5)",
           R"(argus_cpu_throttled_periods_total{job_id="job1",rank="0"} 120)",
           R"(argus_cpu_periods_total{job_id="job1",rank="0"} 500)",
       }) {
    EXPECT_TRUE(has_line(lines, want)) << "missing: " << want;
  }
  EXPECT_EQ(count_prefix(lines, "argus_offcpu_seconds_total{"), 5u);
  EXPECT_EQ(count_prefix(lines, R"(argus_cpu_seconds_total{job_id="job1",rank="1"})"), 0u);
  EXPECT_EQ(count_prefix(lines, R"(argus_cpu_periods_total{job_id="job1",rank="1"})"), 0u);
}

// Python GC: the interpreter's counters per generation for every Python rank;
// seconds and the pause histogram only where the collector is probed.
TEST(PrometheusExporter, PythonGcSeries) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  for (const char* want : {
           R"(argus_python_gc_collections_total{job_id="job1",rank="0",generation="0"} 120)",
           R"(argus_python_gc_collections_total{job_id="job1",rank="0",generation="1"} 11)",
           R"(argus_python_gc_collections_total{job_id="job1",rank="0",generation="2"} 3)",
           R"(argus_python_gc_collections_total{job_id="job1",rank="1",generation="2"} 1)",
           R"(argus_python_gc_seconds_total{job_id="job1",rank="0"} 0.25)",
           R"(argus_python_gc_pause_seconds_count{job_id="job1",rank="0"} 40)",
           R"(argus_python_gc_pause_seconds_sum{job_id="job1",rank="0"} 0.25)",
           R"(argus_python_gc_pause_seconds_bucket{job_id="job1",rank="0",le="4.096e-06"} 0)",
           R"(argus_python_gc_pause_seconds_bucket{job_id="job1",rank="0",le="0.000131072"} 30)",
           R"(argus_python_gc_pause_seconds_bucket{job_id="job1",rank="0",le="0.004194304"} 39)",
           R"(argus_python_gc_pause_seconds_bucket{job_id="job1",rank="0",le="17.179869184"} 39)",
           R"(argus_python_gc_pause_seconds_bucket{job_id="job1",rank="0",le="+Inf"} 40)",
           R"(argus_python_info{job_id="job1",rank="0",version="3.12.1",gc_anchor="gc_collect_main"} 1)",
           R"(argus_python_info{job_id="job1",rank="1",version="3.11.2",gc_anchor="none"} 1)",
       }) {
    EXPECT_TRUE(has_line(lines, want)) << "missing: " << want;
  }
  // le = 2^b ns for b = 12..34, then +Inf.
  EXPECT_EQ(count_prefix(lines, R"(argus_python_gc_pause_seconds_bucket{job_id="job1",rank="0",le=)"), 24u);
  // Polling only: no time is claimed.
  EXPECT_EQ(count_prefix(lines, R"(argus_python_gc_seconds_total{job_id="job1",rank="1"})"), 0u);
  EXPECT_EQ(count_prefix(lines, R"(argus_python_gc_pause_seconds_count{job_id="job1",rank="1"})"), 0u);
  EXPECT_EQ(count_prefix(lines, "argus_python_gc_collections_total{"), 6u);
}

TEST(PrometheusExporter, UnidentifiedProcessesAreNotExportedPerRank) {
  std::string text = render_metrics(make_snapshot());
  EXPECT_EQ(text.find("pid=\"200\""), std::string::npos);
  EXPECT_EQ(text.find("pid=\"201\""), std::string::npos);
  EXPECT_EQ(text.find("rank=\"-1\""), std::string::npos);
  EXPECT_EQ(text.find("job_id=\"\""), std::string::npos);
  EXPECT_EQ(text.find("cuCtxSynchronize"), std::string::npos);
  auto lines = lines_of(text);
  EXPECT_EQ(count_prefix(lines, "argus_rank_info{"), 3u);
  EXPECT_EQ(count_prefix(lines, "argus_nccl_collectives_total{"), 2u);
}

TEST(PrometheusExporter, LabelValuesAreEscaped) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  EXPECT_TRUE(has_line(lines, R"(argus_collective_wait_ratio{job_id="we\"ird\\job\nx",rank="2"} 0)"));
  for (const auto& l : lines) {
    // A raw newline inside a label value would have split a sample into two lines.
    if (!l.empty() && l[0] != '#') {
      EXPECT_EQ(l.rfind("argus_", 0), 0u) << l;
    }
  }
}

TEST(PrometheusExporter, RestartedRankSumsCountersAndUsesTheLiveProcess) {
  Snapshot s;
  s.agent.version = "0.1.0";
  RankSnapshot old_proc;
  old_proc.pid = 500;
  old_proc.job_id = "j";
  old_proc.rank = 3;
  old_proc.exited = true;
  old_proc.exit_reason = ExitReason::kSignal;
  old_proc.first_seen_unix = 100;
  old_proc.nccl["all_reduce"] = {5, 50, 0};
  old_proc.collective_wait_ratio = 0.9;
  old_proc.launches_counted = true;
  old_proc.kernel_launches = 10;
  RankSnapshot new_proc = old_proc;
  new_proc.pid = 501;
  new_proc.exited = false;
  new_proc.exit_reason = ExitReason::kNone;
  new_proc.first_seen_unix = 200;
  new_proc.nccl["all_reduce"] = {7, 70, 0};
  new_proc.collective_wait_ratio = 0.1;
  new_proc.kernel_launches = 1;
  s.ranks = {new_proc, old_proc};
  auto lines = lines_of(render_metrics(s));
  EXPECT_TRUE(has_line(lines, R"(argus_nccl_collectives_total{job_id="j",rank="3",op="all_reduce"} 12)"));
  EXPECT_TRUE(has_line(lines, R"(argus_nccl_bytes_total{job_id="j",rank="3",op="all_reduce"} 120)"));
  EXPECT_TRUE(has_line(lines, R"(argus_cuda_kernel_launches_total{job_id="j",rank="3"} 11)"));
  EXPECT_TRUE(has_line(lines, R"(argus_collective_wait_ratio{job_id="j",rank="3"} 0.1)"));
  EXPECT_TRUE(has_line(lines, R"(argus_rank_exits_total{job_id="j",rank="3",reason="signal"} 1)"));
  EXPECT_TRUE(has_line(lines, R"(argus_rank_info{job_id="j",rank="3",local_rank="",world_size="",pid="501",node=""} 1)"));
  EXPECT_EQ(count_prefix(lines, "argus_rank_info{"), 1u);
}

TEST(PrometheusExporter, DetectionFigures) {
  Snapshot s;
  RankSnapshot r;
  r.pid = 9;
  r.job_id = "llm-7";
  r.rank = 5;
  r.straggler = true;
  r.straggler_score = 1.5;
  r.arrival_lag_seconds = 0.25;
  r.hang_missing = true;
  r.step_seconds = 0.5;
  r.comm_seq["abc"] = 42;
  s.ranks.push_back(r);
  CommSnapshot c;
  c.job_id = "llm-7";
  c.comm = "abc";
  c.stalled_seconds = 12.5;
  s.comms.push_back(c);
  auto lines = lines_of(render_metrics(s));
  EXPECT_TRUE(has_line(lines, R"(argus_straggler{job_id="llm-7",rank="5"} 1)"));
  EXPECT_TRUE(has_line(lines, R"(argus_straggler_score{job_id="llm-7",rank="5"} 1.5)"));
  EXPECT_TRUE(has_line(lines, R"(argus_nccl_arrival_lag_seconds{job_id="llm-7",rank="5"} 0.25)"));
  EXPECT_TRUE(has_line(lines, R"(argus_hang_missing_rank{job_id="llm-7",rank="5"} 1)"));
  EXPECT_TRUE(has_line(lines, R"(argus_step_seconds{job_id="llm-7",rank="5"} 0.5)"));
  EXPECT_TRUE(has_line(lines, R"(argus_nccl_last_seq{job_id="llm-7",rank="5",comm="abc"} 42)"));
  EXPECT_TRUE(has_line(lines, R"(argus_collective_stalled_seconds{job_id="llm-7",comm="abc"} 12.5)"));
}

TEST(PrometheusExporter, GpuFiguresOfARankWithGpuRecords) {
  Snapshot s = make_snapshot();
  RankSnapshot* r = nullptr;
  for (auto& x : s.ranks)
    if (x.rank == 1) r = &x;
  ASSERT_NE(r, nullptr);
  r->exited = false;  // gauges speak for running ranks only
  r->gpu.seen = true;
  r->gpu.window_valid = true;
  r->gpu.busy_ratio = 0.625;
  r->gpu.bubble_ratio = 0.125;
  r->gpu.nccl_ratio = 0.25;
  r->gpu.nccl_kernel_ns = 1'500'000'000;
  r->gpu.kernel_ns = 4'000'000'000;
  r->gpu.idle_ns = 250'000'000;
  r->gpu.bubble_ns = 125'000'000;
  r->gpu.kernels = 900;
  r->gpu.memcpys = 3;
  r->gpu.lost = 2;
  r->gpu.memcpy_bytes["htod"] = 4096;
  r->gpu.steps_summarized = 10;
  r->gpu.step_summary_bytes = 96.5;
  r->pipeline_bubble = true;
  auto lines = lines_of(render_metrics(s));
  EXPECT_TRUE(has_line(lines, R"(argus_gpu_busy_ratio{job_id="job1",rank="1"} 0.625)"));
  EXPECT_TRUE(has_line(lines, R"(argus_pipeline_bubble_ratio{job_id="job1",rank="1"} 0.125)"));
  EXPECT_TRUE(has_line(lines, R"(argus_pipeline_bubble{job_id="job1",rank="1"} 1)"));
  EXPECT_TRUE(has_line(lines, R"(argus_nccl_kernel_seconds_total{job_id="job1",rank="1"} 1.5)"));
  EXPECT_TRUE(has_line(lines, R"(argus_gpu_idle_seconds_total{job_id="job1",rank="1"} 0.25)"));
  EXPECT_TRUE(has_line(lines, R"(argus_gpu_records_total{job_id="job1",rank="1",kind="kernel"} 900)"));
  EXPECT_TRUE(has_line(lines, R"(argus_gpu_records_lost_total{job_id="job1",rank="1"} 2)"));
  EXPECT_TRUE(has_line(lines, R"(argus_gpu_memcpy_bytes_total{job_id="job1",rank="1",direction="htod"} 4096)"));
  EXPECT_TRUE(has_line(lines, R"(argus_gpu_step_summary_bytes{job_id="job1",rank="1"} 96.5)"));
  // A rank without GPU records has no GPU series at all (not zeros that read as "idle").
  for (const auto& l : lines) EXPECT_EQ(l.find("argus_gpu_busy_ratio{job_id=\"job1\",rank=\"0\""), std::string::npos);
}

TEST(PrometheusExporter, EmptySnapshotStillListsFamilies) {
  Snapshot s;
  std::string text = render_metrics(s);
  auto lines = lines_of(text);
  EXPECT_EQ(types_of(lines).size(), 89u);  // + GPU memory (12), process-group calls, collective numbering (2), unseen comms, unpaired p2p, probe attach delay, uprobe links kind, pod lookups, pod source skips, pod watch errors, probed files, released, detaching, USDT slots, capped, poll errors, Python GC, kernel probes, TCP retransmits (2), block I/O, sched (5)
  EXPECT_TRUE(has_line(lines, "argus_agent_tcp_retransmits_unattributed_total 0"));
  EXPECT_TRUE(has_line(lines, "argus_agent_uprobe_links_info{kind=\"perf\"} 1"));
  EXPECT_TRUE(has_line(lines, "argus_agent_ringbuf_poll_errors_total 0"));
  EXPECT_TRUE(has_line(lines, "argus_agent_tracked_processes 0"));
  EXPECT_TRUE(has_line(lines, R"(argus_agent_build_info{version=""} 1)"));
}

// Every bound of the agent in one family, a series per structure; failed ring-buffer polls.
TEST(PrometheusExporter, CapsAndPollErrorsAreExported) {
  auto lines = lines_of(render_metrics(make_snapshot()));
  EXPECT_TRUE(has_line(lines, R"(argus_agent_capped_total{structure="step_sketch_time"} 2)"));
  EXPECT_TRUE(has_line(lines, R"(argus_agent_capped_total{structure="communicators"} 0)"));
  EXPECT_TRUE(has_line(lines, "argus_agent_ringbuf_poll_errors_total 6"));
  EXPECT_TRUE(has_line(lines, R"(argus_agent_collective_numbering_total{how="matched"} 3)"));
  EXPECT_TRUE(has_line(lines, "argus_agent_collectives_unnumbered_total 45"));
}

TEST(PrometheusExporter, LargeCountersKeepTheirDigits) {
  Snapshot s;
  RankSnapshot r;
  r.pid = 1;
  r.job_id = "j";
  r.rank = 0;
  r.nccl["all_gather"] = {1, 123'456'789'012ull, 3'600'000'000'000ull};
  s.ranks = {r};
  auto lines = lines_of(render_metrics(s));
  EXPECT_TRUE(has_line(lines, R"(argus_nccl_bytes_total{job_id="j",rank="0",op="all_gather"} 123456789012)"));
  EXPECT_TRUE(has_line(lines, R"(argus_nccl_wait_seconds_total{job_id="j",rank="0",op="all_gather"} 3600)"));
}

// gpu_uuid on argus_rank_info exactly where the registry resolved one (its
// decision is RankRegistry's test), on no other series.
TEST(PrometheusExporter, RankInfoCarriesTheGpuUuidWhereKnown) {
  const std::string uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  Snapshot s;
  s.agent.node = "n";
  auto rank = [](int r, const std::string& gpu_uuid) {
    RankSnapshot x;
    x.pid = 100 + r;
    x.job_id = "j";
    x.rank = r;
    x.local_rank = r;
    x.world_size = 4;
    x.node = "n";
    x.gpu_uuid = gpu_uuid;
    x.cuda_visible_devices = "0,1,2,3";  // the environment is not read here
    return x;
  };
  s.ranks = {rank(0, uuid), rank(1, "")};
  auto lines = lines_of(render_metrics(s));
  EXPECT_TRUE(has_line(lines, R"(argus_rank_info{job_id="j",rank="0",local_rank="0",world_size="4",pid="100",node="n",gpu_uuid=")" +
                                  uuid + R"("} 1)"));
  EXPECT_TRUE(has_line(lines, R"(argus_rank_info{job_id="j",rank="1",local_rank="1",world_size="4",pid="101",node="n"} 1)"));
  for (const auto& l : lines) {
    if (l.rfind("argus_rank_info", 0) != 0) {
      EXPECT_EQ(l.find("gpu_uuid"), std::string::npos) << l;
    }
  }
}

// Runs promtool's linter on the exposition when promtool is installed.
TEST(PrometheusExporter, PromtoolFindsNoProblems) {
  const char* promtool = "/usr/bin/promtool";
  if (::access(promtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  for (const Snapshot& snap : {make_snapshot(), Snapshot{}}) {
    auto [code, output] = argus::testing::promtool_check_metrics(promtool, render_metrics(snap));
    EXPECT_EQ(code, 0) << output;
    EXPECT_EQ(output, "");
  }
}

// Device memory: counters sum over a rank's processes; held, peak, total and
// growth are the running lead's, and nothing of a total never seen.
TEST(PrometheusExporter, GpuMemorySeries) {
  Snapshot s;
  RankSnapshot live;
  live.pid = 10;
  live.job_id = "mem";
  live.rank = 0;
  live.gpu_memory.held_bytes = 3 << 20;
  live.gpu_memory.peak_bytes = 5 << 20;
  live.gpu_memory.total_bytes = 80ull << 30;
  live.gpu_memory.allocations["cuMemAlloc"] = {4, 6 << 20};
  live.gpu_memory.allocations["cuMemCreate"] = {2, 4 << 20};
  live.gpu_memory.frees["cuMemFree"] = {1, 2 << 20};
  live.gpu_memory.maps["cuMemMap"] = {2, 4 << 20};
  live.gpu_memory.failures["CUDA_ERROR_OUT_OF_MEMORY"] = 2;
  live.gpu_memory.unpaired_frees = 1;
  live.gpu_memory_verdict.growth_bytes_per_second = 1024;
  RankSnapshot gone;  // an earlier process of the same rank
  gone.pid = 9;
  gone.job_id = "mem";
  gone.rank = 0;
  gone.exited = true;
  gone.gpu_memory.allocations["cuMemAlloc"] = {1, 1 << 20};
  gone.gpu_memory.held_bytes = 1 << 20;
  RankSnapshot other;  // never said its total
  other.pid = 11;
  other.job_id = "mem";
  other.rank = 1;
  other.gpu_memory.allocations["cuMemAllocAsync"] = {1, 1 << 20};
  other.gpu_memory.held_bytes = 1 << 20;
  s.ranks = {live, gone, other};
  auto lines = lines_of(render_metrics(s));
  for (const char* want : {
           R"(argus_gpu_memory_held_bytes{job_id="mem",rank="0"} 3145728)",
           R"(argus_gpu_memory_peak_bytes{job_id="mem",rank="0"} 5242880)",
           R"(argus_gpu_memory_total_bytes{job_id="mem",rank="0"} 85899345920)",
           R"(argus_gpu_memory_growth_bytes_per_second{job_id="mem",rank="0"} 1024)",
           R"(argus_gpu_memory_allocations_total{job_id="mem",rank="0",api="cuMemAlloc"} 5)",
           R"(argus_gpu_memory_allocations_total{job_id="mem",rank="0",api="cuMemCreate"} 2)",
           R"(argus_gpu_memory_allocated_bytes_total{job_id="mem",rank="0"} 11534336)",
           R"(argus_gpu_memory_frees_total{job_id="mem",rank="0",api="cuMemFree"} 1)",
           R"(argus_gpu_memory_freed_bytes_total{job_id="mem",rank="0"} 2097152)",
           R"(argus_gpu_memory_maps_total{job_id="mem",rank="0",api="cuMemMap"} 2)",
           R"(argus_gpu_memory_mapped_bytes_total{job_id="mem",rank="0",api="cuMemMap"} 4194304)",
           R"(argus_gpu_memory_alloc_failures_total{job_id="mem",rank="0",code="CUDA_ERROR_OUT_OF_MEMORY"} 2)",
           R"(argus_gpu_memory_unpaired_frees_total{job_id="mem",rank="0"} 1)",
           R"(argus_gpu_memory_held_bytes{job_id="mem",rank="1"} 1048576)",
       })
    EXPECT_TRUE(has_line(lines, want)) << want;
  for (const auto& l : lines) EXPECT_EQ(l.find(R"(argus_gpu_memory_total_bytes{job_id="mem",rank="1"})"), std::string::npos) << l;
}

}  // namespace
}  // namespace argus
