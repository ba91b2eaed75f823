// A rank's DataLoader workers from a fake /proc: the children of its main
// thread that torch named "pt_data_worker", their CPU and reads summed over a
// span; the children and io files' malformed forms.
#include "userspace/collectors/dataloader_workers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"
#include "userspace/procfs/proc_children.h"

namespace argus {
namespace {

namespace fs = std::filesystem;

TEST(ProcChildren, ParsesTheChildrenFile) {
  EXPECT_EQ(*procfs::parse_children("4242 4243 "), (std::vector<int>{4242, 4243}));
  EXPECT_EQ(*procfs::parse_children(""), std::vector<int>{});
  EXPECT_EQ(*procfs::parse_children("7\n"), std::vector<int>{7});
  for (const char* bad : {"12 x", "-3", "0", "99999999999"}) {
    const auto r = procfs::parse_children(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(procfs::error_kind(r), procfs::ErrorKind::kMalformed) << bad;
  }
}

TEST(ProcChildren, ParsesTheIoFile) {
  const auto io = procfs::parse_io(
      "rchar: 5000\nwchar: 10\nsyscr: 3\nsyscw: 1\nread_bytes: 4096\nwrite_bytes: 0\ncancelled_write_bytes: 0\n");
  ASSERT_TRUE(io.ok()) << io.error();
  EXPECT_EQ(io->rchar, 5000u);
  EXPECT_EQ(io->read_bytes, 4096u);
  for (const char* bad : {"", "rchar: 5\n", "rchar: x\nread_bytes: 1\n", "rchar: 5\nread_bytes: -1\n"}) {
    const auto r = procfs::parse_io(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(procfs::error_kind(r), procfs::ErrorKind::kMalformed) << bad;
  }
}

class WorkersFake : public ::testing::Test {
 protected:
  void put(const std::string& rel, const std::string& content) {
    fs::create_directories(fs::path(root_ + "/" + rel).parent_path());
    std::ofstream(root_ + "/" + rel, std::ios::binary) << content;
  }
  void children(int pid, const std::string& list) {
    put(std::to_string(pid) + "/task/" + std::to_string(pid) + "/children", list);
  }
  // utime + stime = ticks; a comm with a space and parentheses, as /proc allows.
  void process(int pid, const std::string& comm, uint64_t ticks, uint64_t rchar, uint64_t read_bytes) {
    put(std::to_string(pid) + "/stat", std::to_string(pid) + " (" + comm + ") S 100 1 1 0 -1 0 0 0 0 0 " +
                                          std::to_string(ticks) + " 0 0 0 20 0 1 0 500 0 0");
    put(std::to_string(pid) + "/io", "rchar: " + std::to_string(rchar) + "\nwchar: 0\nread_bytes: " +
                                        std::to_string(read_bytes) + "\nwrite_bytes: 0\n");
  }
  testing_support::TempDir dir_{"workers"};
  std::string root_ = dir_.str();
};

TEST_F(WorkersFake, SumsTheWorkersCpuAndReadsOverTheSpan) {
  DataLoaderWorkers w(root_, 30, 100);
  children(100, "200 201 300");
  process(200, "pt_data_worker", 1000, 0, 0);
  process(201, "pt_data_worker", 50, 0, 0);
  process(300, "python3", 0, 0, 0);  // another child: not a worker
  w.sample(100, 10.0);
  EXPECT_FALSE(w.rates(5).valid);  // one sample: no rate yet
  process(200, "pt_data_worker", 1090, 1'000'000, 4096);  // 0.9 CPU-s in a second
  process(201, "pt_data_worker", 60, 0, 0);
  process(300, "python3", 500, 9'000'000, 0);
  w.sample(100, 10.5);  // within the sample period: not read
  w.sample(100, 11.0);
  auto r = w.rates(5);
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(r.workers, 2);
  EXPECT_DOUBLE_EQ(r.seconds, 1.0);
  EXPECT_DOUBLE_EQ(r.cpu_per_s, 1.0);  // (90 + 10) ticks at 100 a second
  EXPECT_DOUBLE_EQ(r.rchar_per_s, 1e6);
  EXPECT_DOUBLE_EQ(r.read_bytes_per_s, 4096);

  // Worker 201 exits, 202 starts with CPU of its own from before: counted from its first sample.
  children(100, "200 202 300");
  process(202, "pt_data_worker", 700, 0, 0);
  process(200, "pt_data_worker", 1190, 3'000'000, 4096);
  w.sample(100, 12.0);
  r = w.rates(1);
  EXPECT_EQ(r.workers, 2);
  EXPECT_DOUBLE_EQ(r.cpu_per_s, 1.0);
  EXPECT_DOUBLE_EQ(r.rchar_per_s, 2e6);
  EXPECT_DOUBLE_EQ(r.read_bytes_per_s, 0);
  r = w.rates(5);  // both seconds
  EXPECT_DOUBLE_EQ(r.seconds, 2.0);
  EXPECT_DOUBLE_EQ(r.cpu_per_s, 1.0);
  EXPECT_DOUBLE_EQ(r.rchar_per_s, 1.5e6);
}

TEST_F(WorkersFake, ARankWithoutWorkersOrChildrenFileSaysSo) {
  DataLoaderWorkers w(root_, 30, 100);
  children(100, "");
  w.sample(100, 1.0);
  w.sample(100, 2.0);
  auto r = w.rates(5);
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(r.workers, 0);
  EXPECT_DOUBLE_EQ(r.cpu_per_s, 0);
  // A process gone (or a kernel without the children file): nothing is added, nothing breaks.
  DataLoaderWorkers gone(root_, 30, 100);
  gone.sample(999, 1.0);
  gone.sample(999, 2.0);
  EXPECT_FALSE(gone.rates(5).valid);
  // Malformed files: the worker is skipped (stat), or counted without reads (io).
  children(100, "200 201");
  put("200/stat", "garbage");
  process(201, "pt_data_worker", 10, 0, 0);
  put("201/io", "rchar: lots\n");
  w.sample(100, 3.0);
  r = w.rates(1);
  EXPECT_EQ(r.workers, 1);
}

}  // namespace
}  // namespace argus
