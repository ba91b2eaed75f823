// docs/metrics.md documents every family a live agent exports, as root: the
// agent with every layer that runs here (--probes deep, the kernel layer, the
// sim's GPU records, an InfiniBand fixture with a sick link, a Python rank)
// watching simulated jobs with the faults that make the conditional series
// appear (a straggler, a rank that exits and the hang it leaves, CUDA errors).
// Its /metrics is scraped once they have, and every family on it (each TYPE
// line; a histogram's _bucket/_sum/_count are its family) must have a row in
// docs/metrics.md (the convention: tests/metrics_doc.h). The exporter-level
// variant, without root, is tests/unit/metrics_doc_test.cpp.
#include "tests/integration/harness.h"
#include "tests/metrics_doc.h"

namespace argus::itest {
namespace {

// A Python rank (found by its interpreter and its launcher environment) that
// collects garbage: the Python layer's series.
constexpr const char* kGcLoop = "import gc, time\nwhile True:\n    gc.collect(0)\n    time.sleep(0.05)\n";

// Removes the fixture tree at the end (it lives on tmpfs, outside the test's dir).
struct RemoveTree {
  fs::path path;
  ~RemoveTree() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

TEST(MetricsDoc, EveryFamilyALiveAgentExportsIsDocumented) {
  ARGUS_REQUIRE_ROOT();
  const fs::path dir = make_temp_dir("metrics-doc");
  const std::string tag = std::to_string(::getpid());

  // The InfiniBand fixture first: the agent reads it as its --sysfs-root from the start.
  const fs::path sys = fs::path("/dev/shm") / ("argus-metrics-doc-" + tag);
  RemoveTree remove_sys{sys};
  Child fixture({bin("argus-sim"), "--ib-fixture", sys.string(), "--ib-only", "--ranks", "8", "--steps", "0",
                 "--step-ms", "100", "--degrade", "mlx5_0:1:errors@1", "--quiet"},
                dir / "fixture.log");
  ASSERT_TRUE(eventually([&] { return fs::exists(sys / "argus-sim-ib-truth.json"); }, 30s))
      << read_text(dir / "fixture.log");

  Agent agent(dir, {"--probes", "deep", "--sysfs-root", sys.string(), "--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();

  const std::string slow_job = "doc-slow-" + tag, exit_job = "doc-exit-" + tag, py_job = "doc-py-" + tag;
  Child slow(sim_args(dir / "slow", slow_job, 4, 0, {"--straggler", "2:3", "--cuda-errors", "0:2"}),
             dir / "slow.log");
  Child exits(sim_args(dir / "exit", exit_job, 3, 0, {"--exit", "1:20"}), dir / "exit.log");
  std::unique_ptr<Child> python;
  const std::string py = "/usr/bin/python3.11";
  if (fs::exists(py))
    python = std::make_unique<Child>(std::vector<std::string>{py, "-c", kGcLoop}, dir / "python.log",
                                     std::vector<std::string>{"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0",
                                                              "TORCHELASTIC_RUN_ID=" + py_job});
  else if (ci())
    FAIL() << "CI=true and " << py << " missing";

  // The series that only faults and busy layers make, each present before the scrape that counts.
  struct Wanted {
    std::string what, name;
    std::map<std::string, std::string> labels;
  };
  std::vector<Wanted> wanted = {
      {"the straggler named", "argus_straggler", {{"job_id", slow_job}, {"rank", "2"}}},
      {"deep probes time launches", "argus_cuda_launch_duration_seconds_count", {{"job_id", slow_job}}},
      {"CUDA errors", "argus_cuda_errors_total", {{"job_id", slow_job}, {"rank", "0"}}},
      {"GPU records", "argus_gpu_busy_ratio", {{"job_id", slow_job}}},
      {"the exited rank", "argus_rank_exits_total", {{"job_id", exit_job}, {"rank", "1"}}},
      {"the hang it leaves", "argus_hang_missing_rank", {{"job_id", exit_job}, {"rank", "1"}}},
      {"the off-CPU layer", "argus_offcpu_seconds_total", {{"job_id", slow_job}}},
      {"the IB counters", "argus_ib_port_receive_bytes_total", {{"device", "mlx5_0"}}},
      {"the sick link", "argus_ib_link_degraded", {{"device", "mlx5_0"}, {"reason", "errors"}}},
      {"ranks next to NICs", "argus_rank_nic_info", {{"job_id", slow_job}}},
  };
  if (python) wanted.push_back({"the Python rank", "argus_python_gc_collections_total", {{"job_id", py_job}}});
  std::string metrics;
  std::string absent;
  auto all_present = [&] {
    metrics = agent.get_text("/metrics");
    absent.clear();
    for (const auto& w : wanted) {
      const double v = metric_value(metrics, w.name, w.labels);
      // Flags must be raised (1); other series only present.
      const bool flag = w.name == "argus_straggler" || w.name == "argus_hang_missing_rank" ||
                        w.name == "argus_ib_link_degraded";
      if (v < 0 || (flag && v != 1)) absent += "  " + w.what + ": " + w.name + "\n";
    }
    return absent.empty();
  };
  EXPECT_TRUE(eventually(all_present, 120s)) << "not on /metrics yet:\n" << absent << agent.log();

  const auto families = metrics_doc::exported_families(metrics);
  EXPECT_GE(families.size(), 80u) << metrics;
  const auto documented = metrics_doc::documented_metrics(metrics_doc::read_file(std::string(ARGUS_SOURCE_DIR) +
                                                                                 "/docs/metrics.md"));
  EXPECT_EQ(metrics_doc::undocumented(families, documented), "")
      << "families on /metrics that docs/metrics.md does not document (add a table row whose first cell is "
         "the name in backticks)";
}

}  // namespace
}  // namespace argus::itest
