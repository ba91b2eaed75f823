// GPU Xid lines end to end: the test writes driver-formatted lines into the real
// /dev/kmsg as root (good ones and malformed ones) while a simulated job runs;
// the agent counts them per GPU and code and names the ranks on each GPU, by
// the line's pid or through the rank -> GPU map (a sysfs fixture's GPU map).
#include <fcntl.h>
#include <unistd.h>

#include <fstream>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

json xid_events(const Agent& agent) {
  json out = json::array();
  if (auto doc = agent.get_json("/api/v1/events?since=0"))
    for (const auto& e : (*doc)["events"])
      if (e.value("kind", "") == "xid") out.push_back(e);
  return out;
}

TEST(KernelXid, LinesAreCountedAndNameTheRanksOnTheGpu) {
  ARGUS_REQUIRE_ROOT();
  const fs::path dir = make_temp_dir("xid");
  // Two GPUs the rank -> GPU map knows: index 0 and 1 (the sim's ranks use GPU LOCAL_RANK).
  const fs::path sys = dir / "sys";
  fs::create_directories(sys / "bus" / "pci" / "devices");
  std::ofstream(sys / "argus-sim-gpu-map") << "0 0000:1b:00.0\n1 0000:3b:00.0\n";
  Agent agent(dir, {"--sysfs-root", sys.string()});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string job = "xid-" + std::to_string(::getpid());
  Child sim(sim_args(dir / "sim", job, 2, 0), dir / "sim.log");

  // Both ranks identified, and rank 0's pid known (the line below names it as the driver would).
  int rank0_pid = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline && rank0_pid == 0) {
    int seen = 0;
    if (auto doc = agent.get_json("/api/v1/ranks"))
      for (const auto& r : (*doc)["ranks"])
        if (r.value("job_id", json()) == job && !r.value("exited", false)) {
          ++seen;
          if (r.value("rank", -1) == 0) rank0_pid = r.at("pid").get<int>();
        }
    if (seen < 2) rank0_pid = 0;
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_NE(rank0_pid, 0) << agent.log();

  const std::string tag = std::to_string(::getpid());
  ASSERT_TRUE(write_kmsg("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus. test " + tag));
  ASSERT_TRUE(write_kmsg("NVRM: Xid (PCI:0000:99:00): 13, pid=" + std::to_string(rank0_pid) +
                         ", name=argus-sim, Graphics SM Warp Exception test " + tag));
  ASSERT_TRUE(write_kmsg("NVRM: Xid (PCI:0000:3b:00): not-a-code, test " + tag));
  ASSERT_TRUE(write_kmsg("NVRM: Xid (PCI:0000:zz:00): 48, test " + tag));
  ASSERT_TRUE(write_kmsg("NVRM: Xid (PCI:0000:77:00): 48, pid='<unknown>', name=<unknown>, double bit test " + tag));
  ASSERT_TRUE(write_kmsg("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus. again " + tag));

  std::string m;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    m = agent.get_text("/metrics");
    if (metric_value(m, "argus_gpu_xid_errors_total", {{"pci_bus_id", "0000:77:00"}}) == 1 &&
        metric_value(m, "argus_gpu_xid_errors_total", {{"pci_bus_id", "0000:3b:00"}}) == 2)
      break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(metric_value(m, "argus_gpu_xid_errors_total", {{"pci_bus_id", "0000:3b:00"}, {"xid", "79"}}), 2) << m;
  EXPECT_EQ(metric_value(m, "argus_gpu_xid_errors_total", {{"pci_bus_id", "0000:99:00"}, {"xid", "13"}}), 1);
  EXPECT_EQ(metric_value(m, "argus_gpu_xid_errors_total", {{"pci_bus_id", "0000:77:00"}, {"xid", "48"}}), 1);
  EXPECT_EQ(metric_value(m, "argus_agent_kmsg_malformed_total", {}), 2);
  EXPECT_EQ(metric_value(m, "argus_agent_kmsg_up", {}), 1);

  const json evs = xid_events(agent);
  int by_gpu = 0, by_pid = 0, nobody = 0;
  for (const auto& e : evs) {
    const auto& ev = e["evidence"];
    if (ev["pci_bus_id"] == "0000:3b:00") {
      ++by_gpu;
      EXPECT_EQ(e["job_id"], job);
      EXPECT_EQ(e["rank"], 1);
      EXPECT_EQ(ev["matched_by"], "gpu_index");
      EXPECT_NE(e["summary"].get<std::string>().find("fallen off the bus"), std::string::npos) << e;
    } else if (ev["pci_bus_id"] == "0000:99:00") {
      ++by_pid;
      EXPECT_EQ(e["rank"], 0);
      EXPECT_EQ(ev["matched_by"], "pid");
      EXPECT_EQ(ev["pid"], rank0_pid);
      EXPECT_EQ(ev["process_name"], "argus-sim");
    } else if (ev["pci_bus_id"] == "0000:77:00") {
      ++nobody;
      EXPECT_TRUE(e["rank"].is_null()) << e;
    }
  }
  EXPECT_EQ(by_gpu, 2) << evs.dump(1);
  EXPECT_EQ(by_pid, 1) << evs.dump(1);
  EXPECT_EQ(nobody, 1) << evs.dump(1);
  sim.terminate();
}

}  // namespace
}  // namespace argus::itest

namespace argus::itest {
namespace {

// A kernel log the agent cannot open blinds the Xid layer only: the agent runs,
// says so once after its listen line, and exports argus_agent_kmsg_up 0.
TEST(KernelXid, UnreadableLogIsSaidAndExported) {
  ARGUS_REQUIRE_ROOT();
  const fs::path dir = make_temp_dir("xid-off");
  Agent agent(dir, {"--kmsg", (dir / "no-such-kmsg").string()});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  EXPECT_EQ(metric_value(agent.get_text("/metrics"), "argus_agent_kmsg_up", {}), 0);
  EXPECT_NE(agent.log().find("GPU Xid lines are not followed: cannot open"), std::string::npos) << agent.log();
}

}  // namespace
}  // namespace argus::itest
