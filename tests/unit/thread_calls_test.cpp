// Which threads sit blocked inside a library, read from outside
// (procfs/thread_calls.h): the syscall file's formats, malformed ones, and a
// real thread of this process blocked in a read inside libc, found as such.
#include "userspace/procfs/thread_calls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace argus::procfs {
namespace {

TEST(ThreadCalls, ParsesEveryShapeOfTheSyscallFile) {
  auto blocked = parse_thread_syscall("202 0x7f00 0x80 0x0 0x0 0x0 0x0 0x7ffd1000 0x7f123456\n");
  ASSERT_TRUE(blocked);
  EXPECT_FALSE(blocked->running);
  EXPECT_EQ(blocked->nr, 202);
  EXPECT_EQ(blocked->sp, 0x7ffd1000u);
  EXPECT_EQ(blocked->pc, 0x7f123456u);
  auto outside = parse_thread_syscall("-1 0x7ffd2000 0x401000\n");
  ASSERT_TRUE(outside);
  EXPECT_EQ(outside->nr, -1);
  EXPECT_EQ(outside->pc, 0x401000u);
  auto running = parse_thread_syscall("running\n");
  ASSERT_TRUE(running);
  EXPECT_TRUE(running->running);
  for (const char* bad : {"", "202 0x1", "x 0x1 0x2", "202 0x1 0x2 0x3 0x4 0x5 0x6 0xzz 0x1", "-1 0x1"}) {
    auto r = parse_thread_syscall(bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.failure().kind, ErrorKind::kMalformed) << bad;
  }
}

TEST(ThreadCalls, AReturnAddressIntoALibraryIsFoundAndNothingElse) {
  const std::vector<LibraryText> libs{{"/usr/lib/libnccl.so.2", 0x1000, 0x2000}, {"/usr/lib/libcuda.so.1", 0x5000, 0x6000}};
  EXPECT_EQ(return_address_into({0x10, 0x5800, 0x1800}, libs)->path, "/usr/lib/libcuda.so.1");  // the innermost first
  EXPECT_EQ(return_address_into({0x2000, 0x0fff, 0x6000}, libs), nullptr);  // the ends are outside
  ParsedMaps maps = parse_maps(
      "7f0000001000-7f0000002000 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9\n"
      "7f0000002000-7f0000003000 r--p 00001000 08:01 1 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9\n"
      "7f0000005000-7f0000006000 r-xp 00000000 08:01 2 /opt/libcudart.so.12\n"
      "7f0000007000-7f0000008000 r-xp 00000000 08:01 3 /usr/lib/libcuda.so.1 (deleted)\n");
  const auto found = library_texts(maps, {"libnccl.so", "libcuda.so"});
  ASSERT_EQ(found.size(), 2u);  // not the data mapping, not libcudart
  EXPECT_EQ(found[0].start, 0x7f0000001000u);
  EXPECT_EQ(found[1].path, "/usr/lib/libcuda.so.1");
}

// A thread of this process blocked in read(2) on an empty pipe sits inside
// libc; the main thread (running) does not count.
TEST(ThreadCalls, AThreadBlockedInALibraryCallIsSeenFromOutside) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::atomic<long> tid{0};
  std::thread reader([&] {
    tid = gettid();
    char c;
    (void)!read(fds[0], &c, 1);
  });
  while (tid == 0) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // in the read by now
  auto maps_text = read_file("/proc/self/maps");
  ASSERT_TRUE(maps_text);
  const auto libc = library_texts(parse_maps(*maps_text), {"libc.so", "libc-"});
  ASSERT_FALSE(libc.empty());
  size_t unreadable = 0;
  const auto inside = threads_inside("/proc", getpid(), libc, 32 << 10, &unreadable);
  bool reader_inside = false;
  for (const auto& t : inside) reader_inside |= t.tid == tid;
  EXPECT_TRUE(reader_inside);
  EXPECT_EQ(unreadable, 0u);
  (void)!write(fds[1], "x", 1);
  reader.join();
  close(fds[0]);
  close(fds[1]);
  // A process that is gone: nothing, no crash.
  EXPECT_TRUE(threads_inside("/proc", 999'999'999, libc).empty());
}

}  // namespace
}  // namespace argus::procfs
