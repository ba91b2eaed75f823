// A procfs tree in a temp dir for the parts that read /proc (discovery, the
// runtime's reaping): per pid a stat, maps and environ file, and optionally a
// root/ link to the real / so that mapped files open as they would in /proc.
#pragma once
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "tests/support/temp_dir.h"

namespace argus::testing_support {

class FakeProc {
 public:
  FakeProc() : dir_("proc") {}
  const std::filesystem::path& root() const { return dir_.path; }
  // start_ticks is /proc/PID/stat's starttime (tells a reused pid apart).
  void add(int pid, const std::string& maps, const std::string& environ, const std::string& comm = "python",
           unsigned long start_ticks = 4242, bool link_root = false) {
    const auto d = dir_.path / std::to_string(pid);
    std::filesystem::create_directories(d);
    std::ofstream(d / "maps") << maps;
    std::ofstream(d / "environ") << environ;
    std::ofstream(d / "stat") << pid << " (" << comm << ") S 1 1 1 0 -1 0 0 0 0 0 5 6 0 0 20 0 1 0 " << start_ticks
                              << " 0 0\n";
    if (link_root) std::filesystem::create_directory_symlink("/", d / "root");
  }
  void remove(int pid) { std::filesystem::remove_all(dir_.path / std::to_string(pid)); }

 private:
  TempDir dir_;
};

// NUL-separated KEY=VALUE entries, as /proc/PID/environ holds them.
inline std::string environ_of(std::initializer_list<std::string> kv) {
  std::string out;
  for (const auto& s : kv) out += s + '\0';
  return out;
}

}  // namespace argus::testing_support
