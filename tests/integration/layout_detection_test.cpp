// Stragglers and hangs end to end in jobs laid out as frameworks lay them out:
// tensor parallel pairs inside data parallel groups, a 1F1B pipeline with
// gradient accumulation, MoE all-to-alls over grouped send/recv; per-rank
// jitter; both NCCL modes. The simulator injects the fault into a random rank
// and records it (its truth file); the agent must name that rank alone, with a
// reason of the fault's kind, and nobody in a healthy job.
#include <random>
#include <set>
#include <thread>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

std::set<int> flagged_now(const Agent& agent, const std::string& job, const char* field) {
  std::set<int> out;
  if (auto doc = agent.get_json("/api/v1/ranks"))
    for (const auto& r : (*doc).at("ranks"))
      if (r.value("job_id", json()) == job && r.value(field, false)) out.insert(r.at("rank").get<int>());
  return out;
}

int random_rank(int ranks) {
  std::random_device rd;
  return static_cast<int>(rd() % static_cast<unsigned>(ranks));
}

bool truth_has_fault(const fs::path& out, int rank, const std::string& kind) {
  const auto path = out / ("rank-" + std::to_string(rank) + ".json");
  for (int i = 0; i < 50 && !fs::exists(path); ++i) std::this_thread::sleep_for(100ms);
  if (!fs::exists(path)) return false;
  const json truth = json::parse(read_text(path));
  for (const auto& f : truth.at("faults"))
    if (f.value("kind", "") == kind) return true;
  return false;
}

struct LayoutCase {
  const char* name;
  std::vector<std::string> layout;  // the layout and its mode
  std::vector<std::string> fault;   // "R" stands for the injected rank
  const char* fault_kind;           // the truth's fault kind
  std::set<std::string> reasons;    // reasons of the right kind
  bool gpu_layer = false;
};
inline void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

class LayoutDetection : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(LayoutDetection, NamesTheInjectedRankAloneWithAReasonOfItsKind) {
  ARGUS_REQUIRE_ROOT();
  const LayoutCase c = GetParam();
  const auto dir = make_temp_dir(std::string("layout-") + c.name);
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int slow = random_rank(8);
  const std::string job = std::string(c.name) + "-" + std::to_string(slow);
  std::vector<std::string> argv = {bin("argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", "60", "--init-ms",
                                   "200", "--job-id", job, "--out", (dir / "truth").string(), "--quiet",
                                   "--jitter", "10"};
  argv.insert(argv.end(), c.layout.begin(), c.layout.end());
  for (const auto& a : c.fault) argv.push_back(a.rfind("R:", 0) == 0 ? std::to_string(slow) + a.substr(1) : a);
  Child sim(argv, dir / "sim.log", {std::string("ARGUS_SIM_GPU_ACTIVITY=") + (c.gpu_layer ? "1" : "0")});
  std::set<int> ever, now;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline && now.empty()) {
    now = flagged_now(agent, job, "straggler");
    ever.insert(now.begin(), now.end());
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(now, std::set<int>{slow}) << agent.log() << read_text(dir / "sim.log");
  // A few more seconds: nobody else is named meanwhile.
  for (int i = 0; i < 15; ++i) {
    auto more = flagged_now(agent, job, "straggler");
    ever.insert(more.begin(), more.end());
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(ever, std::set<int>{slow});
  EXPECT_TRUE(truth_has_fault(dir / "truth", slow, c.fault_kind)) << c.fault_kind;
  const auto evs = events_of(agent, "straggler", job);
  ASSERT_EQ(evs.size(), 1u) << evs.dump();
  EXPECT_EQ(evs[0]["rank"], slow);
  EXPECT_TRUE(c.reasons.count(evs[0]["evidence"]["reason"].get<std::string>())) << evs[0]["summary"];
  EXPECT_FALSE(evs[0]["evidence"]["late_on"].empty()) << evs[0].dump();
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayoutDetection,
    ::testing::Values(
        LayoutCase{"tp2_async_host", {"--tp", "2"}, {"--straggler", "R:1.8"}, "straggler", {"host", "compute"}},
        LayoutCase{"tp2_blocking_host", {"--tp", "2", "--nccl-mode", "blocking"}, {"--straggler", "R:1.8"}, "straggler",
                   {"host", "compute"}},
        LayoutCase{"tp2_pp2_accum4_host", {"--tp", "2", "--pp", "2", "--accum", "4"}, {"--straggler", "R:1.8"},
                   "straggler", {"host", "compute"}},
        LayoutCase{"ep4_async_host", {"--ep", "4"}, {"--straggler", "R:1.8"}, "straggler", {"host", "compute"}},
        // Blocking, with the GPU layer: a stage-0 rank waits for the next stage's
        // backward by the schedule, as its replicas do (not a victim's wait), and
        // a slow host's NCCL kernels are the shortest too (its reason stays its host).
        LayoutCase{"tp2_pp2_blocking_host", {"--tp", "2", "--pp", "2", "--accum", "2", "--nccl-mode", "blocking"},
                   {"--straggler", "R:1.7"}, "straggler", {"host", "compute"}, true},
        LayoutCase{"tp2_gpu_sync_first", {"--tp", "2", "--sync-before-coll"}, {"--gpu-slow", "R:3"}, "gpu_slow",
                   {"gpu", "sync"}, true},
        // Its pipeline partner's synchronize waits on a receive from it, as
        // long: the GPU layer tells them apart, and neither is named before.
        LayoutCase{"pp2_accum4_gpu_sync_first", {"--pp", "2", "--accum", "4", "--sync-before-coll"},
                   {"--gpu-slow", "R:2.5"}, "gpu_slow", {"gpu", "sync"}, true}),
    [](const auto& info) { return std::string(info.param.name); });

// The same without the GPU layer: a receive that waits on the GPU for a slow
// partner's send holds its synchronize as long as the slow GPU holds its own,
// and the hosts' times cannot always tell the two apart (a slow last stage
// finishes exactly as late as its partner). The slow rank is named; if its
// partner is named too, its event says the two are late alike, and nobody
// else is named.
TEST(LayoutDetection, PipelinePartnersLateAlikeInTheirSynchronizeAreSaidToBe) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("layout-pp-gpu-alike");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int slow = random_rank(8), partner = (slow + 4) % 8;  // stage of r = r / dp (PP 2 x DP 4)
  SCOPED_TRACE("GPU-slow rank " + std::to_string(slow));
  const std::string job = "pp-gpu-alike-" + std::to_string(slow);
  Child sim({bin("argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", "60", "--init-ms", "200", "--job-id", job,
             "--out", (dir / "truth").string(), "--quiet", "--jitter", "10", "--pp", "2", "--accum", "4",
             "--sync-before-coll", "--gpu-slow", std::to_string(slow) + ":2.5"},
            dir / "sim.log", {"ARGUS_SIM_GPU_ACTIVITY=0"});
  std::set<int> ever;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline && !ever.count(slow)) {
    auto now = flagged_now(agent, job, "straggler");
    ever.insert(now.begin(), now.end());
    std::this_thread::sleep_for(200ms);
  }
  for (int i = 0; i < 25; ++i) {  // a few seconds more: the partner, or nobody else
    auto more = flagged_now(agent, job, "straggler");
    ever.insert(more.begin(), more.end());
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(truth_has_fault(dir / "truth", slow, "gpu_slow"));
  EXPECT_TRUE(ever.count(slow)) << agent.log();
  std::set<int> allowed = {slow, partner};
  for (int r : ever) EXPECT_TRUE(allowed.count(r)) << "named " << r;
  for (const auto& e : events_of(agent, "straggler", job)) {
    EXPECT_EQ(e["evidence"]["reason"], "sync") << e["summary"];
    if (e["rank"] != partner) continue;  // the partner is named only with the slow rank as its alike
    EXPECT_EQ(e["evidence"]["late_alike_ranks"], json::array({slow})) << e.dump();
    EXPECT_NE(e["summary"].get<std::string>().find("or that of rank " + std::to_string(slow)), std::string::npos)
        << e["summary"];
  }
}

// A healthy job of each shape, 30% jitter, an evaluation pause and a
// checkpoint on rank 0 shorter than the hang threshold: nobody named, no hang.
TEST(LayoutDetection, HealthyJobsWithJitterPausesAndACheckpointNameNobody) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("layout-healthy");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string job = "healthy-layout";
  Child sim({bin("argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", "60", "--init-ms", "200", "--job-id", job,
             "--quiet", "--tp", "2", "--pp", "2", "--accum", "2", "--jitter", "30", "--eval-every", "100:1500",
             "--checkpoint", "0:150:4000"},
            dir / "sim.log");
  std::set<int> ever;
  const auto end = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < end) {
    auto now = flagged_now(agent, job, "straggler");
    ever.insert(now.begin(), now.end());
    std::this_thread::sleep_for(500ms);
  }
  std::string named;
  for (const auto& e : events_of(agent, "straggler", job))
    named += e["summary"].get<std::string>() + "\n  late_on " + e["evidence"]["late_on"].dump() + "\n";
  EXPECT_TRUE(ever.empty()) << named;
  EXPECT_TRUE(events_of(agent, "straggler", job).empty());
  EXPECT_TRUE(events_of(agent, "hang", job).empty()) << events_of(agent, "hang", job).dump();
  // It did run: the agent saw its communicators (world, tp, dp, pp) and steps.
  const auto ranks = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(ranks);
  int seen = 0;
  for (const auto& r : (*ranks)["ranks"])
    if (r.value("job_id", json()) == job) ++seen;
  EXPECT_EQ(seen, 8);
}

// A whole pipeline stage slow (TP 2 x PP 2 x DP 2, every host of one stage
// 1.6x slow): its ranks are late on their pairs alike, as a pipeline's shape
// makes a stage late on every replica, but by far more, and every host of the
// stage is the busy one. The stage is named, rank by rank, and nobody else.
TEST(LayoutDetection, ASlowPipelineStageIsNamedRankByRank) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("layout-slow-stage");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int stage = random_rank(2);
  SCOPED_TRACE("slow stage " + std::to_string(stage));
  const std::string job = "slow-stage-" + std::to_string(stage);
  std::vector<std::string> argv = {bin("argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", "60",
                                   "--init-ms", "200", "--job-id", job, "--out", (dir / "truth").string(),
                                   "--quiet", "--jitter", "10", "--tp", "2", "--pp", "2", "--accum", "2"};
  std::set<int> stage_ranks;
  for (int r = 4 * stage; r < 4 * stage + 4; ++r) {  // stage of r = r / (tp x dp)
    stage_ranks.insert(r);
    argv.insert(argv.end(), {"--straggler", std::to_string(r) + ":1.6"});
  }
  Child sim(argv, dir / "sim.log");
  std::set<int> ever, now;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline && now != stage_ranks) {
    now = flagged_now(agent, job, "straggler");
    ever.insert(now.begin(), now.end());
    std::this_thread::sleep_for(200ms);
  }
  for (int i = 0; i < 15; ++i) {  // a few seconds more: nobody else is named
    auto more = flagged_now(agent, job, "straggler");
    ever.insert(more.begin(), more.end());
    std::this_thread::sleep_for(200ms);
  }
  std::string named;
  for (int r : ever) named += " " + std::to_string(r);
  std::printf("[ slow stage %d ] named:%s\n", stage, named.c_str());
  EXPECT_EQ(now, stage_ranks) << agent.log() << read_text(dir / "sim.log");
  EXPECT_EQ(ever, stage_ranks);
  for (int r : stage_ranks) EXPECT_TRUE(truth_has_fault(dir / "truth", r, "straggler")) << r;
  for (const auto& e : events_of(agent, "straggler", job)) {
    const std::string reason = e["evidence"]["reason"];
    EXPECT_TRUE(reason == "host" || reason == "compute") << e["summary"];
  }
}

// A pipeline rank that hangs before its step's first NCCL call: its
// neighbour's receive never gets its send. The hang names it, in either mode:
// with a blocking backend the ranks it holds up sit in their ncclGroupEnd
// (the exchange's wait), links of its chain, not hangs of their own.
void expect_a_pipeline_hang_named(const std::string& mode) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("layout-pp-hang-" + mode);
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int hung = random_rank(8);
  SCOPED_TRACE("hung rank " + std::to_string(hung));
  const std::string job = "pp-hang-" + mode + "-" + std::to_string(hung);
  Child sim({bin("argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", "60", "--init-ms", "200", "--job-id", job,
             "--quiet", "--out", (dir / "truth").string(), "--tp", "2", "--pp", "2", "--accum", "4", "--nccl-mode",
             mode, "--hang", std::to_string(hung) + ":40"},
            dir / "sim.log");
  json hang;
  std::set<int> missing;  // ranks ever flagged hang_missing
  auto watch = [&] {
    const auto now = flagged_now(agent, job, "hang_missing");
    missing.insert(now.begin(), now.end());
  };
  ASSERT_TRUE(eventually(
      [&] {
        watch();
        const auto evs = events_of(agent, "hang", job);
        if (!evs.empty()) hang = evs[0];
        return !evs.empty();
      },
      60s))
      << agent.log();
  for (int i = 0; i < 10; ++i, std::this_thread::sleep_for(300ms)) watch();  // and a few passes more
  EXPECT_EQ(missing, std::set<int>{hung});
  EXPECT_TRUE(truth_has_fault(dir / "truth", hung, "hang"));
  // Every hang event names the rank that hung (a collective it never issued,
  // or a send it never made): the ranks it holds up are links of its chain,
  // in the events' rank states, not events of their own.
  for (const auto& e : events_of(agent, "hang", job)) EXPECT_EQ(e["rank"], hung) << e["summary"];
  const std::string cause = hang["evidence"]["cause"];
  EXPECT_TRUE(cause == "missing_rank" || cause == "peer_never_sent") << hang.dump();
}

TEST(LayoutDetection, APipelineHangNamesTheRankThatNeverSent) { expect_a_pipeline_hang_named("async"); }

TEST(LayoutDetection, APipelineHangNamesTheRankThatNeverSentWithABlockingBackend) {
  expect_a_pipeline_hang_named("blocking");
}

}  // namespace
}  // namespace argus::itest
