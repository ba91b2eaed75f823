// cpu.stat of a rank's cgroup: v2 (throttled_usec) and v1 (throttled_time in
// ns) on temp trees found through cgroup_dir, and malformed files refused.
#include "userspace/procfs/cpu_stat.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"
#include "userspace/procfs/cgroup.h"

namespace argus::procfs {
namespace {

namespace fs = std::filesystem;

void put(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << content;
}

TEST(CpuStat, V2ThrottledUsecFromTheUnifiedTree) {
  testing_support::TempDir t("cpustat");
  put(t.path / "fs/cgroup/cgroup.controllers", "cpu memory\n");
  put(t.path / "fs/cgroup/job.slice/r0/cgroup.procs", "1\n");
  put(t.path / "fs/cgroup/job.slice/r0/cpu.stat",
      "usage_usec 900\nuser_usec 600\nsystem_usec 300\nnr_periods 250\nnr_throttled 40\n"
      "throttled_usec 1250000\nnr_bursts 0\nburst_usec 0\n");
  auto dir = cgroup_dir(parse_cgroup("0::/job.slice/r0\n"), t.str(), "cpu");
  ASSERT_TRUE(dir);
  auto st = read_cpu_stat(dir->dir, dir->version);
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_TRUE(st->has_quota_counters);
  EXPECT_EQ(st->nr_periods, 250u);
  EXPECT_EQ(st->nr_throttled, 40u);
  EXPECT_EQ(st->throttled_ns, 1'250'000'000u);
}

TEST(CpuStat, V1ThrottledTimeInNanoseconds) {
  testing_support::TempDir t("cpustat");
  put(t.path / "fs/cgroup/cpu,cpuacct/kubepods/pod1/cpu.stat",
      "nr_periods 12\nnr_throttled 3\nthrottled_time 45000000\nnr_bursts 0\nburst_time 0\n");
  auto dir = cgroup_dir(parse_cgroup("4:cpu,cpuacct:/kubepods/pod1\n"), t.str(), "cpu");
  ASSERT_TRUE(dir);
  EXPECT_EQ(dir->version, 1);
  auto st = read_cpu_stat(dir->dir, dir->version);
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->nr_periods, 12u);
  EXPECT_EQ(st->nr_throttled, 3u);
  EXPECT_EQ(st->throttled_ns, 45'000'000u);
}

TEST(CpuStat, RootWithoutQuotaCountersIsNotAnError) {
  auto st = parse_cpu_stat("usage_usec 5\nuser_usec 3\nsystem_usec 2\n", 2);
  ASSERT_TRUE(st.ok());
  EXPECT_FALSE(st->has_quota_counters);
}

TEST(CpuStat, MalformedContentIsRefused) {
  for (const char* bad : {"nr_periods\n", "nr_periods x\n", "nr_periods 5 6\n", "nr_periods -1\n",
                          "nr_periods 1\nnr_throttled 1\n",  // no throttled time at all
                          " 5\n", "nr_periods 99999999999999999999999\n"}) {
    EXPECT_FALSE(parse_cpu_stat(bad, 1).ok()) << bad;
  }
  // v2's key in a v1 file (and the other way round) is no throttled time.
  EXPECT_FALSE(parse_cpu_stat("nr_periods 1\nnr_throttled 0\nthrottled_usec 5\n", 1).ok());
  EXPECT_FALSE(parse_cpu_stat("nr_periods 1\nnr_throttled 0\nthrottled_time 5\n", 2).ok());
  EXPECT_FALSE(read_cpu_stat("/nonexistent-argus-dir", 1).ok());
}

}  // namespace
}  // namespace argus::procfs
