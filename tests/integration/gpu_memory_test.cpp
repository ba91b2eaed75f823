// Device memory end to end on the real kernel: the allocations, frees and maps
// of every call family (the simulator's caching allocator over cuMemAlloc,
// cuMemAllocFromPoolAsync and the virtual memory API) counted exactly as each
// rank recorded them; an out-of-memory named with the rank, the sizes and the
// Python stack where it failed, and given as the cause of the end that
// follows; a leak said to grow, and a rank near its GPU's total flagged before
// it fails.
#include <fstream>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

// The agent's gpu_memory of a rank against the truth's: every table exactly.
std::string diff_gpu_memory(const json& t, const json& a) {
  const json& want = t.at("gpu_memory");
  const json got = a.value("gpu_memory", json());
  if (!got.is_object()) return " no gpu_memory";
  std::string d;
  for (const char* table : {"allocations", "frees", "maps"})
    if (got.value(table, json::object()) != want.value(table, json::object()))
      d += std::string(" ") + table + " " + got.value(table, json::object()).dump() + "!=" +
           want.value(table, json::object()).dump();
  if (got.value("failures", json::object()) != want.value("failures", json::object()))
    d += " failures " + got.value("failures", json::object()).dump() + "!=" + want.at("failures").dump();
  if (got.value("unpaired_frees", -1) != 0) d += " unpaired " + got.value("unpaired_frees", json()).dump();
  if (got.value("peak_bytes", json()) != want.at("peak_bytes"))
    d += " peak " + got.value("peak_bytes", json()).dump() + "!=" + want.at("peak_bytes").dump();
  if (got.value("total_bytes", json()) != want.at("total_bytes"))
    d += " total " + got.value("total_bytes", json()).dump() + "!=" + want.at("total_bytes").dump();
  return d;
}

uint64_t sum_bytes(const json& table) {
  uint64_t n = 0;
  for (const auto& [api, c] : table.items()) n += c.at("bytes").get<uint64_t>();
  return n;
}

TEST(GpuMemory, EveryCallFamilyCountedExactlyAsTheRanksRecordedIt) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpumem");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  // The three families at once, one job each; a leaking rank in the classic one.
  const std::vector<std::pair<std::string, std::vector<std::string>>> jobs = {
      {"mem-classic", {"--mem-api", "classic", "--mem-leak", "1:4M"}},
      {"mem-async", {"--mem-api", "async"}},
      {"mem-vmm", {"--mem-api", "vmm", "--gpu-mem-mb", "8192"}},
  };
  std::vector<std::unique_ptr<Child>> sims;
  for (const auto& [job, extra] : jobs)
    sims.push_back(std::make_unique<Child>(sim_args(dir / job, job, 2, 10, extra), dir / (job + ".log")));
  for (size_t i = 0; i < sims.size(); ++i) {
    auto st = sims[i]->wait_for(120s);
    ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / (jobs[i].first + ".log"));
  }
  const std::string metrics_before = agent.get_text("/metrics");
  for (const auto& [job, extra] : jobs) {
    SCOPED_TRACE(job);
    const auto truth = read_truth(dir / job);
    ASSERT_EQ(truth.size(), 2u);
    EXPECT_EQ(wait_for_truth(agent, truth, diff_gpu_memory), "") << agent.log();
    const std::string metrics = agent.get_text("/metrics");
    auto doc = agent.get_json("/api/v1/ranks");
    ASSERT_TRUE(doc);
    for (const auto& [rank, t] : truth) {
      SCOPED_TRACE("rank " + std::to_string(rank));
      const json& want = t.at("gpu_memory");
      // The whole pool was given back at teardown: what it held is what it
      // allocated less what it freed, as the rank counted it.
      const json got = agent_rank_by_pid(*doc, t.at("pid").get<int>()).at("gpu_memory");
      EXPECT_EQ(got.at("held_bytes").get<int64_t>(),
                static_cast<int64_t>(sum_bytes(want.at("allocations")) - sum_bytes(want.at("frees"))));
      const std::map<std::string, std::string> base{{"job_id", job}, {"rank", std::to_string(rank)}};
      for (const auto& [api, c] : want.at("allocations").items()) {
        auto labels = base;
        labels["api"] = api;
        EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_allocations_total", labels), c.at("calls").get<double>())
            << api;
      }
      for (const auto& [api, c] : want.at("frees").items()) {
        auto labels = base;
        labels["api"] = api;
        EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_frees_total", labels), c.at("calls").get<double>()) << api;
      }
      for (const auto& [api, c] : want.at("maps").items()) {
        auto labels = base;
        labels["api"] = api;
        EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_mapped_bytes_total", labels), c.at("bytes").get<double>())
            << api;
      }
      EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_allocated_bytes_total", base),
                static_cast<double>(sum_bytes(want.at("allocations"))));
      EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_freed_bytes_total", base),
                static_cast<double>(sum_bytes(want.at("frees"))));
      EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_unpaired_frees_total", base), 0.0);
    }
    // The families the layout is about: vmm's physical memory and its maps.
    if (job == "mem-vmm") {
      EXPECT_GT(truth.at(0).at("gpu_memory").at("allocations").at("cuMemCreate").at("calls").get<int>(), 0);
      EXPECT_GT(truth.at(0).at("gpu_memory").at("maps").at("cuMemUnmap").at("calls").get<int>(), 0);
    }
    if (job == "mem-async") {
      EXPECT_GT(truth.at(0).at("gpu_memory").at("frees").at("cuMemFreeAsync").at("calls").get<int>(), 0);
    }
    // A healthy job, a leak too short to judge: no event of device memory.
    EXPECT_TRUE(events_of(agent, "oom", job).empty());
  }
  // Exited ranks hold nothing any more: no gauge speaks for them.
  EXPECT_EQ(agent.get_text("/metrics").find("argus_gpu_memory_held_bytes{"), std::string::npos);
  EXPECT_NE(metrics_before.find("# TYPE argus_gpu_memory_held_bytes gauge"), std::string::npos);
}

// The rank's own allocation fails (asks for more than the GPU has), its
// framework frees its cache, tries again and gives up: one oom event with the
// figures the rank recorded, the cause of its exit, and of the hang its peer
// is left in.
TEST(GpuMemory, AnOverAllocationIsNamedAndIsTheCauseOfTheExitAndTheHang) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpuoom");
  Agent agent(dir, {"--hang-threshold", "3"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  Child sim(sim_args(out, "oom-job", 2, 400, {"--mem-oom", "0:20", "--hang-timeout", "12"}), dir / "sim.log");
  ASSERT_TRUE(eventually([&] { return !events_of(agent, "hang", "oom-job").empty(); }, 60s)) << agent.log();
  auto st = sim.wait_for(60s);
  ASSERT_TRUE(st.has_value()) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  const json& t0 = truth.at(0);
  ASSERT_EQ(t0.value("status", ""), "oom");
  const json& want = t0.at("gpu_memory").at("oom");

  const json ooms = events_of(agent, "oom", "oom-job");
  ASSERT_EQ(ooms.size(), 1u) << ooms.dump();
  const json& ev = ooms[0];
  EXPECT_EQ(ev.value("rank", -1), 0);
  const json& e = ev.at("evidence");
  EXPECT_EQ(e.at("pid"), t0.at("pid"));
  EXPECT_EQ(e.at("api"), want.at("api"));
  EXPECT_EQ(e.at("code"), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(e.at("asked_bytes"), want.at("asked_bytes"));
  EXPECT_EQ(e.at("held_bytes"), want.at("held_bytes"));
  EXPECT_EQ(e.at("peak_bytes"), want.at("peak_bytes"));
  EXPECT_EQ(e.at("total_bytes"), t0.at("gpu_memory").at("total_bytes"));
  EXPECT_EQ(e.at("failed_calls"), t0.at("gpu_memory").at("failures").at("CUDA_ERROR_OUT_OF_MEMORY"));
  EXPECT_NE(ev.value("summary", "").find("rank 0 of job oom-job"), std::string::npos) << ev.dump();
  // Nothing else failed: the peer has no oom.
  for (const auto& o : ooms) EXPECT_EQ(o.value("rank", -1), 0);

  const json exits = events_of(agent, "rank_exit", "oom-job");
  const json* exit0 = nullptr;
  for (const auto& x : exits)
    if (x.value("rank", -1) == 0) exit0 = &x;
  ASSERT_NE(exit0, nullptr) << exits.dump();
  EXPECT_EQ(exit0->at("evidence").value("reason", ""), "oom");
  EXPECT_EQ(exit0->at("evidence").value("code", -1), 1);
  EXPECT_EQ(exit0->at("evidence").at("gpu_oom").at("asked_bytes"), want.at("asked_bytes"));
  EXPECT_NE(exit0->value("summary", "").find("exited with code 1 after running out of GPU memory"), std::string::npos)
      << exit0->dump();
  // The hang names the missing rank's end and its cause.
  const json hang = events_of(agent, "hang", "oom-job").at(0);
  EXPECT_NE(hang.dump().find("after running out of GPU memory"), std::string::npos) << hang.dump();
  const std::string metrics = agent.get_text("/metrics");
  EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_alloc_failures_total",
                         {{"job_id", "oom-job"}, {"rank", "0"}, {"code", "CUDA_ERROR_OUT_OF_MEMORY"}}),
            t0.at("gpu_memory").at("failures").at("CUDA_ERROR_OUT_OF_MEMORY").get<double>());
  EXPECT_EQ(metric_value(metrics, "argus_rank_exits_total", {{"job_id", "oom-job"}, {"rank", "0"}, {"reason", "oom"}}),
            1.0);
}

// A leak: held bytes that grow every step, said to grow with a rate near the
// rank's own (bytes a step over its steps' time); its healthy peer is not.
TEST(GpuMemory, ALeakIsSaidToGrowAndItsPeerIsNot) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpuleak");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  Child sim(sim_args(out, "leak-job", 2, 0, {"--mem-leak", "1:2M"}), dir / "sim.log");
  json leaking, healthy;
  const bool said = eventually(
      [&] {
        auto doc = agent.get_json("/api/v1/ranks");
        if (!doc) return false;
        for (const auto& r : (*doc)["ranks"]) {
          if (r.value("job_id", json()) != "leak-job" || !r.value("gpu_memory", json()).is_object()) continue;
          (r.value("rank", -1) == 1 ? leaking : healthy) = r.at("gpu_memory");
        }
        return leaking.is_object() && leaking.value("growing", false);
      },
      90s);
  const std::string metrics = agent.get_text("/metrics");
  sim.terminate();
  ASSERT_TRUE(said) << leaking.dump() << agent.log();
  ASSERT_TRUE(healthy.is_object());
  EXPECT_FALSE(healthy.value("growing", true)) << healthy.dump();
  EXPECT_EQ(healthy.value("growth_bytes_per_second", -1.0), 0.0);
  const double rate = leaking.value("growth_bytes_per_second", 0.0);
  EXPECT_GT(rate, 0);
  // At most 2 MiB a 20-ms step; the steps take longer than their compute.
  EXPECT_LE(rate, 2.0 * (1 << 20) / 0.020 * 1.05);
  EXPECT_GT(metric_value(metrics, "argus_gpu_memory_growth_bytes_per_second", {{"job_id", "leak-job"}, {"rank", "1"}}),
            0.0);
  EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_growth_bytes_per_second", {{"job_id", "leak-job"}, {"rank", "0"}}),
            0.0);
  EXPECT_TRUE(events_of(agent, "oom", "leak-job").empty());
}

// A rank whose pool grows toward its GPU's total is flagged (pressure) before
// the allocation that fails.
TEST(GpuMemory, PressureIsFlaggedBeforeTheFailure) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpupressure");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  // ~5 GiB held after init on a 6 GiB GPU; 2 MiB more every 20-ms step: ~45 s to full.
  Child sim(sim_args(out, "press-job", 2, 0, {"--gpu-mem-mb", "6144", "--mem-leak", "1:2M", "--hang-timeout", "5"}),
            dir / "sim.log");
  bool flagged = false;
  const bool failed = eventually(
      [&] {
        if (!events_of(agent, "oom", "press-job").empty()) return true;
        if (auto doc = agent.get_json("/api/v1/ranks"))
          for (const auto& r : (*doc)["ranks"])
            if (r.value("job_id", json()) == "press-job" && r.value("rank", -1) == 1 &&
                r.value("gpu_memory", json()).is_object() && r["gpu_memory"].value("pressure", false))
              flagged = true;
        return false;
      },
      120s);
  sim.wait_for(30s);
  ASSERT_TRUE(failed) << agent.log();
  EXPECT_TRUE(flagged) << "no pressure before the failure";
  const json ev = events_of(agent, "oom", "press-job").at(0);
  EXPECT_EQ(ev.value("rank", -1), 1);
}

// A Python rank's failure: the stack where the allocation failed, taken at
// the failing return, before the exception unwound it.
TEST(GpuMemory, TheOomEventHasThePythonStackWhereItFailed) {
  ARGUS_REQUIRE_ROOT();
  std::string python = "/usr/bin/python3";
  if (!fs::exists(python)) python = "python3";
  const auto dir = make_temp_dir("gpuoompy");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const fs::path go = dir / "go", truth_file = dir / "truth.json";
  Child rank({python, "-u", std::string(ARGUS_SOURCE_DIR) + "/tests/python/cuda_oom.py", lib("libcuda.so.1"),
              go.string(), truth_file.string(), "256", "6"},
             dir / "rank.log",
             {"RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1", "LOCAL_WORLD_SIZE=1", "TORCHELASTIC_RUN_ID=pyoom",
              "ARGUS_SIM_GPU_MEM_MB=4096"});
  // Its interpreter found (the stack can be taken), then it may go on.
  ASSERT_TRUE(eventually(
      [&] {
        auto doc = agent.get_json("/api/v1/ranks");
        if (doc)
          for (const auto& r : (*doc)["ranks"])
            if (r.value("job_id", json()) == "pyoom" && r.value("python", json()).is_object()) return true;
        return false;
      },
      30s))
      << agent.log() << read_text(dir / "rank.log");
  std::ofstream(go) << "go";
  auto st = rank.wait_for(60s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 1) << read_text(dir / "rank.log");
  const json truth = json::parse(read_text(truth_file));
  ASSERT_TRUE(eventually([&] { return !events_of(agent, "oom", "pyoom").empty(); }, 10s)) << agent.log();
  const json ev = events_of(agent, "oom", "pyoom").at(0);
  const json& e = ev.at("evidence");
  EXPECT_EQ(e.at("asked_bytes"), truth.at("oom").at("asked_bytes"));
  EXPECT_EQ(e.at("held_bytes"), truth.at("oom").at("held_bytes"));
  EXPECT_EQ(e.at("peak_bytes"), truth.at("oom").at("peak_bytes"));
  EXPECT_EQ(e.at("total_bytes"), truth.at("total_bytes"));
  EXPECT_EQ(e.at("failed_calls"), truth.at("failures"));
  const json& stack = e.at("python_stack");
  ASSERT_TRUE(stack.is_array()) << ev.dump();
  std::vector<std::string> functions;
  for (const auto& f : stack) {
    // "qualname (file:line)": the function's own name (3.11+ qualifies methods).
    std::string name = f.get<std::string>().substr(0, f.get<std::string>().find(' '));
    functions.push_back(name.substr(name.rfind('.') + 1));
  }
  const std::vector<std::string> tail = {"main", "train_step", "forward", "allocate_activations", "malloc", "_grow",
                                         "alloc"};
  ASSERT_GE(functions.size(), tail.size()) << stack.dump();
  EXPECT_EQ(std::vector<std::string>(functions.end() - static_cast<long>(tail.size()), functions.end()), tail)
      << stack.dump();
  EXPECT_NE(ev.value("summary", "").find("alloc (" + std::string(ARGUS_SOURCE_DIR) + "/tests/python/cuda_oom.py:"),
            std::string::npos)
      << ev.dump();
  // Its end: exit 1 after the OOM, with the same stack.
  ASSERT_TRUE(eventually([&] { return !events_of(agent, "rank_exit", "pyoom").empty(); }, 10s));
  const json exit_ev = events_of(agent, "rank_exit", "pyoom").at(0);
  EXPECT_EQ(exit_ev.at("evidence").value("reason", ""), "oom");
  EXPECT_EQ(exit_ev.at("evidence").at("gpu_oom").at("python_stack"), stack);
  // Frees of the cache after the failure paired with their allocations.
  const std::string metrics = agent.get_text("/metrics");
  const std::map<std::string, std::string> base{{"job_id", "pyoom"}, {"rank", "0"}};
  EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_allocated_bytes_total", base),
            truth.at("allocated_bytes").get<double>());
  EXPECT_EQ(metric_value(metrics, "argus_gpu_memory_freed_bytes_total", base), truth.at("freed_bytes").get<double>());
}

}  // namespace
}  // namespace argus::itest
