// What the argus-sim unit tests share: a temporary directory, reading files,
// and running the argus-sim launcher with its output captured to files.
#pragma once

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/temp_dir.h"

extern char **environ;

namespace argus::simtest {

namespace fs = std::filesystem;

inline const std::string kBuild = ARGUS_BUILD_DIR;
inline const std::string kSim = kBuild + "/bin/argus-sim";
inline const std::string kNcclLib = kBuild + "/lib/libnccl.so.2";
inline const std::string kCudaLib = kBuild + "/lib/libcuda.so.1";

// A fresh directory under the system's temp dir, removed with everything in it.
struct TempDir : argus::testing_support::TempDir {
	TempDir() : argus::testing_support::TempDir("sim-test") {}
};

inline std::string slurp(const fs::path &p)
{
	std::ifstream in(p, std::ios::binary);
	std::stringstream ss;
	ss << in.rdbuf();
	return ss.str();
}

inline std::vector<std::string> lines_of(const std::string &s)
{
	std::vector<std::string> v;
	std::stringstream ss(s);
	std::string line;
	while (std::getline(ss, line))
		if (!line.empty())
			v.push_back(line);
	return v;
}

// A running argus-sim with stdout/stderr in <dir>/stdout.txt and stderr.txt;
// killed and reaped on destruction if a test left it running.
class SimProcess {
      public:
	SimProcess() = default;
	SimProcess(const SimProcess &) = delete;
	SimProcess &operator=(const SimProcess &) = delete;
	~SimProcess()
	{
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, nullptr, 0);
		}
	}

	// `env` entries (KEY=VALUE) are added to ours. False when it cannot be spawned.
	bool start(const std::vector<std::string> &args, const fs::path &dir, const std::vector<std::string> &env = {})
	{
		out = dir / "stdout.txt";
		err = dir / "stderr.txt";
		posix_spawn_file_actions_t fa;
		posix_spawn_file_actions_init(&fa);
		posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
		std::vector<std::string> argv_s = {kSim};
		argv_s.insert(argv_s.end(), args.begin(), args.end());
		std::vector<char *> argv;
		for (auto &a : argv_s)
			argv.push_back(a.data());
		argv.push_back(nullptr);
		std::vector<std::string> env_s;
		for (char **e = environ; e && *e; e++)
			env_s.emplace_back(*e);
		env_s.insert(env_s.end(), env.begin(), env.end());
		std::vector<char *> envp;
		for (auto &e : env_s)
			envp.push_back(e.data());
		envp.push_back(nullptr);
		if (posix_spawn(&pid, kSim.c_str(), &fa, nullptr, argv.data(), envp.data()) != 0)
			pid = -1;
		posix_spawn_file_actions_destroy(&fa);
		return pid > 0;
	}

	// Waits at most `timeout`; kills on timeout. The exit code, or -1 (killed,
	// signalled, never started).
	int wait(std::chrono::milliseconds timeout = std::chrono::seconds(20))
	{
		const auto deadline = std::chrono::steady_clock::now() + timeout;
		for (;;) {
			int st = 0;
			pid_t r = pid > 0 ? waitpid(pid, &st, WNOHANG) : -1;
			if (r == pid) {
				pid = -1;
				return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
			}
			if (r < 0)
				return -1;
			if (std::chrono::steady_clock::now() > deadline) {
				kill(pid, SIGKILL);
				waitpid(pid, nullptr, 0);
				pid = -1;
				return -1;
			}
			std::this_thread::sleep_for(std::chrono::milliseconds(10));
		}
	}

	bool running() const
	{
		int st = 0;
		return pid > 0 && waitpid(pid, &st, WNOHANG) == 0;
	}

	pid_t pid = -1;
	fs::path out, err;
};

// A function of a dlopen'ed library (the shims), typed; nullptr when absent.
template <typename Fn> Fn sym(void *lib, const char *name)
{
	Fn f = nullptr;
	*reinterpret_cast<void **>(&f) = dlsym(lib, name);
	return f;
}

// Runs argus-sim to completion (killed after `timeout`); its exit code or -1.
// No agent listens here: its emulated GPU is told to fire as if one did
// (ARGUS_SIM_GPU_ASSUME_LISTENING=1) unless `env` says otherwise.
inline int run_sim(const std::vector<std::string> &args, const fs::path &dir, const std::vector<std::string> &env = {},
		   std::chrono::milliseconds timeout = std::chrono::seconds(30))
{
	std::vector<std::string> e = env;
	bool set = false;
	for (const auto &kv : env)
		set = set || kv.rfind("ARGUS_SIM_GPU_ASSUME_LISTENING=", 0) == 0;
	if (!set)
		e.push_back("ARGUS_SIM_GPU_ASSUME_LISTENING=1");
	SimProcess p;
	if (!p.start(args, dir, e))
		return -1;
	return p.wait(timeout);
}

} // namespace argus::simtest
