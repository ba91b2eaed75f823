// The interpreters of this machine for the Python layer's tests, and a real
// Python child process killed at scope exit.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace argus::python::test {

struct Interp {
  std::string tag;        // gtest-safe name
  std::string exe;        // the python to run
  std::string lib;        // the file that holds the interpreter (libpython or the executable)
  std::string version;    // "3.11.7"
  std::string gc_anchor;  // expected
};

inline std::string pyenv_root() {
  if (const char* r = std::getenv("PYENV_ROOT")) return r;
  if (const char* h = std::getenv("HOME"); h && std::filesystem::exists(std::string(h) + "/.pyenv")) {
    return std::string(h) + "/.pyenv";
  }
  return "/root/.pyenv";
}

// pyenv 3.10-3.13 (whatever micro is installed) and Debian's /usr/bin/python3.11.
inline std::vector<Interp> interpreters() {
  std::vector<Interp> out;
  for (int minor = 10; minor <= 13; ++minor) {
    std::string prefix = "3." + std::to_string(minor) + ".";
    std::string found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(pyenv_root() + "/versions", ec)) {
      std::string n = e.path().filename().string();
      if (n.rfind(prefix, 0) == 0 && n.find_first_not_of("0123456789", prefix.size()) == std::string::npos) found = n;
    }
    std::string m = "3." + std::to_string(minor);
    std::string dir = pyenv_root() + "/versions/" + (found.empty() ? m + ".0" : found);
    out.push_back({"pyenv_3_" + std::to_string(minor), dir + "/bin/python" + m, dir + "/lib/libpython" + m + ".so.1.0",
                   found.empty() ? m + ".?" : found, "gc_collect_main"});
  }
  // Debian's 3.11: the micro comes from the interpreter itself.
  out.push_back({"debian_3_11", "/usr/bin/python3.11", "/usr/bin/python3.11", "", "usdt"});
  return out;
}

inline std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  return out;
}

inline bool have(Interp& in) {
  if (::access(in.exe.c_str(), X_OK) != 0 || ::access(in.lib.c_str(), R_OK) != 0) return false;
  if (in.version.empty()) {
    in.version = run(in.exe + " -c 'import platform; print(platform.python_version(), end=\"\")'");
  }
  return !in.version.empty();
}
inline bool have(const Interp& in) {
  Interp copy = in;
  return have(copy);
}

inline bool ci() {
  const char* c = std::getenv("CI");
  return c && std::string(c) == "true";
}

// A missing interpreter skips, except under CI=true where the machine is known.
inline void skip_or_fail(const Interp& in) {
  if (ci()) {
    ADD_FAILURE() << "CI=true and missing " << in.exe;
  } else {
    GTEST_SKIP_("missing interpreter");
  }
  (void)in;
}

// A python running `script` (written to a file next to it), its stdout read line
// by line; killed with SIGKILL and reaped when it goes out of scope.
class PyChild {
 public:
  PyChild(const std::string& exe, const std::string& script_path, const std::vector<std::string>& prefix = {}) {
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      std::vector<std::string> args = prefix;
      args.push_back(exe);
      args.push_back("-u");
      args.push_back(script_path);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    out_ = out[0];
  }
  ~PyChild() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }
  PyChild(const PyChild&) = delete;
  PyChild& operator=(const PyChild&) = delete;

  int pid() const { return pid_; }
  // The next line of output, "" after `timeout_ms` or at EOF.
  std::string line(int timeout_ms = 10000) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || out_ < 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char b[4096];
      ssize_t n = ::read(out_, b, sizeof b);
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
  }

 private:
  int pid_ = -1;
  int out_ = -1;
  std::string buf_;
};

inline std::string write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

}  // namespace argus::python::test
