// A real PyTorch job: torchrun with Gloo DDP on CPU (the `torch` wheel from
// PyPI, in the venv scripts/install-deps.sh caches). Nobody here wrote torch:
// its ranks must be found, their GC counted exactly, and their stacks and
// profiles must show the training loop of tests/python/ddp_train.py.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

fs::path torch_venv() {
  const char* cache = std::getenv("ARGUS_CACHE_DIR");
  return fs::path(cache && *cache ? cache : "/var/cache/argus") / "torch-venv";
}

// Every frame function of a thread, innermost first.
std::vector<std::string> functions_of(const json& thread) {
  std::vector<std::string> out;
  for (const auto& f : thread.value("frames", json::array())) out.push_back(f.value("function", ""));
  return out;
}

bool has_in_order(const std::vector<std::string>& innermost_first, const std::string& inner,
                  const std::string& outer) {
  auto i = std::find(innermost_first.begin(), innermost_first.end(), inner);
  auto o = std::find(innermost_first.begin(), innermost_first.end(), outer);
  return i != innermost_first.end() && o != innermost_first.end() && i < o;
}

// A field that may be null (a process whose job is not known yet).
std::string str_or_empty(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : "";
}

int read_pid(const fs::path& p) {
  std::ifstream in(p);
  int pid = 0;
  in >> pid;
  return pid;
}

}  // namespace

TEST(PythonTorch, TorchrunGlooDdpRanksAreFoundCountedAndDumped) {
  ARGUS_REQUIRE_ROOT();
  const fs::path torchrun = torch_venv() / "bin" / "torchrun";
  if (!fs::exists(torchrun)) {
    if (ci()) FAIL() << "CI=true but the torch venv is missing at " << torch_venv() << " (scripts/install-deps.sh)";
    GTEST_SKIP() << "no torch venv at " << torch_venv();
  }
  const auto dir = make_temp_dir("torch");
  Agent agent(dir, {"--debug-routes"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();

  const std::string run_id = "torchjob" + std::to_string(getpid());
  const fs::path ready = dir / "ready", stop = dir / "stop", gcstats = dir / "gcstats";
  Child job({torchrun.string(), "--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend", "c10d",
             "--rdzv_endpoint", "127.0.0.1:" + std::to_string(free_port()), "--rdzv_id", run_id,
             std::string(ARGUS_SOURCE_DIR) + "/tests/python/ddp_train.py", "--steps", "0", "--step-sleep", "0.01",
             "--collect-every", "40", "--workers", "1", "--ready-file", ready.string(), "--stop-file", stop.string(),
             "--gc-stats-file", gcstats.string(), "--linger", "120"},
            dir / "torchrun.log");

  // Ranks start training (torch's import alone takes several seconds here).
  std::map<int, int> pids;  // rank -> pid
  for (int i = 0; i < 1200 && pids.size() < 2; ++i) {
    for (int r = 0; r < 2; ++r)
      if (!pids.count(r) && fs::exists(ready.string() + "." + std::to_string(r)))
        pids[r] = read_pid(ready.string() + "." + std::to_string(r));
    if (!job.running()) break;
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(pids.size(), 2u) << read_text(dir / "torchrun.log");

  // Found as ranks of the job torchrun named (TORCHELASTIC_RUN_ID = --rdzv_id).
  json ranks;
  for (int i = 0; i < 300; ++i) {
    if (auto d = agent.get_json("/api/v1/ranks")) ranks = *d;
    if (!agent_rank_by_pid(ranks, pids[0]).is_null() && !agent_rank_by_pid(ranks, pids[1]).is_null()) break;
    std::this_thread::sleep_for(100ms);
  }
  // Each rank's DataLoader worker (forked, same RANK, same mappings) is not a rank.
  std::set<int> job_pids;
  for (const auto& r : ranks.value("ranks", json::array()))
    if (str_or_empty(r, "job_id") == run_id) job_pids.insert(r.value("pid", 0));
  EXPECT_EQ(job_pids, (std::set<int>{pids[0], pids[1]})) << ranks.dump(1);
  for (auto [rank, pid] : pids) {
    const json r = agent_rank_by_pid(ranks, pid);
    ASSERT_FALSE(r.is_null()) << "rank " << rank << " pid " << pid << " not tracked\n" << ranks.dump(1);
    EXPECT_EQ(str_or_empty(r, "job_id"), run_id);
    EXPECT_EQ(r.value("rank", -1), rank);
  }

  // Stacks, while training: the main thread is inside the training loop.
  for (auto [rank, pid] : pids) {
    const std::string route = "/api/v1/ranks/" + run_id + "/" + std::to_string(rank) + "/python-stacks";
    bool seen = false;
    json last;
    for (int i = 0; i < 50 && !seen; ++i) {
      if (auto d = agent.get_json(route)) {
        last = *d;
        for (const auto& t : last.value("threads", json::array()))
          seen = seen || has_in_order(functions_of(t), "train_loop", "main");
      }
      if (!seen) std::this_thread::sleep_for(200ms);
    }
    EXPECT_TRUE(seen) << "rank " << rank << ": no thread in main -> train_loop\n" << last.dump(1);
  }
  // argusctl stacks JOB: both ranks of this node, grouped.
  {
    const auto r = run_command({bin("argusctl"), "stacks", run_id, "--agent", agent.url("")}, dir);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("train_loop"), std::string::npos) << r.output;
  }
  // The sampled profile names the loop, outermost first (folded stacks).
  {
    bool seen = false;
    std::string folded;
    for (int i = 0; i < 60 && !seen; ++i) {
      folded = agent.get_text("/api/v1/ranks/" + run_id + "/0/profile?seconds=30");
      const auto loop = folded.find("train_loop");
      seen = loop != std::string::npos && folded.find("train_step", loop) != std::string::npos;
      if (!seen) std::this_thread::sleep_for(500ms);
    }
    EXPECT_TRUE(seen) << folded.substr(0, 4000);
  }

  // GC, exactly: stop training; each rank writes gc.get_stats() and lingers
  // (asleep, so its counters stay put) while the agent's counters are read.
  { std::ofstream(stop.string()) << "stop"; }
  for (int rank = 0; rank < 2; ++rank) {
    const fs::path stats_file = gcstats.string() + "." + std::to_string(rank);
    for (int i = 0; i < 300 && !fs::exists(stats_file); ++i) std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(fs::exists(stats_file)) << read_text(dir / "torchrun.log");
    const json stats = json::parse(read_text(stats_file));
    ASSERT_EQ(stats.size(), 3u);
    std::string m;
    bool equal = false;
    for (int i = 0; i < 100 && !equal; ++i) {
      m = agent.get_text("/metrics");
      equal = true;
      for (int gen = 0; gen < 3; ++gen)
        equal = equal && metric_value(m, "argus_python_gc_collections_total",
                                      {{"job_id", run_id}, {"rank", std::to_string(rank)},
                                       {"generation", std::to_string(gen)}}) ==
                             stats[gen].value("collections", -1.0);
      if (!equal) std::this_thread::sleep_for(100ms);
    }
    EXPECT_TRUE(equal) << "rank " << rank << " gc.get_stats() " << stats.dump();
    EXPECT_GT(stats[2].value("collections", 0), 0) << "gc.collect() every 40 steps ran";
    EXPECT_GT(metric_value(m, "argus_python_gc_seconds_total", {{"job_id", run_id}, {"rank", std::to_string(rank)}}),
              0.0);
  }
}

}  // namespace argus::itest
