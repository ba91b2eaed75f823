// Stragglers and hangs end to end: the simulator injects the fault into a
// random rank; the agent must name that rank, and only that rank.
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

std::set<int> flagged(const json& doc, const std::string& job, const char* field) {
  std::set<int> out;
  for (const auto& r : doc.at("ranks"))
    if (r.value("job_id", json()) == job && r.value(field, false)) out.insert(r.at("rank").get<int>());
  return out;
}

// Polls until `field` is set for some rank of the job; returns the ranks flagged
// then, and every rank seen flagged before.
std::pair<std::set<int>, std::set<int>> wait_flag(const Agent& agent, const std::string& job, const char* field,
                                                  std::chrono::seconds timeout) {
  std::set<int> ever;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto doc = agent.get_json("/api/v1/ranks")) {
      auto now = flagged(*doc, job, field);
      ever.insert(now.begin(), now.end());
      if (!now.empty()) return {now, ever};
    }
    std::this_thread::sleep_for(200ms);
  }
  return {{}, ever};
}

int random_rank(int ranks) {
  std::random_device rd;
  return static_cast<int>(rd() % static_cast<unsigned>(ranks));
}

// The fault the sim recorded for `rank` (its truth file), or null.
json recorded_fault(const fs::path& out, int rank, const std::string& kind) {
  const auto path = out / ("rank-" + std::to_string(rank) + ".json");
  for (int i = 0; i < 50 && !fs::exists(path); ++i) std::this_thread::sleep_for(100ms);
  if (!fs::exists(path)) return json();
  const json truth = json::parse(read_text(path));  // kept alive: the loop walks into it
  for (const auto& f : truth.at("faults"))
    if (f.value("kind", "") == kind) return f;
  return json();
}

// The matrix: NCCL mode x fault x GPU layer. Each case names the rank the sim
// injected the fault into (its truth file says which and when), alone, with the
// reason the fault implies.
struct StragglerCase {
  const char* name;
  std::vector<std::string> args;  // besides ranks/steps/job: mode, fault, shape
  bool gpu_layer;                 // the sim's emulated GPU hands its records to the agent
  const char* fault_kind;         // the truth's fault: "straggler" or "gpu_slow"
  const char* reason;
};
// gtest prints a case by its name (ctest lists the tests by it).
inline void PrintTo(const StragglerCase& c, std::ostream* os) { *os << c.name; }

class DetectionMatrix : public ::testing::TestWithParam<StragglerCase> {};

TEST_P(DetectionMatrix, NamesTheInjectedRankAloneWithItsReason) {
  ARGUS_REQUIRE_ROOT();
  const StragglerCase c = GetParam();
  const auto dir = make_temp_dir(std::string("matrix-") + c.name);
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int slow = random_rank(6);
  const std::string job = std::string(c.name) + "-" + std::to_string(slow);
  std::vector<std::string> argv = {bin("argus-sim"), "--ranks", "6", "--steps", "0", "--step-ms", "60", "--init-ms",
                                   "200", "--job-id", job, "--out", (dir / "truth").string(), "--quiet"};
  for (const auto& a : c.args) argv.push_back(a == "R" ? std::to_string(slow) : a.rfind("R:", 0) == 0 ? std::to_string(slow) + a.substr(1) : a);
  Child sim(argv, dir / "sim.log", {std::string("ARGUS_SIM_GPU_ACTIVITY=") + (c.gpu_layer ? "1" : "0")});
  auto [now, ever] = wait_flag(agent, job, "straggler", 40s);
  EXPECT_EQ(now, std::set<int>{slow}) << agent.log();
  EXPECT_EQ(ever, std::set<int>{slow});
  // The sim recorded that fault on that rank.
  EXPECT_FALSE(recorded_fault(dir / "truth", slow, c.fault_kind).is_null()) << c.fault_kind;
  auto evs = events_of(agent, "straggler", job);
  ASSERT_EQ(evs.size(), 1u) << evs.dump();
  const auto& ev = evs[0];
  EXPECT_EQ(ev["rank"], slow);
  // A host straggler with the kernel layer says what on its host: the sim's
  // --straggler computes longer, and nothing else explains it; "host" only
  // without the kernel layer.
  std::string reason = c.reason;
  if (reason == "host" && ev["evidence"].contains("host_cause") && ev["evidence"]["host_cause"].value("kernel_layer", false))
    reason = "compute";
  EXPECT_EQ(ev["evidence"]["reason"], reason) << ev["summary"];
  EXPECT_NE(ev["summary"].get<std::string>().find("rank " + std::to_string(slow) + " of job " + job), std::string::npos);
  EXPECT_EQ(ev["evidence"]["peers"].size(), 6u);
  EXPECT_EQ(ev["evidence"]["window_seconds"], 5);
  const std::string m = agent.get_text("/metrics");
  EXPECT_EQ(metric_value(m, "argus_straggler", {{"job_id", job}, {"rank", std::to_string(slow)}}), 1) << m;
  // Asynchronous NCCL: no host time inside the collective calls; the waits are in synchronize.
  if (std::find(c.args.begin(), c.args.end(), "blocking") == c.args.end()) {
    for (int r = 0; r < 6; ++r)
      EXPECT_LT(metric_value(m, "argus_collective_wait_ratio", {{"job_id", job}, {"rank", std::to_string(r)}}), 0.05) << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Semantics, DetectionMatrix,
    ::testing::Values(
        StragglerCase{"async_host", {"--straggler", "R:2.5"}, false, "straggler", "host"},
        StragglerCase{"blocking_host", {"--nccl-mode", "blocking", "--straggler", "R:2.5"}, false, "straggler", "host"},
        StragglerCase{"async_host_gpu", {"--straggler", "R:2.5"}, true, "straggler", "host"},
        StragglerCase{"async_host_runs_ahead", {"--straggler", "R:2.5", "--sync-every", "4"}, false, "straggler", "host"},
        StragglerCase{"async_host_buckets", {"--straggler", "R:2.5", "--buckets", "4"}, false, "straggler", "host"},
        StragglerCase{"async_sync_before", {"--gpu-slow", "R:3", "--sync-before-coll"}, false, "gpu_slow", "sync"},
        StragglerCase{"blocking_sync_before", {"--nccl-mode", "blocking", "--gpu-slow", "R:3", "--sync-before-coll"}, false,
                      "gpu_slow", "sync"},
        StragglerCase{"async_gpu", {"--gpu-slow", "R:3"}, true, "gpu_slow", "gpu"},
        StragglerCase{"blocking_gpu", {"--nccl-mode", "blocking", "--gpu-slow", "R:3"}, true, "gpu_slow", "gpu"}),
    [](const auto& info) { return std::string(info.param.name); });

// The agent starts (or restarts, as in a DaemonSet rollout) while the job runs:
// it sees no ncclCommInitRank, and each rank's count of collectives begins at
// whatever call its probes went live, a few calls apart. Numbered alike by their
// calls' op and bytes (userspace/comms/seq_aligner.h), the ranks are compared
// at the same collective: the injected straggler is named, alone, for its cause.
// Its lag is over half a step here, so the nearest call in time would mislead.
// Before, with the GPU layer off the straggler went unnamed; with it on, it was
// named for the wrong cause ("slow on its GPU"), in every try.
TEST(Detection, AgentStartedMidJobNamesTheStragglerAndWhy) {
  ARGUS_REQUIRE_ROOT();
  for (const char* gpu : {"0", "1"}) {
    SCOPED_TRACE(std::string("GPU layer ") + gpu);
    const auto dir = make_temp_dir(std::string("midjob-gpu") + gpu);
    const int slow = random_rank(6);
    const std::string job = "midjob" + std::string(gpu) + "-" + std::to_string(slow);
    Child sim({bin("argus-sim"), "--ranks", "6", "--steps", "0", "--step-ms", "60", "--init-ms", "200", "--job-id", job,
               "--out", (dir / "truth").string(), "--quiet", "--straggler", std::to_string(slow) + ":2.5"},
              dir / "sim.log", {std::string("ARGUS_SIM_GPU_ACTIVITY=") + gpu});
    std::this_thread::sleep_for(3s);  // well into the job: every communicator made, many collectives done
    ASSERT_TRUE(sim.running()) << read_text(dir / "sim.log");
    Agent agent(dir, {"--window", "5"});
    ASSERT_TRUE(agent.wait_ready()) << agent.log();
    auto [now, ever] = wait_flag(agent, job, "straggler", 40s);
    EXPECT_EQ(now, std::set<int>{slow}) << agent.log();
    EXPECT_EQ(ever, std::set<int>{slow});
    EXPECT_FALSE(recorded_fault(dir / "truth", slow, "straggler").is_null());
    auto evs = events_of(agent, "straggler", job);
    ASSERT_EQ(evs.size(), 1u) << evs.dump();
    EXPECT_EQ(evs[0]["rank"], slow);
    const std::string reason = evs[0]["evidence"]["reason"];
    EXPECT_TRUE(reason == "host" || reason == "compute") << evs[0]["summary"];
    // How: no init seen, so one rank's count became the numbering and the other
    // five were matched to it by their calls.
    const std::string m = agent.get_text("/metrics");
    EXPECT_EQ(metric_value(m, "argus_agent_collective_numbering_total", {{"how", "anchored"}}), 0) << m;
    EXPECT_EQ(metric_value(m, "argus_agent_collective_numbering_total", {{"how", "reference"}}), 1);
    EXPECT_EQ(metric_value(m, "argus_agent_collective_numbering_total", {{"how", "matched"}}), 5);
    EXPECT_EQ(metric_value(m, "argus_agent_collective_numbering_total", {{"how", "time_only"}}), 0);
    EXPECT_GT(metric_value(m, "argus_agent_collectives_unnumbered_total", {}), 0);
  }
}

// An agent (--window 5) watching a 4-rank job of 50 ms steps whose random rank
// gets `fault` (--hang, --exit, --gpu-hang) at step `step`; truth in dir/truth.
struct FaultJob {
  FaultJob(const std::string& tag, const std::string& fault, int step, std::vector<std::string> extra = {})
      : dir(make_temp_dir(tag)), agent(dir, {"--window", "5"}), rank(random_rank(4)), job(tag + "-" + std::to_string(rank)) {
    ready = agent.wait_ready();
    std::vector<std::string> argv = {bin("argus-sim"), "--ranks", "4", "--steps", "0", "--step-ms", "50", "--init-ms",
                                     "200", "--job-id", job, fault, std::to_string(rank) + ":" + std::to_string(step),
                                     "--out", (dir / "truth").string(), "--quiet"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    if (ready) sim = std::make_unique<Child>(argv, dir / "sim.log");
  }
  fs::path dir;
  Agent agent;
  int rank;
  std::string job;
  bool ready = false;
  std::unique_ptr<Child> sim;
};

TEST(Detection, HungRankNamedAlone) {
  ARGUS_REQUIRE_ROOT();
  FaultJob j("hang", "--hang", 60);
  ASSERT_TRUE(j.ready) << j.agent.log();
  const auto& [agent, hung, job] = std::tie(j.agent, j.rank, j.job);
  auto [now, ever] = wait_flag(agent, job, "hang_missing", 45s);
  EXPECT_EQ(now, std::set<int>{hung}) << agent.log();
  EXPECT_EQ(ever, std::set<int>{hung});
  auto evs = events_of(agent, "hang", job);
  ASSERT_GE(evs.size(), 1u);
  EXPECT_EQ(evs[0]["rank"], hung);
  // It is alive, in no collective or CUDA call (the sim's --hang sleeps), and said to be.
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("rank " + std::to_string(hung) +
                                                      " (it is alive and in no collective or CUDA call"),
            std::string::npos)
      << evs[0]["summary"];
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("never issued it"), std::string::npos) << evs[0]["summary"];
  EXPECT_EQ(evs[0]["evidence"]["missing"][0]["state"], "idle") << evs[0].dump();
  // Asynchronous NCCL: its peers issued the collective and wait in a synchronize.
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("wait in a CUDA synchronize"), std::string::npos)
      << evs[0]["summary"];
  const std::string m = agent.get_text("/metrics");
  const auto pos = m.find("argus_collective_stalled_seconds{job_id=\"" + job + "\"");
  ASSERT_NE(pos, std::string::npos) << m;
  EXPECT_GE(std::stod(m.substr(m.find(' ', pos) + 1)), 10.0);  // the default stall threshold
}

TEST(Detection, ExitedRankCountsAsMissingAndSaysSo) {
  ARGUS_REQUIRE_ROOT();
  FaultJob j("exit", "--exit", 60);
  ASSERT_TRUE(j.ready) << j.agent.log();
  const auto& [agent, gone, job] = std::tie(j.agent, j.rank, j.job);
  auto [now, ever] = wait_flag(agent, job, "hang_missing", 45s);
  EXPECT_EQ(now, std::set<int>{gone}) << agent.log();
  auto evs = events_of(agent, "hang", job);
  ASSERT_GE(evs.size(), 1u);
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("(it died: exited with code 1)"), std::string::npos) << evs[0]["summary"];
  EXPECT_EQ(evs[0]["evidence"]["missing"][0]["exited"], true);
  auto exits = events_of(agent, "rank_exit", job);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0]["evidence"]["reason"], "exit");
  EXPECT_EQ(exits[0]["evidence"]["code"], 1);
}

TEST(Detection, BlockingHangNamesTheRankWhosePeersSitInTheCall) {
  ARGUS_REQUIRE_ROOT();
  FaultJob j("hangb", "--hang", 60, {"--nccl-mode", "blocking"});
  ASSERT_TRUE(j.ready) << j.agent.log();
  const auto& [agent, hung, job] = std::tie(j.agent, j.rank, j.job);
  auto [now, ever] = wait_flag(agent, job, "hang_missing", 45s);
  EXPECT_EQ(now, std::set<int>{hung}) << agent.log();
  auto evs = events_of(agent, "hang", job);
  ASSERT_GE(evs.size(), 1u);
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("in the collective call"), std::string::npos) << evs[0]["summary"];
}

// A GPU stuck in a kernel: every rank issues the collective and none finishes.
TEST(Detection, EqualCountsHangSaysNoRankIsMissing) {
  ARGUS_REQUIRE_ROOT();
  FaultJob j("gpuhang", "--gpu-hang", 40);
  ASSERT_TRUE(j.ready) << j.agent.log();
  const auto& [agent, stuck, job, dir] = std::tie(j.agent, j.rank, j.job, j.dir);
  json ev;
  const auto deadline = std::chrono::steady_clock::now() + 45s;
  while (ev.is_null() && std::chrono::steady_clock::now() < deadline) {
    auto evs = events_of(agent, "hang", job);
    if (!evs.empty()) ev = evs[0];
    std::this_thread::sleep_for(250ms);
  }
  ASSERT_FALSE(ev.is_null()) << agent.log();
  EXPECT_FALSE(recorded_fault(dir / "truth", stuck, "gpu_hang").is_null());
  EXPECT_EQ(ev["evidence"]["cause"], "collective_stuck") << ev.dump();
  EXPECT_TRUE(ev["evidence"]["missing"].empty());
  EXPECT_NE(ev["summary"].get<std::string>().find("no rank is missing: the collective itself is stuck"), std::string::npos)
      << ev["summary"];
  // What the other layers show: the links (none on this machine: an empty list),
  // every rank blocked in a synchronize, and the GPU gone quiet.
  EXPECT_TRUE(ev["evidence"]["links"].is_array()) << ev.dump();
  // The Python layer's view: the sim's ranks run no Python, so no group and no error.
  EXPECT_TRUE(ev["evidence"]["python_stacks"]["groups"].empty()) << ev.dump();
  EXPECT_TRUE(ev["evidence"]["python_stacks"]["errors"].empty()) << ev.dump();
  for (const auto& r : ev["evidence"]["ranks"]) {
    EXPECT_EQ(r["state"], "in_synchronize") << r.dump();
    EXPECT_TRUE(r.contains("gpu_idle_seconds")) << r.dump();
  }
  auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc);
  EXPECT_TRUE(flagged(*doc, job, "hang_missing").empty());
}

TEST(Detection, CleanJobFlagsNobody) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("clean");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string job = "clean-job";
  Child sim({bin("argus-sim"), "--ranks", "6", "--steps", "0", "--step-ms", "60", "--init-ms", "200", "--job-id", job,
             "--quiet"},
            dir / "sim.log");
  auto [now, ever] = wait_flag(agent, job, "straggler", 20s);
  EXPECT_TRUE(ever.empty());
  EXPECT_TRUE(events_of(agent, "straggler", job).empty());
  EXPECT_TRUE(events_of(agent, "hang", job).empty());
}

// Pins every thread of `pid` to `cpu`, as `taskset -a -p` does; false if it is gone.
bool pin_all_threads(int pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  std::error_code ec;
  bool any = false;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    const int tid = std::atoi(t.path().filename().c_str());
    if (tid > 0 && sched_setaffinity(tid, sizeof(set), &set) == 0) any = true;
  }
  return any;
}

// A noisy neighbour: a CPU hog with a name of its own, pinned to `cpu` and
// favoured (nice -10, as in kernel_offcpu_test) so that it, not whatever else runs on a busy test
// machine, is what takes the CPU from the rank pinned there. Killed at scope exit.
struct CpuHog {
  static constexpr const char* kComm = "argus-noisy";
  explicit CpuHog(int cpu) {
    pid = fork();
    if (pid == 0) {  // only system calls from here: the parent has threads
      prctl(PR_SET_NAME, kComm, 0, 0, 0);
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      sched_setaffinity(0, sizeof(set), &set);
      setpriority(PRIO_PROCESS, 0, -10);
      volatile uint64_t n = 0;
      while (true) n = n + 1;
    }
  }
  ~CpuHog() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  CpuHog(const CpuHog&) = delete;
  CpuHog& operator=(const CpuHog&) = delete;
  pid_t pid = -1;
};

// A noisy neighbour makes a straggler: the simulator with its default flags
// (its hosts burn part of each step on CPU, as a Python rank's dispatch), every
// thread of rank 2 pinned to one CPU with a CPU hog. The agent names rank 2
// alone, with reason cpu_contention, and the hog (pid and name) in its evidence.
// A CPU-starved rank (rank 2) in a flat job and in the layouts frameworks
// use: TP 2 x PP 2 x DP 2 in both NCCL modes (its pipeline partner and TP peer
// wait for it, through a pair and a group) and EP 4 (MoE all-to-alls).
struct NoisyCase {
  const char* name;
  int ranks;
  std::vector<std::string> layout;
};
inline void PrintTo(const NoisyCase& c, std::ostream* os) { *os << c.name; }
class NoisyNeighbour : public ::testing::TestWithParam<NoisyCase> {};

TEST_P(NoisyNeighbour, MakesACpuContentionStragglerNamingTheHog) {
  const NoisyCase c = GetParam();
  const size_t ranks = static_cast<size_t>(c.ranks);
  ARGUS_REQUIRE_ROOT();
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs 2 CPUs";
  const int cpu = static_cast<int>(std::thread::hardware_concurrency()) - 1;
  const auto dir = make_temp_dir(std::string("noisy-") + c.name);
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  // The reason comes from the kernel layer: its scheduler probe must be up.
  bool sched_up = false;
  std::istringstream metrics(agent.get_text("/metrics"));
  for (std::string line; std::getline(metrics, line);)
    if (line.rfind("argus_agent_kernel_probe_up{", 0) == 0 && line.find("probe=\"sched_switch\"") != std::string::npos &&
        line.size() > 2 && line.compare(line.size() - 2, 2, " 1") == 0)
      sched_up = true;
  ASSERT_TRUE(sched_up) << "the sched_switch probe is not attached (the kernel layer, --offcpu): "
                        << agent.log();
  const std::string job = "noisy-" + std::to_string(getpid());
  const fs::path truth = dir / "truth";
  std::vector<std::string> argv = {bin("argus-sim"), "--ranks", std::to_string(c.ranks), "--steps", "0", "--job-id",
                                   job, "--out", truth.string(), "--quiet"};
  argv.insert(argv.end(), c.layout.begin(), c.layout.end());
  Child sim(argv, dir / "sim.log");
  std::vector<int> pids;
  for (int i = 0; i < 100 && pids.size() != ranks; ++i) {
    std::this_thread::sleep_for(100ms);
    std::error_code ec;
    if (!fs::exists(truth / "job.json", ec)) continue;
    const json j = json::parse(read_text(truth / "job.json"), nullptr, false);
    if (!j.is_object() || !j.contains("ranks") || j["ranks"].size() != ranks) continue;
    pids.clear();
    for (const auto& r : j["ranks"]) pids.push_back(r.value("pid", 0));
  }
  ASSERT_EQ(pids.size(), ranks) << read_text(dir / "sim.log");
  const int rank2 = pids[2];
  ASSERT_GT(rank2, 0);
  auto pin_all = [&] { pin_all_threads(rank2, cpu); };
  pin_all();
  ASSERT_TRUE(pin_all_threads(rank2, cpu));
  CpuHog hog(cpu);
  ASSERT_GT(hog.pid, 0);
  // Threads the rank starts later (its communicator's, its emulated GPU's)
  // inherit the CPU of the thread that starts them; pin again as they come.
  std::set<int> ever;
  std::set<int> now;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    pin_all();
    if (auto doc = agent.get_json("/api/v1/ranks")) {
      now = flagged(*doc, job, "straggler");
      ever.insert(now.begin(), now.end());
      if (!now.empty()) break;
    }
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(now, std::set<int>{2}) << agent.log();
  EXPECT_EQ(ever, std::set<int>{2});
  auto evs = events_of(agent, "straggler", job);
  ASSERT_EQ(evs.size(), 1u) << evs.dump();
  const auto& ev = evs[0];
  EXPECT_EQ(ev["rank"], 2);
  EXPECT_EQ(ev["evidence"]["reason"], "cpu_contention") << ev.dump();
  EXPECT_EQ(ev["evidence"]["host_cause"]["decided_by"], "runqueue_excess") << ev.dump();
  EXPECT_GE(ev["evidence"]["host_cause"]["explained_share"]["cpu_contention"].get<double>(), 0.5);
  bool named = false;
  for (const auto& st : ev["evidence"]["stealers"])
    if (st.value("pid", 0) == hog.pid && st.value("comm", "") == CpuHog::kComm) named = true;
  EXPECT_TRUE(named) << ev["evidence"]["stealers"].dump();
  const std::string summary = ev["summary"].get<std::string>();
  EXPECT_NE(summary.find("rank 2 of job " + job + " is late by "), std::string::npos) << summary;
  EXPECT_NE(summary.find("of its time runnable but waiting for a CPU"), std::string::npos) << summary;
  // The sim records the CPU share its hosts burn.
  sim.terminate();
  const json t = json::parse(read_text(truth / "rank-2.json"), nullptr, false);
  ASSERT_TRUE(t.is_object());
  EXPECT_GT(t.value("host_cpu", 0.0), 0.0);
  EXPECT_GT(t.value("host_cpu_seconds", 0.0), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Detection, NoisyNeighbour,
                         ::testing::Values(NoisyCase{"flat", 4, {}},
                                           NoisyCase{"tp2_pp2_dp2", 8, {"--tp", "2", "--pp", "2", "--accum", "2"}},
                                           NoisyCase{"tp2_pp2_dp2_blocking", 8,
                                                     {"--tp", "2", "--pp", "2", "--accum", "2", "--nccl-mode", "blocking"}},
                                           NoisyCase{"ep4_dp8", 8, {"--ep", "4"}}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace argus::itest
