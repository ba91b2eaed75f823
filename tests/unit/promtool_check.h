// Runs Debian's `promtool check metrics` on an exposition text: exit status and output.
#pragma once
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

namespace argus::testing {

inline std::pair<int, std::string> promtool_check_metrics(const std::string& promtool, const std::string& text) {
  char path[] = "/tmp/argus-promtool-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return {-1, "mkstemp failed"};
  ::close(fd);
  std::ofstream(path) << text;
  const std::string cmd = promtool + " check metrics < " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, "popen failed"};
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) output += buf;
  const int status = ::pclose(p);
  ::unlink(path);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

}  // namespace argus::testing
