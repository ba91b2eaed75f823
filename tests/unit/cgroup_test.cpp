// /proc/PID/cgroup parsing and the controller directories it leads to, on
// temp trees laid out as v1 (joint cpu,cpuacct), pure v2 and the hybrid layout.
#include "userspace/procfs/cgroup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace argus::procfs {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << content;
}

TEST(Cgroup, ParsesV1V2AndNamedLinesAndCountsMalformed) {
  const auto cg = parse_cgroup(
      "12:cpu,cpuacct:/kubepods/burstable/pod1/abc\n"
      "9:name=systemd:/system.slice/x\n"
      "0::/kubepods.slice/a:b\n"
      "garbage\n"
      "x:cpu:/a\n"
      "4:memory:relative\n"
      "5:pids:/a/../escape\n");
  ASSERT_EQ(cg.lines.size(), 3u);
  EXPECT_EQ(cg.malformed_lines, 4u);
  EXPECT_EQ(cg.lines[0].hierarchy, 12);
  EXPECT_EQ(cg.lines[0].controllers, (std::vector<std::string>{"cpu", "cpuacct"}));
  EXPECT_EQ(cg.lines[0].path, "/kubepods/burstable/pod1/abc");
  EXPECT_EQ(cg.lines[1].name, "systemd");
  EXPECT_TRUE(cg.lines[1].controllers.empty());
  EXPECT_EQ(cg.lines[2].path, "/kubepods.slice/a:b");  // ':' inside the path is kept
}

// The agent in a cgroup namespace of its own: the kernel writes the path of a
// cgroup outside it with leading "..". It names the cgroup, but no directory.
TEST(Cgroup, PathOutsideTheReadersNamespaceIsKeptButHasNoDirectory) {
  testing_support::TempDir t("cgroup");
  put(t.path / "fs/cgroup/cpu/burstable/pod1/c1/cpu.stat", "nr_periods 1\n");
  put(t.path / "fs/cgroup/cgroup.controllers", "cpu memory\n");
  put(t.path / "fs/cgroup/burstable/pod1/c1/cgroup.procs", "1\n");
  const auto cg = parse_cgroup("4:cpu:/../../burstable/pod1/c1\n0::/../../burstable/pod1/c1\n");
  ASSERT_EQ(cg.lines.size(), 2u);
  EXPECT_EQ(cg.malformed_lines, 0u);
  EXPECT_TRUE(cg.lines[0].outside_namespace);
  EXPECT_EQ(cg.lines[0].path, "/../../burstable/pod1/c1");
  EXPECT_FALSE(cgroup_dir(cg, t.str(), "cpu"));  // never joined onto the node's mount
  EXPECT_FALSE(cgroup_dir(cg, t.str(), "memory"));
  EXPECT_FALSE(parse_cgroup("0::/kubepods/pod1\n").lines[0].outside_namespace);
  EXPECT_EQ(parse_cgroup("0::/../a/../b\n").malformed_lines, 1u);  // ".." after a name
}

TEST(Cgroup, JoiningTheNodesCgroupNamespaceFromItAndFromAFixtureRoot) {
  using Outcome = CgroupNamespaceJoin::Outcome;
  testing_support::TempDir t("cgroup-ns");
  EXPECT_EQ(join_node_cgroup_namespace(t.str()).outcome, Outcome::kUnknown);  // no pid 1 or 2 there
  if (::geteuid() != 0) GTEST_SKIP() << "reading kthreadd's ns links needs root";
  // The tests run in the node's initial cgroup namespace here (the agent in its
  // own one is PodIdentity.AgentInItsOwnCgroupNamespace*, as root).
  const auto j = join_node_cgroup_namespace("/proc");
  EXPECT_EQ(j.outcome, Outcome::kAlreadyThere) << j.detail;
}

TEST(Cgroup, V1JointMountIsFound) {
  testing_support::TempDir t("cgroup");
  put(t.path / "fs/cgroup/cpu,cpuacct/kubepods/p1/c1/cpu.stat", "nr_periods 1\n");
  put(t.path / "fs/cgroup/memory/kubepods/p1/c1/memory.stat", "");
  const auto cg = parse_cgroup("3:cpu,cpuacct:/kubepods/p1/c1\n2:memory:/kubepods/p1/c1\n0::/\n");
  auto cpu = cgroup_dir(cg, t.str(), "cpu");
  ASSERT_TRUE(cpu);
  EXPECT_EQ(cpu->version, 1);
  EXPECT_EQ(cpu->dir, t.str() + "/fs/cgroup/cpu,cpuacct/kubepods/p1/c1");
  auto mem = cgroup_dir(cg, t.str(), "memory");
  ASSERT_TRUE(mem);
  EXPECT_EQ(mem->dir, t.str() + "/fs/cgroup/memory/kubepods/p1/c1");
  EXPECT_FALSE(cgroup_dir(cg, t.str(), "pids"));  // not in the file, and no v2 controller list
}

TEST(Cgroup, PureV2AndHybridV2) {
  testing_support::TempDir t("cgroup");
  put(t.path / "fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
  put(t.path / "fs/cgroup/kubepods.slice/x.scope/cgroup.procs", "1\n");
  const auto cg = parse_cgroup("0::/kubepods.slice/x.scope\n");
  auto cpu = cgroup_dir(cg, t.str(), "cpu");
  ASSERT_TRUE(cpu);
  EXPECT_EQ(cpu->version, 2);
  EXPECT_EQ(cpu->dir, t.str() + "/fs/cgroup/kubepods.slice/x.scope");
  EXPECT_FALSE(cgroup_dir(cg, t.str(), "hugetlb"));  // not enabled in this tree

  testing_support::TempDir h("cgroup");
  put(h.path / "fs/cgroup/unified/cgroup.controllers", "memory\n");
  put(h.path / "fs/cgroup/unified/job/cgroup.procs", "1\n");
  auto mem = cgroup_dir(parse_cgroup("0::/job\n"), h.str(), "memory");
  ASSERT_TRUE(mem);
  EXPECT_EQ(mem->dir, h.str() + "/fs/cgroup/unified/job");
}

TEST(Cgroup, ReadsOwnProcessOnThisNode) {
  auto cg = read_cgroup("/proc", static_cast<int>(::getpid()));
  ASSERT_TRUE(cg.ok()) << cg.error();
  EXPECT_FALSE(cg->lines.empty());
  EXPECT_EQ(cg->malformed_lines, 0u);
  EXPECT_FALSE(read_cgroup("/proc", 0x7ffffff0).ok());
}

}  // namespace
}  // namespace argus::procfs
