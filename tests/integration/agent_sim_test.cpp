// The agent and the simulated job, end to end on the real kernel: the figures
// the agent exports equal, exactly, what each rank recorded it called.
#include <functional>
#include <regex>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

TEST(AgentSim, ExactCountsEqualSimTruth) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("exact");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();

  const auto out = dir / "truth";
  Child sim(sim_args(out, "exact-job", 4, 15, {"--cuda-errors", "1:3", "--straggler", "2:2"}), dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");

  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 4u);
  EXPECT_EQ(wait_for_match(agent, truth, false), "") << agent.log();

  // The same figures on /metrics, typed as counters, with the contract's labels.
  const std::string metrics = agent.get_text("/metrics");
  EXPECT_NE(metrics.find("# TYPE argus_nccl_collectives_total counter"), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE argus_nccl_bytes_total counter"), std::string::npos);
  for (const auto& [rank, t] : truth) {
    const std::string r = std::to_string(rank);
    const auto& ar = t.at("nccl").at("all_reduce");
    EXPECT_EQ(metric_value(metrics, "argus_nccl_collectives_total", {{"job_id", "exact-job"}, {"rank", r}, {"op", "all_reduce"}}),
              ar.at("calls").get<double>());
    EXPECT_EQ(metric_value(metrics, "argus_nccl_bytes_total", {{"job_id", "exact-job"}, {"rank", r}, {"op", "all_reduce"}}),
              ar.at("bytes").get<double>());
    EXPECT_EQ(metric_value(metrics, "argus_rank_info", {{"job_id", "exact-job"}, {"rank", r}, {"pid", std::to_string(t.at("pid").get<int>())}}), 1.0);
  }
  EXPECT_EQ(metric_value(metrics, "argus_cuda_errors_total",
                         {{"job_id", "exact-job"}, {"rank", "1"}, {"api", "cuMemAlloc"}, {"code", "CUDA_ERROR_OUT_OF_MEMORY"}}),
            3.0);
  // Default probes never trap on launches, so no launch counter is exported.
  EXPECT_EQ(metrics.find("argus_cuda_kernel_launches_total{"), std::string::npos);
  // The exited ranks stay visible (grace period) with their exit recorded.
  auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc);
  for (const auto& [rank, t] : truth) {
    auto a = agent_rank_by_pid(*doc, t.at("pid").get<int>());
    EXPECT_EQ(a.value("state", ""), "exited");
    EXPECT_EQ(a.value("exit_reason", ""), "exit");
  }
  EXPECT_EQ(metric_value(metrics, "argus_agent_events_lost_total", {{"source", "nccl"}}), 0.0);
  // This kernel (6.18; 6.6+) has uprobe_multi links: the default takes them.
  if (kernel_at_least(6, 6)) {
    EXPECT_EQ(metric_value(metrics, "argus_agent_uprobe_links_info", {{"kind", "multi"}}), 1.0);
  }
}

// The span threshold is a constant of the BPF programs that the loader sets
// before load (--span-min-us): at 0 the return of every collective is sent (the
// sim's asynchronous calls return in microseconds, as real NCCL's), at the
// default almost none is; the counts are exact either way.
TEST(AgentSim, SpanThresholdIsSetBeforeLoad) {
  ARGUS_REQUIRE_ROOT();
  for (const bool every_return : {true, false}) {
    SCOPED_TRACE(every_return ? "--span-min-us 0" : "default");
    const auto dir = make_temp_dir("span");
    Agent agent(dir, every_return ? std::vector<std::string>{"--span-min-us", "0"} : std::vector<std::string>{});
    ASSERT_TRUE(agent.wait_ready()) << agent.log();
    const auto truth = run_sim_job(dir, "span-job", 2, 20);
    ASSERT_EQ(truth.size(), 2u) << read_text(dir / "sim.log");
    ASSERT_EQ(wait_for_match(agent, truth, false), "") << agent.log();
    double calls = 0;
    for (const auto& [rank, t] : truth)
      for (const auto& [op, c] : t.at("nccl").items()) calls += c.at("calls").get<double>();
    ASSERT_GT(calls, 0);
    const double events = metric_value(agent.get_text("/metrics"), "argus_agent_events_total", {{"source", "nccl"}});
    if (every_return)
      EXPECT_GE(events, 2 * calls);  // an entry and a return each (and the inits)
    else
      EXPECT_LT(events, 1.5 * calls);  // the entries, and the rare return that took 50 us
  }
}

TEST(AgentSim, DeepProbesCountEveryLaunch) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("deep");
  Agent agent(dir, {"--probes", "deep"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  Child sim(sim_args(out, "deep-job", 2, 10), dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  EXPECT_EQ(wait_for_match(agent, truth, true), "") << agent.log();
  // Every launch was also timed (entry and return), in BPF: the timed count and
  // the histogram's +Inf bucket equal the launches each rank made.
  EXPECT_EQ(wait_for_truth(agent, truth, [](const json& t, const json& a) -> std::string {
              const json timing = a.value("cuda", json::object()).value("launch_timing", json());
              const json want = t.at("cuda").at("kernel_launches");
              if (!timing.is_object()) return "no launch_timing";
              if (timing.value("count", json()) != want) return "timed " + timing.value("count", json()).dump() + "!=" + want.dump();
              uint64_t in_buckets = 0;
              for (const auto& [le, n] : timing.at("log2_buckets_ns").items()) in_buckets += n.get<uint64_t>();
              if (in_buckets != want.get<uint64_t>()) return "histogram " + std::to_string(in_buckets) + "!=" + want.dump();
              return "";
            }),
            "")
      << agent.log();
  const std::string metrics = agent.get_text("/metrics");
  EXPECT_NE(metrics.find("# TYPE argus_cuda_launch_duration_seconds histogram"), std::string::npos);
  for (const auto& [rank, t] : truth) {
    const std::map<std::string, std::string> labels{{"job_id", "deep-job"}, {"rank", std::to_string(rank)}};
    const double launches = t.at("cuda").at("kernel_launches").get<double>();
    ASSERT_GT(launches, 0);
    EXPECT_EQ(metric_value(metrics, "argus_cuda_kernel_launches_total", labels), launches);
    EXPECT_EQ(metric_value(metrics, "argus_cuda_launch_duration_seconds_count", labels), launches);
    auto inf = labels;
    inf["le"] = "+Inf";
    EXPECT_EQ(metric_value(metrics, "argus_cuda_launch_duration_seconds_bucket", inf), launches);
    // Host time inside the launches: positive, and below the rank's whole run.
    const double secs = metric_value(metrics, "argus_cuda_launch_seconds_total", labels);
    EXPECT_GT(secs, 0.0);
    EXPECT_LT(secs, 60.0);
    EXPECT_DOUBLE_EQ(metric_value(metrics, "argus_cuda_launch_duration_seconds_sum", labels), secs);
  }
}

// Host copies are in the default set: calls and bytes per direction equal,
// exactly, what each rank passed to cuMemcpy{HtoD,DtoH,DtoD}[Async]; launches are
// neither counted nor timed.
// One perf event per uprobe: the fallback of kernels before 6.6 (no uprobe_multi
// links), forced here. Every probe of the deep set still counts exactly.
TEST(AgentSim, PerfEventUprobesCountAsExactlyAsMultiLinks) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("perf-links");
  Agent agent(dir, {"--probes", "deep", "--uprobe-links", "perf"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  EXPECT_EQ(metric_value(agent.get_text("/metrics"), "argus_agent_uprobe_links_info", {{"kind", "perf"}}), 1.0);
  const auto out = dir / "truth";
  Child sim(sim_args(out, "perf-links-job", 2, 8, {"--cuda-errors", "1:2"}), dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  EXPECT_EQ(wait_for_match(agent, truth, true), "") << agent.log();
  EXPECT_EQ(metric_value(agent.get_text("/metrics"), "argus_cuda_errors_total",
                         {{"job_id", "perf-links-job"}, {"rank", "1"}, {"api", "cuMemAlloc"},
                          {"code", "CUDA_ERROR_OUT_OF_MEMORY"}}),
            2.0);
}

TEST(AgentSim, MemcpyBytesByDirectionEqualSimTruth) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("memcpy");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  Child sim(sim_args(out, "copy-job", 2, 12), dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  EXPECT_EQ(wait_for_truth(agent, truth, [](const json& t, const json& a) -> std::string {
              const json got = a.value("cuda", json::object()).value("memcpy", json::object());
              std::string d;
              for (const char* direction : {"htod", "dtoh", "dtod"}) {
                const json& want = t.at("cuda").at("memcpy").at(direction);
                const json g = got.value(direction, json::object());
                if (g.value("calls", json()) != want.at("calls") || g.value("bytes", json()) != want.at("bytes"))
                  d += std::string(" ") + direction + " " + g.dump() + "!=" + want.dump();
              }
              return d;
            }),
            "")
      << agent.log();

  const std::string metrics = agent.get_text("/metrics");
  EXPECT_NE(metrics.find("# TYPE argus_cuda_memcpy_bytes_total counter"), std::string::npos);
  EXPECT_NE(metrics.find("# TYPE argus_cuda_memcpy_calls_total counter"), std::string::npos);
  for (const auto& [rank, t] : truth) {
    for (const char* direction : {"htod", "dtoh", "dtod"}) {
      SCOPED_TRACE(std::string("rank ") + std::to_string(rank) + " " + direction);
      const json& want = t.at("cuda").at("memcpy").at(direction);
      ASSERT_GT(want.at("calls").get<uint64_t>(), 0u);
      const std::map<std::string, std::string> labels{
          {"job_id", "copy-job"}, {"rank", std::to_string(rank)}, {"direction", direction}};
      EXPECT_EQ(metric_value(metrics, "argus_cuda_memcpy_bytes_total", labels), want.at("bytes").get<double>());
      EXPECT_EQ(metric_value(metrics, "argus_cuda_memcpy_calls_total", labels), want.at("calls").get<double>());
    }
  }
  // The copies returned CUDA_SUCCESS: no error series for them.
  EXPECT_EQ(metrics.find("api=\"cuMemcpy"), std::string::npos);
  // The default set never traps on a launch.
  EXPECT_EQ(metrics.find("argus_cuda_launch_seconds_total{"), std::string::npos);
  EXPECT_EQ(metrics.find("argus_cuda_launch_duration_seconds_count{"), std::string::npos);
}

// The libraries exist only inside the rank's own mount namespace: the agent
// must open them through /proc/PID/root.
TEST(AgentSim, RankInItsOwnMountNamespace) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("mntns");
  const auto hidden = dir / "nslibs";
  fs::create_directories(hidden);
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  auto args = sim_args(out, "mntns-job", 2, 10,
                       {"--nccl-lib", (hidden / "libnccl.so.2").string(), "--cuda-lib", (hidden / "libcuda.so.1").string()});
  std::string cmd = "mount -t tmpfs argus-test " + hidden.string() + " && cp " + lib("libnccl.so.2") + " " +
                    lib("libcuda.so.1") + " " + hidden.string() + "/ && exec";
  for (const auto& a : args) cmd += " '" + a + "'";
  Child sim({"unshare", "--mount", "--propagation", "private", "sh", "-c", cmd}, dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  // The test's own premise: the node never saw those files.
  EXPECT_FALSE(fs::exists(hidden / "libnccl.so.2"));
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  EXPECT_EQ(wait_for_match(agent, truth, false), "") << agent.log();
  auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc);
  auto r0 = agent_rank_by_pid(*doc, truth.at(0).at("pid").get<int>());
  EXPECT_NE(r0.dump().find((hidden / "libnccl.so.2").string()), std::string::npos) << r0.dump();
}

// A job whose library file the agent has never seen, started after the agent:
// discovery must find it (exec hint) and attach before the first call.
TEST(AgentSim, RankStartedAfterAgentWithUnseenLibraryPath) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("late");
  const auto site = dir / "site-packages" / "nvidia" / "nccl" / "lib";
  const auto cuda = dir / "site-packages" / "nvidia" / "cuda" / "lib";
  fs::create_directories(site);
  fs::create_directories(cuda);
  fs::copy_file(lib("libnccl.so.2"), site / "libnccl.so.2");
  fs::copy_file(lib("libcuda.so.1"), cuda / "libcuda.so.1");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  std::this_thread::sleep_for(1s);
  auto before = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(before);
  const auto out = dir / "truth";
  Child sim(sim_args(out, "late-job", 3, 10,
                     {"--nccl-lib", (site / "libnccl.so.2").string(), "--cuda-lib", (cuda / "libcuda.so.1").string()}),
            dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 3u);
  EXPECT_EQ(wait_for_match(agent, truth, false), "") << agent.log();
}

// Processes that map the libraries and exit at once, while the agent attaches:
// the agent stays up, and a job after them is counted exactly.
TEST(AgentSim, ProcessesExitingWhileBeingAttached) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("vanish");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  for (int round = 0; round < 6; ++round) {
    // Each round uses a fresh copy (a new inode), so attaching races the exit.
    const auto libs = dir / ("round" + std::to_string(round));
    fs::create_directories(libs);
    fs::copy_file(lib("libnccl.so.2"), libs / "libnccl.so.2");
    fs::copy_file(lib("libcuda.so.1"), libs / "libcuda.so.1");
    std::vector<std::unique_ptr<Child>> burst;
    for (int i = 0; i < 4; ++i) {
      burst.push_back(std::make_unique<Child>(
          std::vector<std::string>{bin("argus-sim"), "--ranks", "2", "--steps", "1", "--step-ms", "1", "--init-ms",
                                   std::to_string(i * 7), "--quiet", "--nccl-lib", (libs / "libnccl.so.2").string(),
                                   "--cuda-lib", (libs / "libcuda.so.1").string(), "--job-id", "burst"},
          dir / ("burst" + std::to_string(round) + "-" + std::to_string(i) + ".log")));
    }
    for (auto& c : burst) c->wait_for(60s);
    // Remove the files while their inodes may still be in the agent's queue.
    fs::remove_all(libs);
  }
  ASSERT_TRUE(agent.child().running()) << agent.log();
  auto health = cli::http_get(agent.url("/healthz"), 5s);
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);

  const auto out = dir / "truth";
  Child sim(sim_args(out, "after-burst", 2, 8), dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  EXPECT_EQ(wait_for_match(agent, truth, false), "") << agent.log();
}

}  // namespace
}  // namespace argus::itest

namespace argus::itest {
namespace {

// A ring buffer that overflows (the agent frozen for seconds) loses events,
// counted as lost; the exported figures stay exact, since they come from the
// BPF aggregates, not from the events.
TEST(AgentSim, FullRingBufferLosesEventsNotCounts) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("ringfull");
  Agent agent(dir, {"--ringbuf-kb", "64"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  auto args = sim_args(out, "ringfull-job", 4, 300);
  args[6] = "10";  // --step-ms
  Child sim(args, dir / "sim.log");
  // Wait until the agent counts calls of all four ranks (their probes are live:
  // freezing it before the attach would lose calls to the attach, not to the
  // ring buffer, and on a loaded machine the attach can take seconds), then
  // freeze it while the ranks go on.
  for (int i = 0; i < 300; ++i) {
    auto doc = agent.get_json("/api/v1/ranks");
    size_t counting = 0;
    if (doc)
      for (const auto& r : (*doc)["ranks"]) {
        if (r.value("job_id", json()) != "ringfull-job") continue;
        uint64_t calls = 0;
        const json nccl = r.value("nccl", json::object());
        for (const auto& [op, c] : nccl.items()) calls += c.value("calls", 0ull);
        counting += calls > 0;
      }
    if (counting == 4) break;
    std::this_thread::sleep_for(50ms);
  }
  kill(agent.child().pid(), SIGSTOP);
  std::this_thread::sleep_for(3s);
  kill(agent.child().pid(), SIGCONT);
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 4u);
  EXPECT_EQ(wait_for_match(agent, truth, false), "") << agent.log();
  const std::string m = agent.get_text("/metrics");
  const auto pos = m.find("argus_agent_events_lost_total{source=\"nccl\"}");
  ASSERT_NE(pos, std::string::npos);
  const double lost = std::stod(m.substr(m.find(' ', pos) + 1));
  EXPECT_GT(lost, 0) << "the ring buffer never filled: the test did not test anything";
}

}  // namespace
}  // namespace argus::itest
