// A child process that maps a file executable (as the loader maps a library)
// and waits to be killed: a real /proc/PID/maps entry, with a real dev and
// inode, for the parts of the agent that open mapped files.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "userspace/procfs/procfs.h"

namespace argus::testing_support {

class MappingChild {
 public:
  explicit MappingChild(const std::string& path) {
    int ready[2];
    if (::pipe(ready) != 0) return;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {  // only async-signal-safe calls from here
      // A parent that crashes must not leave it paused, holding the test runner's pipe.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the parent is already gone
      ::close(ready[0]);
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      void* p = fd < 0 ? MAP_FAILED : ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
      const char ok = p == MAP_FAILED ? 'n' : 'y';
      (void)!::write(ready[1], &ok, 1);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char ok = 'n';
    if (pid_ > 0 && ::read(ready[0], &ok, 1) == 1 && ok == 'y') mapped_ = true;
    ::close(ready[0]);
  }
  ~MappingChild() { kill(); }
  MappingChild(const MappingChild&) = delete;
  MappingChild& operator=(const MappingChild&) = delete;

  int pid() const { return pid_; }
  bool mapped() const { return mapped_; }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // The child's maps entry for `path` (as the kernel shows it).
  std::optional<procfs::MapEntry> entry(const std::string& path) const {
    auto maps = procfs::read_maps("/proc", pid_);
    if (!maps.ok()) return std::nullopt;
    for (const auto& m : maps->entries)
      if (m.path == path && m.executable()) return m;
    return std::nullopt;
  }

 private:
  int pid_ = -1;
  bool mapped_ = false;
};

}  // namespace argus::testing_support
