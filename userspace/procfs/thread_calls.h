// Which of a process's threads sit blocked inside a library's code now, read
// from outside: each thread's /proc/PID/task/TID/syscall (blocked in which
// system call, its stack pointer) and the words of its user stack above that
// pointer (process_vm_readv), looking for return addresses into the library's
// executable mappings.
//
// Why: an agent started while a job already hangs never saw the calls its
// ranks are blocked in (their entry probes fired before it attached). A rank
// whose thread has sat in a system call inside libnccl or libcuda since then
// waits; one whose threads are not inside either is the one they wait for.
//
// A heuristic, said so: a stale return address left in a live frame can read
// as "inside". The caller asks twice, seconds apart, and believes a thread
// whose stack pointer and system call did not move.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/procfs/procfs.h"

namespace argus::procfs {

// /proc/PID/task/TID/syscall: "NR ARG1..ARG6 SP PC" while blocked in a system
// call, "-1 SP PC" while blocked outside one, "running" while on a CPU.
struct ThreadSyscall {
  bool running = false;
  long nr = -1;  // -1: blocked, not in a system call
  uint64_t sp = 0, pc = 0;
};
ReadResult<ThreadSyscall> parse_thread_syscall(std::string_view content);

// A library's executable text in the process.
struct LibraryText {
  std::string path;
  uint64_t start = 0, end = 0;
};
// The executable file-backed mappings whose file name starts with one of `prefixes`
// ("libnccl.so", "libcuda.so").
std::vector<LibraryText> library_texts(const ParsedMaps& maps, const std::vector<std::string>& prefixes);

struct ThreadInLibrary {
  int tid = 0;
  std::string library;  // the innermost library a return address points into
  long syscall = -1;
  uint64_t sp = 0;
};
// Whether `words` (a stack, from its pointer up) hold an address in one of `libs`; which one.
const LibraryText* return_address_into(const std::vector<uint64_t>& words, const std::vector<LibraryText>& libs);

// The threads of `pid` blocked (not running) with a return address into one of
// `libs` among the first `stack_bytes` of their stack. Threads that vanish or
// cannot be read are skipped (counted in `unreadable`).
std::vector<ThreadInLibrary> threads_inside(const std::string& proc_root, int pid,
                                            const std::vector<LibraryText>& libs, size_t stack_bytes = 32 << 10,
                                            size_t* unreadable = nullptr);

}  // namespace argus::procfs
