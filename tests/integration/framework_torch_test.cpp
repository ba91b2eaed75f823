// The framework layer on real PyTorch jobs (issue 31): torchrun with Gloo DDP
// on CPU, from the cached torch venv, running tests/python/pg_train.py. Nobody
// here wrote torch or Gloo: the c10d probes must find its process groups, count
// its calls exactly as the script counted them, and the detectors must name
// the rank the script's environment made slow or stuck, and nobody else.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

fs::path torch_venv() {
  const char* cache = std::getenv("ARGUS_CACHE_DIR");
  return fs::path(cache && *cache ? cache : "/var/cache/argus") / "torch-venv";
}

// A real 4-rank job: ranks 0 and 1 also share a group of two ("pair_group").
// `fault` is the script's own environment (PG_TRAIN_SLOW_RANK, PG_TRAIN_HANG_RANK).
class TorchJob {
 public:
  TorchJob(const fs::path& dir, const std::string& run_id, std::vector<std::string> fault,
           const std::string& step_sleep = "0.02", int workers = 0)
      : dir_(dir), truth_(dir / "truth") {
    fs::create_directories(truth_);
    fault.push_back("OMP_NUM_THREADS=1");
    job_ = std::make_unique<Child>(
        std::vector<std::string>{(torch_venv() / "bin" / "torchrun").string(), "--nnodes", "1", "--nproc_per_node",
                                 std::to_string(kRanks), "--rdzv_backend", "c10d", "--rdzv_endpoint",
                                 "127.0.0.1:" + std::to_string(free_port()), "--rdzv_id", run_id,
                                 std::string(ARGUS_SOURCE_DIR) + "/tests/python/pg_train.py", "--steps", "0",
                                 "--subgroup", "--step-sleep", step_sleep, "--truth-dir", truth_.string(), "--ready-file",
                                 (dir / "ready").string(), "--stop-file", (dir / "stop").string(), "--linger", "60",
                                 "--workers", std::to_string(workers)},
        dir / "torchrun.log", fault);
  }
  static constexpr int kRanks = 4;

  // Every rank has started training (torch's import alone takes seconds here).
  bool wait_training() {
    for (int i = 0; i < 1200; ++i) {
      int ready = 0;
      for (int r = 0; r < kRanks; ++r) ready += fs::exists(dir_.string() + "/ready." + std::to_string(r));
      if (ready == kRanks) return true;
      if (!job_->running()) return false;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  // Stops training; each rank writes what it did, then lingers (asleep).
  std::map<int, json> stop_and_read_truth() {
    { std::ofstream((dir_ / "stop").string()) << "stop"; }
    std::map<int, json> out;
    for (int i = 0; i < 600 && out.size() < kRanks; ++i) {
      for (int r = 0; r < kRanks; ++r) {
        const fs::path f = truth_ / ("rank-" + std::to_string(r) + ".json");
        if (!out.count(r) && fs::exists(f)) out[r] = json::parse(read_text(f));
      }
      std::this_thread::sleep_for(100ms);
    }
    return out;
  }
  std::string log() const { return read_text(dir_ / "torchrun.log"); }
  const fs::path& truth_dir() const { return truth_; }

 private:
  fs::path dir_, truth_;
  std::unique_ptr<Child> job_;
};

bool require_torch() {
  if (fs::exists(torch_venv() / "bin" / "torchrun")) return true;
  if (ci()) ADD_FAILURE() << "CI=true but the torch venv is missing at " << torch_venv() << " (scripts/install-deps.sh)";
  return false;
}

// The job's events of one kind once there is one (a minute at most).
json await_events(const Agent& agent, const std::string& kind, const std::string& run_id) {
  json got;
  for (int i = 0; i < 60 && got.empty(); ++i) {
    got = events_of(agent, kind, run_id);
    if (got.empty()) std::this_thread::sleep_for(1s);
  }
  return got;
}

double calls(const std::string& metrics, const std::string& job, int rank, const std::string& group,
             const std::string& op) {
  return metric_value(metrics, "argus_process_group_collectives_total",
                      {{"job_id", job}, {"rank", std::to_string(rank)}, {"group", group}, {"backend", "gloo"},
                       {"op", op}});
}

// A healthy job: both groups found and named as the script named them, every
// all-reduce counted exactly as the script counted it, and nobody named.
TEST(FrameworkTorch, GlooGroupsAreNamedCountedExactlyAndAHealthyJobNamesNobody) {
  ARGUS_REQUIRE_ROOT();
  if (!require_torch()) GTEST_SKIP() << "no torch venv at " << torch_venv();
  const auto dir = make_temp_dir("pg-healthy");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string run_id = "pghealthy" + std::to_string(getpid());
  // Steps of ~75 ms: four ranks that computed without pause on this 2-core box
  // would leave one a few ms behind every step for want of a CPU (seen once in
  // eight runs at 20 ms: 3 ms a step, named), which is the machine, not the job.
  TorchJob job(dir, run_id, {}, "0.05");
  ASSERT_TRUE(job.wait_training()) << job.log();
  std::this_thread::sleep_for(25s);  // five detection windows of a steady job

  const auto truth = job.stop_and_read_truth();
  ASSERT_EQ(truth.size(), 4u) << job.log();
  std::string m;
  bool equal = false;
  for (int i = 0; i < 100 && !equal; ++i) {
    m = agent.get_text("/metrics");
    equal = true;
    for (const auto& [rank, t] : truth) {
      for (const auto& [group, ops] : t["calls"].items())
        for (const auto& [op, n] : ops.items())
          equal = equal && calls(m, run_id, rank, group, op) == n.get<double>();
    }
    if (!equal) std::this_thread::sleep_for(100ms);
  }
  for (const auto& [rank, t] : truth) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_GT(t["calls"]["default_pg"]["all_reduce"].get<int>(), 100) << t.dump();
    for (const auto& [group, ops] : t["calls"].items())
      for (const auto& [op, n] : ops.items())
        EXPECT_EQ(calls(m, run_id, rank, group, op), n.get<double>()) << group << " " << op;
    // Ranks 2 and 3 are not in the pair: no calls there.
    if (rank >= 2) {
      EXPECT_EQ(calls(m, run_id, rank, "pair_group", "all_reduce"), -1);
    }
  }

  // The ranks' groups, as the framework made them: c10d's name, the
  // description, the rank and size in each.
  const auto ranks = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(ranks);
  int seen = 0;
  for (const auto& r : (*ranks)["ranks"]) {
    if (r.value("job_id", json()) != run_id) continue;
    ++seen;
    const int rank = r.value("rank", -1);
    std::map<std::string, json> by_label;
    for (const auto& g : r["process_groups"]) by_label[g.value("group", "")] = g;
    ASSERT_TRUE(by_label.count("default_pg")) << r["process_groups"].dump();
    EXPECT_EQ(by_label["default_pg"].value("rank", -1), rank);
    EXPECT_EQ(by_label["default_pg"].value("size", -1), 4);
    EXPECT_EQ(by_label["default_pg"].value("comm", ""), run_id + "/pg:0");
    // Members by job rank, as every member's process here made the group.
    EXPECT_EQ(by_label["default_pg"]["members"], json({0, 1, 2, 3})) << r["process_groups"].dump();
    EXPECT_TRUE(by_label["default_pg"]["nccl_comm"].is_null());  // Gloo: no NCCL communicator
    EXPECT_EQ(by_label.count("pair_group"), rank < 2 ? 1u : 0u);
    if (rank < 2) {
      EXPECT_EQ(by_label["pair_group"].value("size", -1), 2);
      EXPECT_EQ(by_label["pair_group"].value("rank", -1), rank);
      // Each synchronous all_reduce on the pair waited on its work (DDP's
      // buckets wait on futures, not timed; setup's broadcasts add some).
      EXPECT_GE(r["process_group_waits"].value("calls", 0),
                truth.at(rank)["calls"]["pair_group"]["all_reduce"].get<int>())
          << r["process_group_waits"].dump();
      EXPECT_EQ(by_label["pair_group"]["members"], json({0, 1})) << r["process_groups"].dump();
    }
  }
  EXPECT_EQ(seen, 4) << ranks->dump(1);
  EXPECT_EQ(events_of(agent, "straggler", run_id).size(), 0u) << events_of(agent, "straggler", run_id).dump(1);
  EXPECT_EQ(events_of(agent, "hang", run_id).size(), 0u) << events_of(agent, "hang", run_id).dump(1);
}

// A rank whose backward computes longer (the script's own hook, from its
// environment): named, alone, with reason compute.
TEST(FrameworkTorch, ARankWithExtraComputeInItsBackwardIsNamedForCompute) {
  ARGUS_REQUIRE_ROOT();
  if (!require_torch()) GTEST_SKIP() << "no torch venv at " << torch_venv();
  const auto dir = make_temp_dir("pg-slow");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string run_id = "pgslow" + std::to_string(getpid());
  const int slow = 2;
  TorchJob job(dir, run_id, {"PG_TRAIN_SLOW_RANK=" + std::to_string(slow) + ":40"});
  ASSERT_TRUE(job.wait_training()) << job.log();
  const json named = await_events(agent, "straggler", run_id);
  const auto truth = job.stop_and_read_truth();
  ASSERT_EQ(truth.size(), 4u) << job.log();
  EXPECT_EQ(truth.at(slow).value("slow_rank", -1), slow);  // the script made it slow
  ASSERT_FALSE(named.empty()) << agent.log();
  for (const auto& e : events_of(agent, "straggler", run_id)) {
    EXPECT_EQ(e.value("rank", -1), slow) << e.dump(1);
    EXPECT_EQ(e["evidence"].value("reason", ""), "compute") << e.dump(1);
    // Where it was late is named as the framework names it.
    std::set<std::string> groups;
    for (const auto& c : e["evidence"]["late_on"])
      if (c["group"].is_string()) groups.insert(c["group"].get<std::string>());
    EXPECT_TRUE(groups.count("default_pg")) << e["evidence"]["late_on"].dump(1);
  }
  EXPECT_EQ(events_of(agent, "hang", run_id).size(), 0u);
}

// A rank whose input pipeline cannot keep up (its one DataLoader worker's
// collate waits 80 ms a batch, as on slow storage): named, alone, for its
// dataloader, with where its main thread was when the agent looked and what
// its worker process cost.
TEST(FrameworkTorch, ARankWhoseDataLoaderStallsIsNamedForItsInput) {
  ARGUS_REQUIRE_ROOT();
  if (!require_torch()) GTEST_SKIP() << "no torch venv at " << torch_venv();
  const auto dir = make_temp_dir("pg-input");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string run_id = "pginput" + std::to_string(getpid());
  const int slow = 1;
  TorchJob job(dir, run_id, {"PG_TRAIN_SLOW_DATA_RANK=" + std::to_string(slow) + ":80"}, "0.02", 1);
  ASSERT_TRUE(job.wait_training()) << job.log();
  const json named = await_events(agent, "straggler", run_id);
  const auto truth = job.stop_and_read_truth();
  ASSERT_EQ(truth.size(), 4u) << job.log();
  EXPECT_EQ(truth.at(slow).value("slow_data_rank", -1), slow);  // the script made its input slow
  ASSERT_FALSE(named.empty()) << agent.log();
  for (const auto& e : events_of(agent, "straggler", run_id)) {
    EXPECT_EQ(e.value("rank", -1), slow) << e.dump(1);
    EXPECT_EQ(e["evidence"].value("reason", ""), "dataloader") << e.dump(1);
    const json& input = e["evidence"]["host_cause"]["input"];
    EXPECT_GT(input.value("in_dataloader_share", 0.0), input.value("peers_median_share", 1.0)) << e.dump(1);
    // Its worker, and each peer's, found among its children as the script made them.
    ASSERT_TRUE(input["workers"].is_object()) << e.dump(1);
    EXPECT_EQ(input["workers"].value("count", -1), truth.at(slow).value("workers", -2)) << e.dump(1);
    EXPECT_EQ(input["peers_median_workers"].value("count", -1), truth.at(0).value("workers", -2)) << e.dump(1);
    EXPECT_NE(e.value("summary", "").find("DataLoader"), std::string::npos) << e.dump(1);
  }
  EXPECT_EQ(events_of(agent, "hang", run_id).size(), 0u);
}

// A rank that never reaches its next all-reduce (stuck in the script's
// wait_for_checkpoint): the hang names it, on the world group, with its stack.
TEST(FrameworkTorch, ARankThatNeverReachesItsAllReduceIsNamedByTheHangWithItsStack) {
  ARGUS_REQUIRE_ROOT();
  if (!require_torch()) GTEST_SKIP() << "no torch venv at " << torch_venv();
  const auto dir = make_temp_dir("pg-hang");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string run_id = "pghang" + std::to_string(getpid());
  const int stuck = 3;
  TorchJob job(dir, run_id, {"PG_TRAIN_HANG_RANK=" + std::to_string(stuck) + ":60"});
  ASSERT_TRUE(job.wait_training()) << job.log();
  const fs::path hang_file = job.truth_dir() / ("hang-" + std::to_string(stuck) + ".json");
  for (int i = 0; i < 600 && !fs::exists(hang_file); ++i) std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(fs::exists(hang_file)) << job.log();
  const json truth = json::parse(read_text(hang_file));
  const json hangs = await_events(agent, "hang", run_id);
  ASSERT_FALSE(hangs.empty()) << agent.log();
  const json& h = hangs[0];
  EXPECT_EQ(h.value("rank", -1), stuck) << h.dump(1);
  EXPECT_EQ(h["evidence"].value("cause", ""), "missing_rank") << h.dump(1);
  EXPECT_EQ(h["evidence"].value("group", ""), "default_pg") << h.dump(1);
  EXPECT_NE(h.value("summary", "").find("on default_pg (ranks 0-3)"), std::string::npos) << h.dump(1);
  EXPECT_EQ(h["evidence"]["group_ranks"], json({0, 1, 2, 3})) << h.dump(1);
  ASSERT_EQ(h["evidence"]["missing"].size(), 1u) << h.dump(1);
  EXPECT_EQ(h["evidence"]["missing"][0].value("pid", 0), truth.value("pid", -1));
  EXPECT_NE(h["evidence"].dump().find("wait_for_checkpoint"), std::string::npos) << h.dump(1);
  EXPECT_EQ(events_of(agent, "straggler", run_id).size(), 0u) << events_of(agent, "straggler", run_id).dump(1);
}

}  // namespace
}  // namespace argus::itest
