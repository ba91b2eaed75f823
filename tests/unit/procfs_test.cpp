// /proc parsing on the real /proc/self and on fake proc trees in a temp dir.
#include "userspace/procfs/procfs.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace argus::procfs {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

class ProcfsFake : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / ("argus-procfs-test-" + std::to_string(::getpid()))).string();
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void put(int pid, const std::string& leaf, const std::string& content) {
    fs::create_directories(root_ + "/" + std::to_string(pid));
    std::ofstream(root_ + "/" + std::to_string(pid) + "/" + leaf, std::ios::binary) << content;
  }
  std::string root_;
};

// ---- Real /proc/self ----------------------------------------------------------

TEST(ProcfsSelf, MapsEnvironStat) {
  int me = ::getpid();
  auto maps = read_maps("/proc", me);
  ASSERT_TRUE(maps.ok()) << maps.error();
  EXPECT_EQ(maps->malformed_lines, 0u);
  std::string exe = fs::read_symlink("/proc/self/exe").string();
  bool saw_exe_text = false, saw_stack = false;
  for (const auto& m : maps->entries) {
    EXPECT_LT(m.start, m.end);
    EXPECT_EQ(m.perms.size(), 4u);
    if (m.path == exe && m.executable()) saw_exe_text = true;
    if (m.path == "[stack]") saw_stack = true;
  }
  EXPECT_TRUE(saw_exe_text) << exe;
  EXPECT_TRUE(saw_stack);

  auto env = read_environ("/proc", me);
  ASSERT_TRUE(env.ok()) << env.error();
  if (::getenv("PATH")) {
    ASSERT_TRUE(env->count("PATH"));
    EXPECT_EQ(env->at("PATH"), ::getenv("PATH"));
  }

  auto st = read_stat("/proc", me);
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->pid, me);
  EXPECT_EQ(st->ppid, ::getppid());
  EXPECT_EQ(st->state, 'R');
  EXPECT_GT(st->starttime_ticks, 0u);

  auto pids = list_pids("/proc");
  EXPECT_TRUE(std::binary_search(pids.begin(), pids.end(), me));
}

TEST(ProcfsSelf, ReadFileHasNoSizeFromStat) {
  auto r = read_file("/proc/self/status");  // st_size is 0: must read until EOF
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_NE(r->find("Pid:"), std::string::npos);
  auto small = read_file("/proc/self/status", 10);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.error().find("larger than 10 bytes"), std::string::npos);
  EXPECT_EQ(error_kind(small), ErrorKind::kOther);
}

// ---- maps ----------------------------------------------------------------------

TEST(ProcfsMaps, WellFormedLines) {
  auto p = parse_maps(
      "55d0c6a00000-55d0c6a21000 r-xp 00001000 fd:01 1234567                    /usr/bin/python3.11\n"
      "7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 \n"
      "7f1c2b000000-7f1c2b100000 r-xp 00002000 103:02 42   /opt/my libs/lib nccl.so.2\n"
      "7f1c2c000000-7f1c2c001000 r-xp 00000000 08:01 99 /tmp/libshim.so (deleted)\n"
      "7ffd1a000000-7ffd1a021000 rw-p 00000000 00:00 0                          [stack]\n"
      "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"
      "7f00-7f10 rw-s 00000000 00:05 7 /dev/zero (deleted) \n"  // suffix not last: kept verbatim
      "5500-5600 rw-p 00000000 00:00 0 [heap]");                // no trailing newline
  ASSERT_EQ(p.malformed_lines, 0u);
  ASSERT_EQ(p.entries.size(), 8u);
  const auto& e = p.entries;
  EXPECT_EQ(e[0].start, 0x55d0c6a00000u);
  EXPECT_EQ(e[0].end, 0x55d0c6a21000u);
  EXPECT_EQ(e[0].offset, 0x1000u);
  EXPECT_EQ(e[0].dev_major, 0xfdu);
  EXPECT_EQ(e[0].dev_minor, 1u);
  EXPECT_EQ(e[0].inode, 1234567u);
  EXPECT_EQ(e[0].path, "/usr/bin/python3.11");
  EXPECT_TRUE(e[0].executable());
  EXPECT_TRUE(e[0].file_backed());
  EXPECT_EQ(e[1].path, "");
  EXPECT_FALSE(e[1].executable());
  EXPECT_FALSE(e[1].file_backed());
  EXPECT_EQ(e[2].path, "/opt/my libs/lib nccl.so.2");
  EXPECT_EQ(e[2].dev_major, 0x103u);
  EXPECT_EQ(e[3].path, "/tmp/libshim.so");
  EXPECT_TRUE(e[3].deleted);
  EXPECT_EQ(e[4].path, "[stack]");
  EXPECT_FALSE(e[4].file_backed());
  EXPECT_EQ(e[5].end, 0xffffffffff601000u);
  EXPECT_EQ(e[6].path, "/dev/zero (deleted) ");
  EXPECT_FALSE(e[6].deleted);
  EXPECT_EQ(e[7].path, "[heap]");
}

TEST(ProcfsMaps, MalformedLinesAreSkippedAndCounted) {
  auto p = parse_maps(
      "garbage\n"
      "1000-2000\n"                                               // short
      "1000-2000 r-xp 00000000 08:01\n"                           // no inode
      "zz00-2000 r-xp 00000000 08:01 5 /a\n"                      // non-hex start
      "3000-2000 r-xp 00000000 08:01 5 /a\n"                      // start > end
      "1000-1000 r-xp 00000000 08:01 5 /a\n"                      // empty range
      "10000000000000000-10000000000000001 r-xp 0 08:01 5 /a\n"   // > 64 bits
      "1000-2000 r-xq 00000000 08:01 5 /a\n"                      // bad perms
      "1000-2000 r-x 00000000 08:01 5 /a\n"                       // short perms
      "1000-2000 r-xp 0000g000 08:01 5 /a\n"                      // bad offset
      "1000-2000 r-xp 00000000 0801 5 /a\n"                       // bad dev
      "1000-2000 r-xp 00000000 08:01 5x /a\n"                     // bad inode
      "1000-2000 r-xp 00000000 08:01 99999999999999999999999 /a\n"  // huge inode
      "-2000 r-xp 00000000 08:01 5 /a\n"                          // missing start
      "\n"                                                        // blank: ignored
      "1000-2000 r-xp 00000000 08:01 5 /ok\n");
  EXPECT_EQ(p.malformed_lines, 14u);
  ASSERT_EQ(p.entries.size(), 1u);
  EXPECT_EQ(p.entries[0].path, "/ok");
  EXPECT_TRUE(parse_maps("").entries.empty());
}

// ---- environ ---------------------------------------------------------------------

TEST(ProcfsEnviron, EdgeCases) {
  auto env = parse_environ("A=1\0\0B=\0NOEQUALS\0=novalue\0A=2\0C=x=y\0D=\xff\xfe\0E=last"s);
  EXPECT_EQ(env.size(), 5u);
  EXPECT_EQ(env["A"], "1");  // first occurrence wins
  EXPECT_EQ(env["B"], "");
  EXPECT_EQ(env["C"], "x=y");
  EXPECT_EQ(env["D"], "\xff\xfe");  // bytes kept verbatim
  EXPECT_EQ(env["E"], "last");      // no trailing NUL
  EXPECT_FALSE(env.count("NOEQUALS"));
  EXPECT_TRUE(parse_environ("").empty());
  EXPECT_TRUE(parse_environ("\0\0\0"s).empty());
}

// ---- stat ---------------------------------------------------------------------------

std::string stat_line(const std::string& pid_comm) {
  // fields 3..22 then more, as the kernel writes them
  return pid_comm + " S 1 4242 4242 0 -1 4194560 100 0 0 0 17 23 0 0 20 0 3 0 987654 12345678 100 " +
         "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n";
}

TEST(ProcfsStat, CommWithParensAndSpaces) {
  auto st = parse_stat(stat_line("4242 (evil) (name) x)"));
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->pid, 4242);
  EXPECT_EQ(st->comm, "evil) (name) x");
  EXPECT_EQ(st->state, 'S');
  EXPECT_EQ(st->ppid, 1);
  EXPECT_EQ(st->utime_ticks, 17u);
  EXPECT_EQ(st->stime_ticks, 23u);
  EXPECT_EQ(st->starttime_ticks, 987654u);

  auto empty_comm = parse_stat(stat_line("7 ()"));
  ASSERT_TRUE(empty_comm.ok()) << empty_comm.error();
  EXPECT_EQ(empty_comm->comm, "");

  // Exactly 22 fields, newline-terminated.
  auto minimal = parse_stat("9 (a) R 0 0 0 0 0 0 0 0 0 0 5 6 0 0 0 0 0 0 77\n");
  ASSERT_TRUE(minimal.ok()) << minimal.error();
  EXPECT_EQ(minimal->starttime_ticks, 77u);
}

TEST(ProcfsStat, Malformed) {
  for (std::string bad : {""s, "garbage"s, "12 (x"s, "x (a) S 1"s, "-3 (a) S 1 0 0 0 0 0 0 0 0 0 5 6 0 0 0 0 0 0 7"s,
                          "9 (a) S 1 0 0"s, "9 (a) SS 1 0 0 0 0 0 0 0 0 0 5 6 0 0 0 0 0 0 7"s,
                          "9 (a) S x 0 0 0 0 0 0 0 0 0 5 6 0 0 0 0 0 0 7"s,
                          "9 (a) S 1 0 0 0 0 0 0 0 0 0 5 6 0 0 0 0 0 0 -7"s, "9 )a( S 1"s}) {
    auto st = parse_stat(bad);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(error_kind(st), ErrorKind::kMalformed) << st.error();
  }
}

// ---- fake proc trees -------------------------------------------------------------

TEST_F(ProcfsFake, ReadsFilesOfAFakeProcess) {
  put(100, "maps", "1000-2000 r-xp 00000000 08:01 5 /usr/lib/libnccl.so.2\nbad line\n");
  put(100, "environ", "RANK=3\0LOCAL_RANK=1\0"s);
  put(100, "stat", stat_line("100 (python3)"));
  auto maps = read_maps(root_, 100);
  ASSERT_TRUE(maps.ok()) << maps.error();
  EXPECT_EQ(maps->entries.size(), 1u);
  EXPECT_EQ(maps->malformed_lines, 1u);
  auto env = read_environ(root_, 100);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->at("RANK"), "3");
  auto st = read_stat(root_, 100);
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(st->comm, "python3");
}

TEST_F(ProcfsFake, EmptyFiles) {
  put(5, "maps", "");
  put(5, "environ", "");  // what a zombie or kernel thread gives
  put(5, "stat", "");
  auto maps = read_maps(root_, 5);
  ASSERT_TRUE(maps.ok());
  EXPECT_TRUE(maps->entries.empty());
  auto env = read_environ(root_, 5);
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->empty());
  auto st = read_stat(root_, 5);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(error_kind(st), ErrorKind::kMalformed);
  EXPECT_NE(st.error().find(root_ + "/5/stat"), std::string::npos) << st.error();
}

TEST_F(ProcfsFake, VanishedProcess) {
  auto maps = read_maps(root_, 31337);
  ASSERT_FALSE(maps.ok());
  EXPECT_TRUE(vanished(maps)) << maps.error();
  EXPECT_EQ(error_kind(maps), ErrorKind::kVanished);
  EXPECT_NE(maps.error().find("/31337/maps"), std::string::npos);
  EXPECT_TRUE(vanished(read_environ(root_, 31337)));
  EXPECT_TRUE(vanished(read_stat(root_, 31337)));
  EXPECT_TRUE(vanished(read_stat("/proc", INT_MAX)));  // and on the real /proc
}

TEST_F(ProcfsFake, PermissionDeniedIsNotVanished) {
  put(6, "environ", "A=1\0"s);
  fs::permissions(root_ + "/6/environ", fs::perms::none);
  if (::geteuid() != 0) {
    auto env = read_environ(root_, 6);
    ASSERT_FALSE(env.ok());
    EXPECT_EQ(error_kind(env), ErrorKind::kPermission) << env.error();
    EXPECT_FALSE(vanished(env));
    return;
  }
  // Root ignores file modes: read as nobody in a child, report the kind by exit code.
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(100);
    auto env = read_environ(root_, 6);
    ::_exit(env.ok() ? 101 : static_cast<int>(error_kind(env)));
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 100) GTEST_SKIP() << "cannot drop privileges to test EACCES";
  EXPECT_EQ(WEXITSTATUS(status), static_cast<int>(ErrorKind::kPermission));
}

TEST_F(ProcfsFake, DirectoryAndFifoAreErrorsNotHangs) {
  fs::create_directories(root_ + "/8/maps");
  auto maps = read_maps(root_, 8);
  ASSERT_FALSE(maps.ok());
  EXPECT_NE(maps.error().find("is a directory"), std::string::npos);
  fs::create_directories(root_ + "/9");
  ASSERT_EQ(::mkfifo((root_ + "/9/environ").c_str(), 0600), 0);
  auto env = read_environ(root_, 9);  // no writer: reads EOF at once
  EXPECT_TRUE(env.ok());
}

TEST_F(ProcfsFake, ListPidsIgnoresNonNumeric) {
  for (const char* d : {"1", "42", "7", "self", "12a", "sys", "0", "00", "007", "99999999999"}) fs::create_directories(root_ + "/" + d);
  std::ofstream(root_ + "/55") << "a regular file, not a process";
  EXPECT_EQ(list_pids(root_), (std::vector<int>{1, 7, 42}));
  EXPECT_TRUE(list_pids(root_ + "/nonexistent").empty());
}

TEST(ProcfsPaths, RootPath) {
  EXPECT_EQ(root_path("/proc", 42, "/usr/lib/libnccl.so.2"), "/proc/42/root/usr/lib/libnccl.so.2");
  EXPECT_EQ(root_path("/host/proc/", 42, "/a b/c"), "/host/proc/42/root/a b/c");
  EXPECT_EQ(root_path("/proc", 1, "rel"), "/proc/1/root/rel");
  EXPECT_EQ(pid_path("/proc", 7, "maps"), "/proc/7/maps");
  EXPECT_EQ(pid_path("/", 7, "maps"), "/7/maps");
}

TEST_F(ProcfsFake, SharesPidNamespaceOnlyWhenSelfIsThisProcess) {
  EXPECT_TRUE(proc_root_shares_pid_namespace("/proc"));
  EXPECT_TRUE(proc_root_shares_pid_namespace("/proc/"));
  EXPECT_FALSE(proc_root_shares_pid_namespace(root_));  // no "self" at all
  fs::create_symlink(std::to_string(::getpid()), root_ + "/self");
  EXPECT_TRUE(proc_root_shares_pid_namespace(root_ + "/"));
  fs::remove(root_ + "/self");
  fs::create_symlink(std::to_string(::getpid() + 1), root_ + "/self");  // the host's pid of a pod's agent
  EXPECT_FALSE(proc_root_shares_pid_namespace(root_));
  EXPECT_FALSE(proc_root_shares_pid_namespace(root_ + "/nonexistent"));
}

// The real case: a child in a new PID namespace (a pod without hostPID) that
// still sees the node's /proc. There its own pid is 1, /proc/self is its node pid.
TEST(ProcfsNamespaces, NodeProcFromAChildPidNamespaceIsNotShared) {
  if (::geteuid() != 0) {
    if (std::getenv("CI") != nullptr && std::string(std::getenv("CI")) == "true") FAIL() << "needs root under CI";
    GTEST_SKIP() << "needs root (unshare CLONE_NEWPID)";
  }
  pid_t outer = ::fork();
  ASSERT_GE(outer, 0);
  if (outer == 0) {
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(10);
    pid_t inner = ::fork();
    if (inner < 0) ::_exit(11);
    if (inner == 0) ::_exit(::getpid() == 1 && !proc_root_shares_pid_namespace("/proc") ? 0 : 12);
    int st = 0;
    ::waitpid(inner, &st, 0);
    ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 13);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(outer, &status, 0), outer);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: unshare failed, 11: fork failed, 12: judged shared";
}

// Each failure carries its kind, and the message starts with the same word for
// the reader.
TEST(ProcfsErrors, Kinds) {
  const auto missing = read_file("/proc/self/no-such-file");
  EXPECT_EQ(error_kind(missing), ErrorKind::kVanished);
  EXPECT_TRUE(missing.error().starts_with("vanished: ")) << missing.error();
  EXPECT_TRUE(vanished(missing));
  const auto dir = read_file("/proc/self");
  EXPECT_EQ(error_kind(dir), ErrorKind::kOther);
  EXPECT_FALSE(vanished(dir));
  const auto bad = parse_stat("1 (x");
  EXPECT_EQ(error_kind(bad), ErrorKind::kMalformed);
  EXPECT_TRUE(bad.error().starts_with("malformed: ")) << bad.error();
  EXPECT_EQ(error_kind(read_file("/proc/self/stat")), ErrorKind::kOther);  // no failure: no kind to name
}

}  // namespace
}  // namespace argus::procfs
