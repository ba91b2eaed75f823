// The agent as a DaemonSet runs it: not root, with exactly the capabilities the
// layers need (docs/security.md). With them it counts a job exactly; without
// one, it says at start which layer goes blind, and /metrics shows it.
#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

// The capabilities the agent asks for, by setpriv's names and CapEff bits.
const std::vector<std::pair<std::string, int>> kWanted = {
    {"bpf", 39}, {"perfmon", 38}, {"sys_ptrace", 19}, {"dac_read_search", 2}, {"sys_resource", 24}, {"sys_admin", 21}};

uint64_t own_bounding_set() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("CapBnd:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  return 0;
}

// setpriv as user nobody with `caps` (those this machine can grant at all).
std::vector<std::string> as_nobody_with(const std::vector<std::string>& caps) {
  std::string set = "-all";
  for (const auto& c : caps) set += ",+" + c;
  return {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=" + set, "--ambient-caps=" + set};
}

std::vector<std::string> grantable(const std::vector<std::string>& except = {}) {
  const uint64_t bounding = own_bounding_set();
  std::vector<std::string> out;
  for (const auto& [name, bit] : kWanted)
    if (((bounding >> bit) & 1u) && std::find(except.begin(), except.end(), name) == except.end()) out.push_back(name);
  return out;
}

int agent_uid(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Uid:", 0) == 0) return std::stoi(line.substr(4));
  return -1;
}

TEST(Privileges, NonRootWithTheLayersCapabilitiesCountsAJobExactly) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("caps");
  fs::permissions(dir, fs::perms::all);  // nobody writes nothing here, but reads the truth dir
  const auto caps = grantable();
  Agent agent(dir, {}, as_nobody_with(caps));
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  EXPECT_EQ(agent_uid(agent.child().pid()), 65534);
  const std::string m = agent.get_text("/metrics");
  for (const auto& name : {"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH", "CAP_SYS_ADMIN"})
    EXPECT_EQ(metric_value(m, "argus_agent_capability", {{"capability", name}}), 1) << name << "\n" << m;
  // This VM's root has no CAP_SYS_RESOURCE to give (docs: ENVIRONMENT); where it
  // cannot be granted, the agent runs without it and says so.
  if (std::find(caps.begin(), caps.end(), "sys_resource") == caps.end()) {
    EXPECT_EQ(metric_value(m, "argus_agent_capability", {{"capability", "CAP_SYS_RESOURCE"}}), 0);
    EXPECT_NE(agent.log().find("running without CAP_SYS_RESOURCE (limits)"), std::string::npos) << agent.log();
  }

  const auto out = dir / "truth";
  Child sim(sim_args(out, "caps-job", 2, 10), dir / "sim.log");
  auto st = sim.wait_for(120s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  EXPECT_EQ(wait_for_match(agent, truth, false), "") << agent.log();
}

TEST(Privileges, WithoutSysPtraceDiscoveryIsBlindAndSaysSo) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("noptrace");
  Agent agent(dir, {}, as_nobody_with(grantable({"sys_ptrace"})));
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  EXPECT_NE(agent.log().find("running without CAP_SYS_PTRACE (discovery)"), std::string::npos) << agent.log();
  EXPECT_EQ(metric_value(agent.get_text("/metrics"), "argus_agent_capability", {{"capability", "CAP_SYS_PTRACE"}}), 0);
  // Root's ranks cannot be read by nobody without it: counted, not silently missed.
  const auto out = dir / "truth";
  Child sim(sim_args(out, "blind-job", 2, 30), dir / "sim.log");
  bool counted = false;
  for (int i = 0; i < 50 && !counted; ++i) {
    counted = metric_value(agent.get_text("/metrics"), "argus_agent_discovery_skips_total", {{"reason", "permission"}}) > 0;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(counted) << agent.log();
  sim.wait_for(120s);
}

}  // namespace
}  // namespace argus::itest
