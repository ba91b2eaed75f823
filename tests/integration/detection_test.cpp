// Stragglers and hangs end to end: the simulator injects the fault into a
// random rank; the agent must name that rank, and only that rank.
#include <random>
#include <set>

#include "harness.h"

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

TEST(Detection, StragglerNamedAloneWithEvidence) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("straggler");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int slow = random_rank(6);
  const std::string job = "strag-" + std::to_string(slow);
  Child sim({bin("argus-sim"), "--ranks", "6", "--steps", "0", "--step-ms", "60", "--init-ms", "200", "--job-id", job,
             "--straggler", std::to_string(slow) + ":2.5", "--quiet"},
            dir / "sim.log");
  auto [now, ever] = wait_flag(agent, job, "straggler", 40s);
  EXPECT_EQ(now, std::set<int>{slow}) << agent.log();
  EXPECT_EQ(ever, std::set<int>{slow});
  auto evs = events_of(agent, "straggler", job);
  ASSERT_EQ(evs.size(), 1u) << evs.dump();
  const auto& ev = evs[0];
  EXPECT_EQ(ev["rank"], slow);
  EXPECT_NE(ev["summary"].get<std::string>().find("rank " + std::to_string(slow) + " of job " + job), std::string::npos);
  EXPECT_TRUE(ev["evidence"].contains("wait_ratio"));
  EXPECT_TRUE(ev["evidence"].contains("mean_lag_seconds"));
  EXPECT_EQ(ev["evidence"]["peers"].size(), 6u);
  EXPECT_EQ(ev["evidence"]["window_seconds"], 5);
  // The metrics say the same.
  const std::string m = agent.get_text("/metrics");
  EXPECT_NE(m.find("argus_straggler{job_id=\"" + job + "\",rank=\"" + std::to_string(slow) + "\"} 1"),
            std::string::npos);
}

TEST(Detection, HungRankNamedAlone) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("hang");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int hung = random_rank(4);
  const std::string job = "hang-" + std::to_string(hung);
  Child sim({bin("argus-sim"), "--ranks", "4", "--steps", "0", "--step-ms", "50", "--init-ms", "200", "--job-id", job,
             "--hang", std::to_string(hung) + ":60", "--quiet"},
            dir / "sim.log");
  auto [now, ever] = wait_flag(agent, job, "hang_missing", 45s);
  EXPECT_EQ(now, std::set<int>{hung}) << agent.log();
  EXPECT_EQ(ever, std::set<int>{hung});
  auto evs = events_of(agent, "hang", job);
  ASSERT_GE(evs.size(), 1u);
  EXPECT_EQ(evs[0]["rank"], hung);
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("for rank " + std::to_string(hung)), std::string::npos)
      << evs[0]["summary"];
  const std::string m = agent.get_text("/metrics");
  const auto pos = m.find("argus_collective_stalled_seconds{job_id=\"" + job + "\"");
  ASSERT_NE(pos, std::string::npos) << m;
  EXPECT_GE(std::stod(m.substr(m.find(' ', pos) + 1)), 10.0);  // the default stall threshold
}

TEST(Detection, ExitedRankCountsAsMissingAndSaysSo) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("exit");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int gone = random_rank(4);
  const std::string job = "exit-" + std::to_string(gone);
  Child sim({bin("argus-sim"), "--ranks", "4", "--steps", "0", "--step-ms", "50", "--init-ms", "200", "--job-id", job,
             "--exit", std::to_string(gone) + ":60", "--quiet"},
            dir / "sim.log");
  auto [now, ever] = wait_flag(agent, job, "hang_missing", 45s);
  EXPECT_EQ(now, std::set<int>{gone}) << agent.log();
  auto evs = events_of(agent, "hang", job);
  ASSERT_GE(evs.size(), 1u);
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("(exited: exit 1)"), std::string::npos) << evs[0]["summary"];
  EXPECT_EQ(evs[0]["evidence"]["missing"][0]["exited"], true);
  EXPECT_EQ(events_of(agent, "rank_exit", job).size(), 1u);
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

}  // namespace
}  // namespace argus::itest
