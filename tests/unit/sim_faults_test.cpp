// argus-sim's injected faults: --hang, --exit (the peers block in the
// collective; the launcher waits for a signal or --hang-timeout), --straggler
// with an onset step, --nodes (per-node torchrun environment), and bad values.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tests/unit/sim_test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
using namespace argus::simtest;
using Sim = SimProcess;

constexpr const char *kNodeEnvName = "ARGUS_SIM_NODE";

double realtime_s()
{
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Polls until `pred` holds or `timeout` passes.
template <typename Pred> bool wait_until(Pred pred, std::chrono::milliseconds timeout)
{
	auto deadline = std::chrono::steady_clock::now() + timeout;
	while (!pred()) {
		if (std::chrono::steady_clock::now() > deadline)
			return false;
		std::this_thread::sleep_for(10ms);
	}
	return true;
}

// The truth file once its status is `status` (written atomically), else null.
json truth_with_status(const fs::path &f, const std::string &status, std::chrono::milliseconds timeout)
{
	json t;
	wait_until(
		[&] {
			if (!fs::exists(f))
				return false;
			t = json::parse(slurp(f), nullptr, false);
			return !t.is_discarded() && t.value("status", "") == status;
		},
		timeout);
	return (!t.is_discarded() && t.value("status", "") == status) ? t : json();
}

bool pid_alive(int pid)
{
	return pid > 0 && kill(pid, 0) == 0;
}

// The process state letter of /proc/PID/stat ('S' = sleeping), or '?'.
char proc_state(int pid)
{
	std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
	auto paren = stat.rfind(')');
	return (paren != std::string::npos && paren + 2 < stat.size()) ? stat[paren + 2] : '?';
}

std::map<std::string, std::string> proc_environ(int pid)
{
	std::map<std::string, std::string> env;
	std::string raw = slurp("/proc/" + std::to_string(pid) + "/environ");
	std::size_t pos = 0;
	while (pos < raw.size()) {
		std::size_t end = raw.find('\0', pos);
		if (end == std::string::npos)
			end = raw.size();
		std::string kv = raw.substr(pos, end - pos);
		if (auto eq = kv.find('='); eq != std::string::npos)
			env[kv.substr(0, eq)] = kv.substr(eq + 1);
		pos = end + 1;
	}
	return env;
}

// Blocked peers sit in the collective (a futex sleep), alive, writing nothing.
void expect_blocked(const json &job, const fs::path &out, const std::vector<int> &ranks)
{
	for (int r : ranks) {
		SCOPED_TRACE("peer rank " + std::to_string(r));
		const int pid = job["ranks"][r]["pid"].get<int>();
		EXPECT_TRUE(pid_alive(pid));
		// Asleep in the collective's futex (it wakes every 100 ms to check for
		// an abort, so under load a sample may catch it runnable).
		EXPECT_TRUE(wait_until([&] { return proc_state(pid) == 'S'; }, 1s));
		EXPECT_FALSE(fs::exists(out / ("rank-" + std::to_string(r) + ".json")));
	}
}

const std::vector<std::string> kFast = {"--step-ms", "10", "--init-ms", "0", "--kernels-per-step", "16",
					"--quiet"};

std::vector<std::string> args(std::vector<std::string> a, const fs::path &out)
{
	a.insert(a.end(), kFast.begin(), kFast.end());
	a.push_back("--out");
	a.push_back(out.string());
	return a;
}

TEST(SimFaultsTest, HangBlocksThePeersUntilTheJobIsStopped)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	const double t0 = realtime_s();
	Sim sim;
	sim.start(args({"--ranks", "3", "--steps", "0", "--hang", "1:3"}, out), dir.path);
	ASSERT_GT(sim.pid, 0);

	// The hung rank writes its truth as the hang starts.
	json t = truth_with_status(out / "rank-1.json", "hung", 5s);
	ASSERT_FALSE(t.is_null()) << slurp(sim.err);
	const double t1 = realtime_s();
	EXPECT_EQ(t["steps_completed"], 3);
	ASSERT_EQ(t["faults"].size(), 1u);
	EXPECT_EQ(t["faults"][0]["kind"], "hang");
	EXPECT_EQ(t["faults"][0]["step"], 3);
	const double at = t["faults"][0]["injected_at"].get<double>();
	EXPECT_GE(at, t0 - 0.01);
	EXPECT_LE(at, t1 + 0.01);
	// Counts exact at the hang: 3 full steps, step 3's host work, no step-3 collective.
	EXPECT_EQ(t["nccl"]["all_reduce"]["calls"], 6);
	EXPECT_EQ(t["nccl"]["send"]["calls"], 3);
	EXPECT_EQ(t["nccl_group"]["start"], 3);
	EXPECT_EQ(t["cuda"]["kernel_launches"], 4 * 16);
	EXPECT_EQ(t["cuda"]["sync"]["cuStreamSynchronize"], 3);
	EXPECT_TRUE(t["nccl_errors"].empty());

	// The job does not end by itself: everyone waits for the hung rank.
	std::this_thread::sleep_for(700ms);
	ASSERT_TRUE(sim.running()) << slurp(sim.err);
	json job = json::parse(slurp(out / "job.json"));
	const int hung_pid = job["ranks"][1]["pid"].get<int>();
	EXPECT_TRUE(pid_alive(hung_pid));
	EXPECT_TRUE(wait_until([&] { return proc_state(hung_pid) == 'S'; }, 1s));
	expect_blocked(job, out, {0, 2});
	EXPECT_EQ(json::parse(slurp(out / "rank-1.json"))["status"], "hung"); // not rewritten

	// SIGTERM stops every rank cleanly: exit 0.
	kill(sim.pid, SIGTERM);
	EXPECT_EQ(sim.wait(5s), 0) << slurp(sim.err);
	for (int r = 0; r < 3; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		EXPECT_FALSE(pid_alive(job["ranks"][r]["pid"].get<int>()));
		json f = json::parse(slurp(out / ("rank-" + std::to_string(r) + ".json")));
		EXPECT_EQ(f["steps_completed"], 3);
		EXPECT_EQ(f["status"], r == 1 ? "hung" : "stopped");
		EXPECT_EQ(f["faults"].size(), r == 1 ? 1u : 0u);
	}
	EXPECT_FALSE(fs::exists("/dev/shm" + job["shm"].get<std::string>()));
}

TEST(SimFaultsTest, ExitLeavesThePeersBlockedUntilTheJobIsStopped)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	Sim sim;
	sim.start(args({"--ranks", "3", "--steps", "0", "--exit", "2:2"}, out), dir.path);
	ASSERT_GT(sim.pid, 0);

	json t = truth_with_status(out / "rank-2.json", "exited", 5s);
	ASSERT_FALSE(t.is_null()) << slurp(sim.err);
	EXPECT_EQ(t["steps_completed"], 2);
	ASSERT_EQ(t["faults"].size(), 1u);
	EXPECT_EQ(t["faults"][0]["kind"], "exit");
	EXPECT_EQ(t["faults"][0]["step"], 2);
	EXPECT_GT(t["faults"][0]["injected_at"].get<double>(), 1.6e9);
	EXPECT_EQ(t["nccl"]["all_reduce"]["calls"], 4);
	EXPECT_EQ(t["cuda"]["kernel_launches"], 3 * 16);

	ASSERT_TRUE(wait_until([&] { return !pid_alive(t["pid"].get<int>()); }, 3s));
	std::this_thread::sleep_for(500ms);
	ASSERT_TRUE(sim.running()) << slurp(sim.err); // an expected exit does not abort the job
	json job = json::parse(slurp(out / "job.json"));
	expect_blocked(job, out, {0, 1});

	kill(sim.pid, SIGTERM);
	EXPECT_EQ(sim.wait(5s), 0) << slurp(sim.err);
	for (int r : {0, 1}) {
		json f = json::parse(slurp(out / ("rank-" + std::to_string(r) + ".json")));
		EXPECT_EQ(f["status"], "stopped");
		EXPECT_EQ(f["steps_completed"], 2);
		EXPECT_FALSE(pid_alive(f["pid"].get<int>()));
	}
	EXPECT_EQ(json::parse(slurp(out / "rank-2.json"))["status"], "exited");
}

TEST(SimFaultsTest, HangTimeoutStopsTheJobWithStatus124)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	Sim sim;
	sim.start(args({"--ranks", "2", "--steps", "5", "--hang", "0:1", "--hang-timeout", "0.3"}, out),
	      dir.path);
	auto t0 = std::chrono::steady_clock::now();
	EXPECT_EQ(sim.wait(5s), 124) << slurp(sim.err);
	EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
	EXPECT_EQ(json::parse(slurp(out / "rank-0.json"))["status"], "hung");
	EXPECT_EQ(json::parse(slurp(out / "rank-1.json"))["status"], "stopped");
	EXPECT_EQ(json::parse(slurp(out / "rank-1.json"))["steps_completed"], 1);
}

TEST(SimFaultsTest, NodesGiveEachRankItsNodeEnvironment)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	Sim sim;
	sim.start(args({"--ranks", "4", "--nodes", "2", "--steps", "0"}, out), dir.path);
	ASSERT_TRUE(wait_until([&] { return fs::exists(out / "job.json"); }, 5s)) << slurp(sim.err);
	json job = json::parse(slurp(out / "job.json"));
	EXPECT_EQ(job["nodes"], 2);
	for (int r = 0; r < 4; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		const std::string node = "node-" + std::to_string(r / 2);
		EXPECT_EQ(job["ranks"][r]["node"], node);
		EXPECT_EQ(job["ranks"][r]["local_rank"], r % 2);
		// job.json may come before the last rank's exec: wait for its own environment.
		std::map<std::string, std::string> env;
		ASSERT_TRUE(wait_until(
			[&] {
				env = proc_environ(job["ranks"][r]["pid"].get<int>());
				return env.count(kNodeEnvName) > 0;
			},
			3s));
		EXPECT_EQ(env["RANK"], std::to_string(r));
		EXPECT_EQ(env["WORLD_SIZE"], "4");
		EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r % 2));
		EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
		EXPECT_EQ(env["GROUP_RANK"], std::to_string(r / 2));
		EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
		EXPECT_EQ(env["ARGUS_SIM_NODE"], node);
	}
	kill(sim.pid, SIGTERM);
	EXPECT_EQ(sim.wait(5s), 0) << slurp(sim.err);
	for (int r = 0; r < 4; r++) {
		json t = json::parse(slurp(out / ("rank-" + std::to_string(r) + ".json")));
		EXPECT_EQ(t["node"], "node-" + std::to_string(r / 2));
		EXPECT_EQ(t["local_rank"], r % 2);
		EXPECT_EQ(t["local_world_size"], 2);
	}

	// 5 ranks on 2 nodes: blocks of 3, the last node has fewer.
	TempDir dir2;
	const fs::path out2 = dir2.path / "truth";
	Sim sim2;
	sim2.start(args({"--ranks", "5", "--nodes", "2", "--steps", "1"}, out2), dir2.path);
	ASSERT_EQ(sim2.wait(10s), 0) << slurp(sim2.err);
	const int want_node[] = {0, 0, 0, 1, 1}, want_local[] = {0, 1, 2, 0, 1}, want_lws[] = {3, 3, 3, 2, 2};
	for (int r = 0; r < 5; r++) {
		SCOPED_TRACE("rank " + std::to_string(r) + " of 5");
		json t = json::parse(slurp(out2 / ("rank-" + std::to_string(r) + ".json")));
		EXPECT_EQ(t["node"], "node-" + std::to_string(want_node[r]));
		EXPECT_EQ(t["local_rank"], want_local[r]);
		EXPECT_EQ(t["local_world_size"], want_lws[r]);
		EXPECT_EQ(t["status"], "completed");
	}
}

TEST(SimFaultsTest, StragglerOnsetIsRecorded)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	const double t0 = realtime_s();
	Sim sim;
	sim.start(args({"--ranks", "3", "--steps", "6", "--straggler", "1:3@2", "--straggler", "2:1.5"}, out),
		  dir.path);
	ASSERT_EQ(sim.wait(10s), 0) << slurp(sim.err);
	const double t1 = realtime_s();
	json late = json::parse(slurp(out / "rank-1.json"));
	json early = json::parse(slurp(out / "rank-2.json"));
	json none = json::parse(slurp(out / "rank-0.json"));
	EXPECT_TRUE(none["faults"].empty());
	ASSERT_EQ(late["faults"].size(), 1u);
	ASSERT_EQ(early["faults"].size(), 1u);
	EXPECT_EQ(late["faults"][0]["kind"], "straggler");
	EXPECT_EQ(late["faults"][0]["factor"], 3.0);
	EXPECT_EQ(late["faults"][0]["from_step"], 2);
	EXPECT_EQ(early["faults"][0]["factor"], 1.5);
	EXPECT_EQ(early["faults"][0]["from_step"], 0);
	const double at_late = late["faults"][0]["injected_at"].get<double>();
	const double at_early = early["faults"][0]["injected_at"].get<double>();
	EXPECT_GE(at_early, t0 - 0.01);
	// Two unhurried 10 ms steps (one synchronised by the 1.5x peer) come first.
	EXPECT_GE(at_late, at_early + 0.02);
	EXPECT_LE(at_late, t1 + 0.01);
	for (const json *t : {&none, &late, &early}) {
		EXPECT_EQ((*t)["status"], "completed");
		EXPECT_EQ((*t)["steps_completed"], 6);
	}
}

TEST(SimFaultsTest, BadValuesExit2WithOneLine)
{
	const std::vector<std::vector<std::string>> cases = {
		{"--ranks", "3", "--hang", "3:1"},
		{"--ranks", "3", "--hang", "1:-1"},
		{"--ranks", "3", "--hang", "1"},
		{"--ranks", "3", "--hang", "x:1"},
		{"--ranks", "3", "--hang", "1:2x"},
		{"--ranks", "3", "--hang", "1:1", "--hang", "1:2"},
		{"--ranks", "3", "--hang", "1:1", "--exit", "1:2"},
		{"--ranks", "3", "--steps", "3", "--hang", "1:3"},
		{"--ranks", "3", "--exit", "-1:2"},
		{"--ranks", "3", "--exit", "1:abc"},
		{"--ranks", "3", "--exit", "1:"},
		{"--ranks", "3", "--straggler", "1:0.5@2"},
		{"--ranks", "3", "--straggler", "1:2@-1"},
		{"--ranks", "3", "--straggler", "1:2@"},
		{"--ranks", "3", "--straggler", "1:@2"},
		{"--ranks", "3", "--straggler", "1:2@x"},
		{"--ranks", "3", "--straggler", "1:2", "--straggler", "1:3"},
		{"--ranks", "3", "--nodes", "0"},
		{"--ranks", "3", "--nodes", "4"},
		{"--ranks", "6", "--nodes", "4"}, // blocks of 2 leave node 3 empty
		{"--ranks", "3", "--nodes", "x"},
		{"--ranks", "3", "--hang-timeout", "-1"},
		// The GPU faults' bad values (more in sim_gpu_test.cpp).
		{"--ranks", "3", "--gpu-slow", "1:1"},
		{"--ranks", "3", "--pp", "2"},
		{"--ranks", "3", "--bubble", "0:5"},
	};
	for (const auto &a : cases) {
		std::string joined;
		for (const auto &s : a)
			joined += s + " ";
		SCOPED_TRACE(joined);
		TempDir dir;
		Sim sim;
		sim.start(a, dir.path);
		EXPECT_EQ(sim.wait(5s), 2);
		auto err = lines_of(slurp(dir.path / "stderr.txt"));
		ASSERT_EQ(err.size(), 1u) << slurp(dir.path / "stderr.txt");
		EXPECT_EQ(err[0].rfind("argus-sim: error:", 0), 0u) << err[0];
		EXPECT_EQ(slurp(dir.path / "stdout.txt"), "");
	}
}

} // namespace
