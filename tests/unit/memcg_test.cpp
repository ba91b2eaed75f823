// The memory cgroup reader on temp trees: v2, v1 (with its "no limit"
// value), and malformed or missing files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"
#include "userspace/procfs/memcg.h"

namespace argus::procfs {
namespace {

using testing_support::TempDir;

void write(const std::filesystem::path& p, const std::string& text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

TEST(Memcg, FlatKeyedParsesAndRefusesMalformedLines) {
  auto kv = parse_flat_keyed("low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\n");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->at("oom"), 3u);
  EXPECT_EQ(kv->at("oom_kill"), 2u);
  EXPECT_EQ(kv->size(), 5u);
  EXPECT_FALSE(parse_flat_keyed("oom_kill\n"));
  EXPECT_FALSE(parse_flat_keyed("oom_kill two\n"));
  EXPECT_FALSE(parse_flat_keyed("oom_kill -1\n"));
  EXPECT_TRUE(parse_flat_keyed("")->empty());
}

TEST(Memcg, LimitsKnowMaxAndTheV1NoLimitValue) {
  EXPECT_EQ(*parse_memory_limit("67108864\n"), std::optional<uint64_t>(64u << 20));
  EXPECT_EQ(*parse_memory_limit("max\n"), std::nullopt);
  EXPECT_EQ(*parse_memory_limit("9223372036854771712\n"), std::nullopt);
  EXPECT_FALSE(parse_memory_limit("64M").ok());
  EXPECT_FALSE(parse_memory_limit("").ok());
}

TEST(Memcg, ReadsV2Files) {
  TempDir t("memcg");
  const auto d = t.path / "job";
  write(d / "memory.events", "low 0\nhigh 0\nmax 40\noom 2\noom_kill 1\noom_group_kill 0\n");
  write(d / "memory.max", "67108864\n");
  write(d / "memory.current", "1024\n");
  write(d / "memory.peak", "67100000\n");
  auto m = read_memcg(CgroupDir{d.string(), "/job", 2});
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m->path, "/job");
  EXPECT_EQ(m->version, 2);
  EXPECT_EQ(m->limit_bytes, std::optional<uint64_t>(64u << 20));
  EXPECT_EQ(m->usage_bytes, std::optional<uint64_t>(1024));
  EXPECT_EQ(m->peak_bytes, std::optional<uint64_t>(67100000));
  EXPECT_EQ(m->oom_events, std::optional<uint64_t>(2));
  EXPECT_EQ(m->oom_kills, std::optional<uint64_t>(1));
  EXPECT_EQ(m->malformed_files, 0u);
}

TEST(Memcg, ReadsV1FilesWithoutALimit) {
  TempDir t("memcg");
  const auto d = t.path / "memory" / "job";
  write(d / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 4\n");
  write(d / "memory.limit_in_bytes", "9223372036854771712\n");
  write(d / "memory.usage_in_bytes", "4096\n");
  write(d / "memory.max_usage_in_bytes", "8192\n");
  auto m = read_memcg(CgroupDir{d.string(), "/job", 1});
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(m->limit_bytes, std::nullopt);
  EXPECT_EQ(m->usage_bytes, std::optional<uint64_t>(4096));
  EXPECT_EQ(m->peak_bytes, std::optional<uint64_t>(8192));
  EXPECT_EQ(m->oom_kills, std::optional<uint64_t>(4));
  EXPECT_EQ(m->oom_events, std::nullopt);  // v1 has no such count
}

TEST(Memcg, MalformedFilesAreCountedAndAbsentOnesStayUnset) {
  TempDir t("memcg");
  const auto d = t.path / "job";
  write(d / "memory.events", "oom_kill lots\n");
  write(d / "memory.max", "sixty-four megs\n");
  write(d / "memory.current", "12 kB\n");
  auto m = read_memcg(CgroupDir{d.string(), "/job", 2});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->malformed_files, 3u);
  EXPECT_EQ(m->oom_kills, std::nullopt);
  EXPECT_EQ(m->limit_bytes, std::nullopt);
  EXPECT_EQ(m->usage_bytes, std::nullopt);
  EXPECT_EQ(m->peak_bytes, std::nullopt);  // memory.peak absent (kernels before 5.19)
  EXPECT_FALSE(read_memcg(CgroupDir{(t.path / "gone").string(), "/gone", 2}).ok());
}

TEST(Memcg, FindsAProcessesV1MemoryCgroup) {
  TempDir t("memcg");
  write(t.path / "proc" / "42" / "cgroup", "12:memory:/jobs/j1\n11:cpu,cpuacct:/\n0::/\n");
  std::filesystem::create_directories(t.path / "sys" / "fs" / "cgroup" / "memory" / "jobs" / "j1");
  auto dir = memcg_dir((t.path / "proc").string(), (t.path / "sys").string(), 42);
  ASSERT_TRUE(dir);
  EXPECT_EQ(dir->version, 1);
  EXPECT_EQ(dir->path, "/jobs/j1");
  EXPECT_EQ(dir->dir, (t.path / "sys" / "fs" / "cgroup" / "memory" / "jobs" / "j1").string());
  EXPECT_FALSE(memcg_dir((t.path / "proc").string(), (t.path / "sys").string(), 43));
}

}  // namespace
}  // namespace argus::procfs
