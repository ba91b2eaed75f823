// Communicators made the ways frameworks make them, end to end on the real
// kernel: a Megatron-style job (argus-sim --tp) makes its world and DP groups
// with ncclCommInitRank and its TP groups with ncclCommSplit from the world.
// Every member of a TP group names it alike without seeing the others, the two
// TP groups are counted apart, and no communicator is left to the late-attach
// naming.
#include <set>

#include "tests/integration/harness.h"
#include "userspace/common/comm_id.h"
#include "userspace/comms/comm_names.h"

namespace argus::itest {
namespace {

// The agent's name of a communicator the sim made from a unique id: the hash
// of its first 16 bytes, which the truth gives in hex.
std::string name_of_id(const std::string& hex) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return comm_id_from_uid(bytes.data(), bytes.size());
}

TEST(AgentComms, SplitChildrenAreNamedAlikeOnEveryMemberAndCountedApart) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("split");
  Agent agent(dir, {"--debug-routes"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  // 4 ranks, TP 2, DP 2: TP groups {0,1} and {2,3} split from the world (colors 0 and 1).
  const auto truth = run_sim_job(dir, "split-job", 4, 3, {"--tp", "2"});
  ASSERT_EQ(truth.size(), 4u) << read_text(dir / "sim.log");

  // What the agent must show: per communicator, its name, members and collectives.
  std::map<std::string, std::pair<std::set<int>, uint64_t>> want;  // name -> (pids, collectives)
  for (const auto& [rank, t] : truth) {
    std::string world;
    for (const auto& c : t.at("communicators"))
      if (c.at("kind") == "world") world = name_of_id(c.at("id").get<std::string>());
    ASSERT_FALSE(world.empty());
    for (const auto& c : t.at("communicators")) {
      std::string name;
      if (c.at("made") == "split") {
        ASSERT_EQ(c.at("kind"), "tp");
        name = split_child_name(world, 1, c.at("index").get<int>());  // the world's first split, color = group index
      } else {
        name = name_of_id(c.at("id").get<std::string>());
      }
      auto& w = want[name];
      w.first.insert(t.at("pid").get<int>());
      w.second = c.at("collectives").size();
    }
  }
  ASSERT_EQ(want.size(), 5u);  // world, 2 DP, 2 TP

  json comms;
  const bool ok = eventually(
      [&] {
        auto doc = agent.get_json("/api/v1/comms");
        if (!doc) return false;
        comms = *doc;
        size_t matched = 0;
        for (const auto& c : comms.at("comms")) {
          auto w = want.find(c.at("comm").get<std::string>());
          if (w == want.end()) continue;
          matched += c.at("ranks_here").get<size_t>() == w->second.first.size() &&
                     c.at("newest_seq").get<uint64_t>() == w->second.second;
        }
        return matched == want.size();
      },
      20s);
  EXPECT_TRUE(ok) << comms.dump(1) << "\n" << agent.log();
  // Nothing named by the late-attach fallback: every making was seen.
  for (const auto& c : comms.at("comms")) EXPECT_EQ(c.at("comm").get<std::string>().rfind("job:", 0), std::string::npos);
  EXPECT_EQ(metric_value(agent.get_text("/metrics"), "argus_agent_comms_unseen_total", {}), 0.0);
  EXPECT_EQ(agent.log().find("made before the agent attached"), std::string::npos) << agent.log();
}

}  // namespace
}  // namespace argus::itest
