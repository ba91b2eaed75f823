// docs/metrics.md documents every family the exporters can put on /metrics, and
// names no family they cannot. Without root: the exporters (collect_metrics,
// collect_rdma_metrics, xid_metrics, http_rejection_metrics, as app/agent_main.cpp
// joins them for GET /metrics) fed an empty and a fully populated snapshot, so
// that families hard to trigger live (OOM kills, Xid lines, throttling, HTTP
// rejections) are covered too. The live variant, as root, is
// tests/integration/metrics_doc_test.cpp.
#include <gtest/gtest.h>

#include <set>

#include "exporters/kernel_metrics.h"
#include "exporters/prometheus_exporter.h"
#include "exporters/rdma_metrics.h"
#include "tests/metrics_doc.h"
#include "userspace/model/agent_metrics.h"

namespace argus {
namespace {

using metrics_doc::documented_metrics;
using metrics_doc::exported_families;
using metrics_doc::Families;

const std::string kDoc = std::string(ARGUS_SOURCE_DIR) + "/docs/metrics.md";

// One identified rank with every per-rank part present, an exited one, a
// communicator, and an agent whose every map holds an entry.
Snapshot populated_snapshot() {
  Snapshot s;
  s.agent.version = "test";
  s.agent.node = "node-0";
  s.agent.probes = "deep";
  s.agent.counters.set(EventSource::kNccl, 10);
  s.agent.counters.set(EventSource::kGpu, 2);
  s.agent.events_lost = {{"gpu", 1}};
  s.agent.bpf_errors = {{"stats_map_full", 1}};
  s.agent.probe_attach_errors = {{"nccl", 1}};
  s.agent.probes_attached = {{"nccl", 20}, {"cuda", 12}, {"gpu", 2}};
  s.agent.probed_files = {{"nccl", 1}, {"cuda", 1}};
  s.agent.probe_files_released = 1;
  s.agent.usdt_spec_slots_used = 2;
  s.agent.usdt_spec_slots_limit = 1024;
  s.agent.probes_detaching = 1;
  add_to_log2(s.agent.probe_attach_delay["nccl"], 50'000'000);
  s.agent.capabilities = {{"CAP_BPF", true}, {"CAP_SYS_PTRACE", false}};
  s.agent.counters.set(SkipReason::kVanished, 3);
  s.agent.tracked_processes = 2;
  s.agent.counters.set(Cap::kKernelNames, 1);
  s.agent.counters.set(Cap::kDetectedEvents, 1);
  s.agent.counters.set(AgentCount::kRingbufPollErrors, 1);
  s.agent.python_gc_files = {{"usdt", 1}};
  s.agent.python_gc_unprobed_files = 1;
  s.agent.kernel_probes = {{"sched_switch", "tp_btf"}, {"mark_victim", "failed"}};
  s.agent.counters.set(AgentCount::kTcpUnattributed, 4);

  RankSnapshot r;
  r.pid = 4242;
  r.job_id = "job-a";
  r.rank = 1;
  r.local_rank = 1;
  r.world_size = 4;
  r.node = "node-0";
  r.nccl = {{"all_reduce", {10, 4096, 1000}}};
  r.sync = {{"cuStreamSynchronize", {5, 2000}}};
  r.kernel_launches = 50;
  r.launches_counted = true;
  r.launch_timing = {50, 50'000, {{10, 40}, {12, 10}}};
  r.memcpy = {{"htod", {2, 1024}}};
  r.cuda_errors = {{{"cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY"}, 1}};
  r.nccl_errors = {{{"ncclAllReduce", "ncclSystemError"}, 1}};
  r.collective_wait_ratio = 0.01;
  r.sync_wait_ratio = 0.4;
  r.arrival_lag_seconds = 0.04;
  r.step_seconds = 0.1;
  r.straggler = true;
  r.straggler_reason = StragglerReason::kHost;
  r.straggler_score = 1.5;
  r.pipeline_bubble = true;
  r.hang_missing = true;
  r.comm_seq = {{"c0ffee0000000000", 17}};
  r.gpu.seen = r.gpu.window_valid = true;
  r.gpu.busy_ratio = 0.8;
  r.gpu.nccl_ratio = 0.3;
  r.gpu.bubble_ratio = 0.1;
  r.gpu.records = r.gpu.kernels = 30;
  r.gpu.kernel_ns = r.gpu.nccl_kernel_ns = r.gpu.idle_ns = r.gpu.bubble_ns = 1000;
  r.gpu.lost = 1;
  r.gpu.memcpy_bytes = {{"htod", 4096}};
  r.gpu.step_summary_bytes = 75;
  r.gpu.steps_summarized = 3;
  r.python_gc.present = true;
  r.python_gc.version = "3.11.2";
  r.python_gc.anchor = "usdt";
  r.python_gc.collections = {5, 2, 1};
  r.python_gc.timed = 8;
  r.python_gc.ns = 80'000;
  r.python_gc.log2_buckets = {{14, 8}};
  r.offcpu.present = true;
  r.offcpu.offcpu_ns = {1, 2, 3, 4, 5};
  r.offcpu.oncpu_ns = 10;
  r.cgroup_cpu.present = true;
  r.cgroup_cpu.path = "/job-a";
  r.cgroup_cpu.periods = 10;
  r.cgroup_cpu.throttled_periods = 2;
  r.cgroup_cpu.throttled_seconds = 0.5;
  r.tcp_retransmits = {{"10.0.0.7", 3}};
  r.block_io = {{"write", {2, 100'000, {{17, 2}}}}};
  s.ranks.push_back(r);

  RankSnapshot dead = r;
  dead.pid = 4243;
  dead.rank = 2;
  dead.exited = true;
  dead.exit_reason = ExitReason::kOom;
  dead.exit_cause.signal = 9;
  dead.exit_cause.sender_pid = 0;
  dead.exit_cause.oom = true;
  s.ranks.push_back(dead);

  CommSnapshot c;
  c.job_id = "job-a";
  c.comm = "c0ffee0000000000";
  c.nranks = 4;
  c.ranks_here = 2;
  c.newest_seq = 17;
  c.stalled_seconds = 70;
  c.hung = true;
  c.missing_ranks = {2};
  s.comms.push_back(c);
  return s;
}

rdma::LinkSnapshot populated_links() {
  rdma::LinkSnapshot s;
  s.time_unix = 1'790'000'000;
  s.skips = {{"bad_counter", 1}};
  s.topology_available = true;
  s.gpus = {{0, "0000:13:00.0", 0}};
  rdma::DeviceSnapshot d;
  d.name = "mlx5_0";
  d.gpus = {{0, "0000:13:00.0", "pcie_switch"}};
  s.devices = {d};
  rdma::PortSnapshot p;
  p.device = "mlx5_0";
  p.port = 1;
  p.up = true;
  p.has_receive_bytes = p.has_transmit_bytes = p.has_transmit_wait = true;
  p.receive_bytes = p.transmit_bytes = 4096;
  p.transmit_wait = 7;
  p.rate_bytes_per_second = 50'000'000'000ULL;
  p.errors = {{"symbol_error", 12}};
  p.degraded = {"errors"};
  s.ports = {p};
  return s;
}

// Every family of GET /metrics, as app/agent_main.cpp puts them together.
Families families_on_metrics(const Snapshot& snap, const rdma::LinkSnapshot& links, const kmsg::XidCounts& xids,
                             const std::map<std::string, uint64_t>& rejections) {
  auto fams = collect_metrics(snap);
  for (auto& f : collect_rdma_metrics(links, {{"job-a", 1, 0, ""}})) fams.push_back(std::move(f));
  for (auto& f : xid_metrics(xids, true)) fams.push_back(std::move(f));
  fams.push_back(http_rejection_metrics(rejections));
  return exported_families(serialize_metrics(fams));
}

Families every_family() {
  Families all = families_on_metrics(Snapshot{}, rdma::LinkSnapshot{}, kmsg::XidCounts{}, {});
  kmsg::XidCounts xids;
  xids.errors = {{{"0000:3b:00", "79"}, 1}};
  xids.malformed = xids.lost = xids.dropped = 1;
  for (auto& kv : families_on_metrics(populated_snapshot(), populated_links(), xids, {{"unauthorized", 1}}))
    all.insert(kv);
  return all;
}

TEST(MetricsDoc, EveryExportedFamilyIsDocumented) {
  const auto doc = metrics_doc::read_file(kDoc);
  ASSERT_FALSE(doc.empty()) << kDoc;
  const Families exported = every_family();
  // The exporters' whole set, not a handful: each layer's families are there.
  for (const char* name : {"argus_rank_info", "argus_cuda_launch_duration_seconds", "argus_gpu_busy_ratio",
                           "argus_offcpu_seconds_total", "argus_ib_link_up", "argus_gpu_xid_errors_total",
                           "argus_agent_http_rejections_total", "argus_collective_stalled_seconds"})
    EXPECT_TRUE(exported.count(name)) << name;
  EXPECT_GE(exported.size(), 80u);
  EXPECT_EQ(metrics_doc::undocumented(exported, documented_metrics(doc)), "")
      << "families on /metrics that docs/metrics.md does not document (add a table row whose first cell is "
         "the name in backticks)";
}

// The reverse: a row for a family no exporter has is a typo or a row left behind.
TEST(MetricsDoc, EveryDocumentedFamilyIsExported) {
  const Families exported = every_family();
  std::string stale;
  for (const auto& name : documented_metrics(metrics_doc::read_file(kDoc)))
    if (name.rfind("argus_", 0) == 0 && !exported.count(name)) stale += "  " + name + "\n";
  EXPECT_EQ(stale, "") << "docs/metrics.md documents families no exporter has";
}

// The agent's own metrics, from the one table that declares them
// (userspace/model/agent_metrics.h): each row is documented with its labels as
// the table has them, the exporters put each row's family on /metrics with the
// table's type, and every argus_agent_* family the doc or the exporters name is
// a row of the table.
TEST(MetricsDoc, TheAgentMetricsTableIsWhatIsDocumentedAndExported) {
  const auto doc = metrics_doc::read_file(kDoc);
  const Families exported = every_family();
  const auto documented = documented_metrics(doc);
  std::set<std::string> rows;
  for (const AgentMetricSpec& m : kAgentMetrics) {
    rows.insert(m.name);
    const std::string span = std::string("`") + m.name + (*m.labels ? std::string("{") + m.labels + "}" : "") + "`";
    EXPECT_NE(doc.find("| " + span + " |"), std::string::npos) << "docs/metrics.md has no row " << span;
    const char* type = m.type == MetricKind::kCounter ? "counter" : m.type == MetricKind::kGauge ? "gauge" : "histogram";
    auto it = exported.find(m.name);
    ASSERT_NE(it, exported.end()) << m.name << " is in the table but on no /metrics";
    EXPECT_EQ(it->second, type) << m.name;
  }
  auto agents_own = [](const std::string& name) { return name.rfind("argus_agent_", 0) == 0; };
  for (const auto& name : documented) {
    if (agents_own(name)) {
      EXPECT_TRUE(rows.count(name)) << name << " is documented but not in the table";
    }
  }
  for (const auto& [name, type] : exported) {
    if (agents_own(name)) {
      EXPECT_TRUE(rows.count(name)) << name << " is exported but not in the table";
    }
  }
}

TEST(MetricsDoc, HistogramSeriesBelongToTheirFamilyAndUntypedSamplesCount) {
  const std::string text =
      "# HELP a_seconds A histogram.\n"
      "# TYPE a_seconds histogram\n"
      "a_seconds_bucket{le=\"1\"} 1\n"
      "a_seconds_sum 0.5\n"
      "a_seconds_count 1\n"
      "# TYPE b_total counter\n"
      "b_total{x=\"y\"} 3\n"
      "# TYPE c_count gauge\n"
      "c_count 1\n"
      "d_total 7\n"
      "b_total_sum 1\n";  // a counter has no _sum: its own (untyped) family
  const Families f = exported_families(text);
  EXPECT_EQ(f, (Families{{"a_seconds", "histogram"},
                         {"b_total", "counter"},
                         {"c_count", "gauge"},
                         {"d_total", "untyped"},
                         {"b_total_sum", "untyped"}}));
}

TEST(MetricsDoc, OnlyTheFirstCellOfATableRowDocuments) {
  const std::string md =
      "Prose that names `argus_prose_only` does not document it.\n"
      "| metric | type |\n"
      "|---|---|\n"
      "| `argus_with_labels{job_id,rank}` | gauge |\n"
      "| `argus_a_total`, `argus_b_total` | counter, see `argus_in_second_cell` |\n"
      "  | `argus_indented` | gauge |\n"
      "| `--listen ADDR` | flag, not a metric |\n"
      "| not code argus_plain | gauge |\n";
  EXPECT_EQ(documented_metrics(md),
            (std::set<std::string>{"argus_with_labels", "argus_a_total", "argus_b_total", "argus_indented"}));
  EXPECT_EQ(metrics_doc::undocumented({{"argus_a_total", "counter"}, {"argus_prose_only", "gauge"}},
                                      documented_metrics(md)),
            "  argus_prose_only (gauge)\n");
}

}  // namespace
}  // namespace argus
