// argus-sim's emulated GPU: activity records through USDT (bpf/argus_gpu_wire.h),
// NCCL kernels on the GPU timeline, and the GPU faults --gpu-slow, --pp/--bubble.
// The totals of the truth's "gpu" object are exactly what crossed the
// argus:gpu_batch probe; here they are checked against the call pattern.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <elf.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bpf/argus_gpu_wire.h"
#include "sim/sim_gpu.h"
#include "tests/unit/sim_test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;
using namespace argus::simtest;

json truth_of(const fs::path &out, int rank)
{
	return json::parse(slurp(out / ("rank-" + std::to_string(rank) + ".json")));
}

// ---- the documented pattern (workload.h) ----

constexpr int kKernelsPerStep = 16;
constexpr double kWeights[4] = {1.25, 1.5, 0.25, 1.0};

// Emulated duration of kernel k in us at step_ms (truncated as the worker does).
std::uint64_t kernel_us(int step_ms, int k)
{
	const double us = step_ms * 1000.0 * 0.6 / kKernelsPerStep * kWeights[k];
	return us < 1.0 ? 1 : static_cast<std::uint64_t>(us);
}

// Compute kernel time of one step, in ns, with kernel durations x factor.
std::uint64_t compute_ns_per_step(int step_ms, double factor = 1.0)
{
	std::uint64_t ns = 0;
	for (int i = 0; i < kKernelsPerStep; i++)
		ns += static_cast<std::uint64_t>(static_cast<double>(kernel_us(step_ms, i % 4)) * factor) * 1000;
	return ns;
}

// NCCL kernels of a rank: one per collective outside a group, one per group,
// one per eager (pipeline) send/recv.
std::uint64_t expected_nccl_kernels(const json &t)
{
	std::uint64_t n = t["nccl_group"]["end"].get<std::uint64_t>();
	for (const char *op : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"})
		if (t["nccl"].contains(op))
			n += t["nccl"][op]["calls"].get<std::uint64_t>();
	// Ring send/recv are grouped (counted by the group); the rest are eager.
	const std::uint64_t grouped = t["nccl_group"]["end"].get<std::uint64_t>();
	for (const char *op : {"send", "recv"})
		if (t["nccl"].contains(op))
			n += t["nccl"][op]["calls"].get<std::uint64_t>() - grouped;
	return n;
}

const std::vector<std::string> kFast = {"--init-ms", "0", "--quiet"};

std::vector<std::string> with(std::vector<std::string> a, const fs::path &out)
{
	a.insert(a.end(), kFast.begin(), kFast.end());
	a.push_back("--out");
	a.push_back(out.string());
	return a;
}

void expect_consistent(const json &t, int compute_names = 4)
{
	const json &g = t["gpu"];
	EXPECT_EQ(g["dropped"], 0);
	EXPECT_EQ(g["records"].get<std::uint64_t>(),
		  g["kernels"].get<std::uint64_t>() + g["memcpy"].get<std::uint64_t>());
	EXPECT_EQ(g["kernels"].get<std::uint64_t>(),
		  t["cuda"]["kernel_launches"].get<std::uint64_t>() + g["nccl_kernels"].get<std::uint64_t>());
	EXPECT_EQ(g["nccl_kernels"].get<std::uint64_t>(), expected_nccl_kernels(t));
	EXPECT_GE(g["kernel_ns"].get<std::uint64_t>(), g["nccl_kernel_ns"].get<std::uint64_t>());
	// Every host-API copy the worker made (its truth, counted at the call)
	// crossed the probe as one memcpy record of the same direction and size.
	std::uint64_t copies = 0;
	for (const char *dir : {"htod", "dtoh", "dtod"}) {
		SCOPED_TRACE(dir);
		copies += t["cuda"]["memcpy"][dir]["calls"].get<std::uint64_t>();
		EXPECT_EQ(g["memcpy_bytes"][dir], t["cuda"]["memcpy"][dir]["bytes"]);
	}
	EXPECT_EQ(g["memcpy"].get<std::uint64_t>(), copies);
	EXPECT_GE(t["cuda"]["memcpy"]["htod"]["bytes"].get<std::uint64_t>(), 4096u); // the weight upload
	EXPECT_GE(g["batches"].get<std::uint64_t>(), 1u);
	// The compute kernels + AllReduce f32/bf16, AllGather, ReduceScatter, Broadcast,
	// Reduce, AllToAll, SendRecv.
	EXPECT_EQ(g["names"], compute_names + 8);
}

TEST(SimGpuTest, TruthCountsWhatCrossedTheProbe)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	ASSERT_EQ(run_sim(with({"--ranks", "4", "--steps", "10", "--step-ms", "50"}, out), dir.path), 0)
		<< slurp(dir.path / "stderr.txt");
	for (int r = 0; r < 4; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		json t = truth_of(out, r);
		ASSERT_TRUE(t.contains("gpu")) << t.dump();
		EXPECT_FALSE(t.contains("pp_stage"));
		EXPECT_FALSE(t["gpu"].contains("recv_delay_us"));
		expect_consistent(t);
		const json &g = t["gpu"];
		EXPECT_EQ(t["cuda"]["kernel_launches"], 10 * kKernelsPerStep);
		// 4 collectives + a group per step, 3 more every 5th step.
		EXPECT_EQ(g["nccl_kernels"], 10 * 5 + 2 * 3);
		EXPECT_GT(g["nccl_kernel_ns"].get<std::uint64_t>(), 0u);
		EXPECT_EQ(g["recv_kernels"], 0);
		// Compute kernels exactly as emulated: 10 steps of the nominal durations.
		EXPECT_EQ(g["kernel_ns"].get<std::uint64_t>() - g["nccl_kernel_ns"].get<std::uint64_t>(),
			  10 * compute_ns_per_step(50));
	}
}

// --kernel-names and ARGUS_SIM_GPU_JITTER_PCT (the shape of a real step, for the
// folding bench): every name announced once, the launches cycle through them,
// and the compute time moves off the nominal by at most the jitter.
TEST(SimGpuTest, ManyKernelNamesWithJitteredDurations)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	ASSERT_EQ(run_sim(with({"--ranks", "2", "--steps", "4", "--step-ms", "50", "--kernels-per-step", "600",
				"--kernel-names", "150"},
			       out),
			  dir.path, {"ARGUS_SIM_GPU_JITTER_PCT=3"}),
		  0)
		<< slurp(dir.path / "stderr.txt");
	json t = truth_of(out, 0);
	expect_consistent(t, 150);
	const json &g = t["gpu"];
	EXPECT_EQ(t["cuda"]["kernel_launches"], 4 * 600);
	// Nominal: 50 ms x 0.6 / 600 = 50 us x the weight, truncated, per launch.
	double nominal_ns = 0;
	for (int i = 0; i < 4 * 600; i++) {
		const int k = i % 150;
		const double w = k < 4 ? kWeights[k] : 0.25 + 1.5 * static_cast<double>((k * 37) % 101) / 100.0;
		nominal_ns += static_cast<double>(static_cast<std::uint64_t>(50.0 * w)) * 1000.0;
	}
	const double compute_ns =
		static_cast<double>(g["kernel_ns"].get<std::uint64_t>() - g["nccl_kernel_ns"].get<std::uint64_t>());
	EXPECT_NE(compute_ns, nominal_ns);  // jittered
	EXPECT_NEAR(compute_ns, nominal_ns, nominal_ns * 0.03);
}

// With no agent listening (the USDT semaphores stay 0), the emulated GPU fires
// nothing and counts it all, for the next agent.
TEST(SimGpuTest, NothingFiredWithoutAnAgentButEverythingCounted)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	ASSERT_EQ(run_sim(with({"--ranks", "2", "--steps", "3", "--step-ms", "5"}, out), dir.path,
			  {"ARGUS_SIM_GPU_ASSUME_LISTENING=0"}),
		  0)
		<< slurp(dir.path / "stderr.txt");
	for (int r = 0; r < 2; r++) {
		const json g = truth_of(out, r)["gpu"];
		EXPECT_EQ(g["records"], 0);
		EXPECT_EQ(g["batches"], 0);
		EXPECT_EQ(g["names"], 0);
		EXPECT_GT(g["kernels"].get<std::uint64_t>(), 0u);
		EXPECT_EQ(g["unheard_records"].get<std::uint64_t>(),
			  g["kernels"].get<std::uint64_t>() + g["memcpy"].get<std::uint64_t>());
	}
}

TEST(SimGpuTest, ActivityCanBeTurnedOff)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	ASSERT_EQ(run_sim(with({"--ranks", "2", "--steps", "2", "--step-ms", "5"}, out), dir.path,
			  {"ARGUS_SIM_GPU_ACTIVITY=0"}),
		  0)
		<< slurp(dir.path / "stderr.txt");
	for (int r = 0; r < 2; r++) {
		json t = truth_of(out, r);
		EXPECT_EQ(t["status"], "completed");
		EXPECT_EQ(t["gpu"]["records"], 0);
		EXPECT_EQ(t["gpu"]["batches"], 0);
		EXPECT_EQ(t["gpu"]["names"], 0);
		EXPECT_EQ(t["cuda"]["kernel_launches"], 2 * kKernelsPerStep);
	}
}

TEST(SimGpuTest, GpuSlowRankWaitsLeastInNcclKernelsAndKeepsItsHostPace)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	ASSERT_EQ(run_sim(with({"--ranks", "4", "--steps", "10", "--step-ms", "50", "--gpu-slow", "1:3@2"}, out),
			  dir.path),
		  0)
		<< slurp(dir.path / "stderr.txt");
	std::map<int, std::uint64_t> nccl_ns;
	for (int r = 0; r < 4; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		json t = truth_of(out, r);
		expect_consistent(t);
		EXPECT_EQ(t["status"], "completed");
		EXPECT_EQ(t["steps_completed"], 10); // the host is not slowed
		nccl_ns[r] = t["gpu"]["nccl_kernel_ns"].get<std::uint64_t>();
		const std::uint64_t compute =
			t["gpu"]["kernel_ns"].get<std::uint64_t>() - t["gpu"]["nccl_kernel_ns"].get<std::uint64_t>();
		if (r == 1) {
			ASSERT_EQ(t["faults"].size(), 1u);
			EXPECT_EQ(t["faults"][0]["kind"], "gpu_slow");
			EXPECT_EQ(t["faults"][0]["factor"], 3.0);
			EXPECT_EQ(t["faults"][0]["from_step"], 2);
			EXPECT_GT(t["faults"][0]["injected_at"].get<double>(), 1.6e9);
			EXPECT_EQ(compute, 2 * compute_ns_per_step(50) + 8 * compute_ns_per_step(50, 3.0));
		} else {
			EXPECT_TRUE(t["faults"].empty());
			EXPECT_EQ(compute, 10 * compute_ns_per_step(50));
		}
	}
	// Its peers' NCCL kernels wait for its GPU (~40 ms a step); its own do not.
	for (int r : {0, 2, 3}) {
		EXPECT_GT(nccl_ns[r], 5 * nccl_ns[1]) << "rank " << r;
		EXPECT_GT(nccl_ns[r], 8 * 20'000'000ull) << "rank " << r; // > 20 ms a slow step
	}
}

TEST(SimGpuTest, PipelineStagesReceiveWithFillAndBubble)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	// Hosts paced by sleep only (--host-cpu 0): 8 ranks on a loaded 2-core box
	// would otherwise make a CPU-starved rank late by more than the bubble.
	ASSERT_EQ(run_sim(with({"--ranks", "8", "--steps", "10", "--step-ms", "50", "--pp", "4", "--bubble",
				"2:20", "--host-cpu", "0"},
			       out),
			  dir.path),
		  0)
		<< slurp(dir.path / "stderr.txt");
	const std::int64_t fill_us = 50 * 1000 / 10; // 10% of step_ms
	std::map<int, std::uint64_t> nccl_ns;
	for (int r = 0; r < 8; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		json t = truth_of(out, r);
		const int stage = r / 2;
		EXPECT_EQ(t["status"], "completed");
		EXPECT_EQ(t["pp_stage"], stage);
		ASSERT_TRUE(t.contains("gpu"));
		expect_consistent(t);
		const json &g = t["gpu"];
		EXPECT_EQ(g["pp_stage"], stage);
		EXPECT_EQ(g["recv_delay_us"], stage == 0 ? 0 : fill_us + (stage == 2 ? 20000 : 0));
		EXPECT_EQ(g["recv_kernels"], stage > 0 ? 10 : 0);
		// Ring (grouped) + pipeline (eager) calls, all counted.
		const std::uint64_t ring = (1u << 17) * 10 + 4096 * (0 + 1 + 2 + 3 + 4 + 5 + 6 + 7 + 0 + 1);
		EXPECT_EQ(t["nccl"]["send"]["calls"], 10 + (stage < 3 ? 10 : 0));
		EXPECT_EQ(t["nccl"]["recv"]["calls"], 10 + (stage > 0 ? 10 : 0));
		EXPECT_EQ(t["nccl"]["send"]["bytes"], 2 * ring + (stage < 3 ? 10 * 2 * (1u << 16) : 0));
		EXPECT_EQ(t["nccl"]["recv"]["bytes"], 2 * ring + (stage > 0 ? 10 * 2 * (1u << 16) : 0));
		EXPECT_EQ(g["nccl_kernels"], 56 + 10 * ((stage < 3 ? 1 : 0) + (stage > 0 ? 1 : 0)));
		if (stage == 2) {
			ASSERT_EQ(t["faults"].size(), 1u);
			EXPECT_EQ(t["faults"][0]["kind"], "bubble");
			EXPECT_EQ(t["faults"][0]["stage"], 2);
			EXPECT_EQ(t["faults"][0]["ms"], 20);
		} else {
			EXPECT_TRUE(t["faults"].empty());
		}
		nccl_ns[r] = g["nccl_kernel_ns"].get<std::uint64_t>();
	}
	// The bubble's stage is the late one: the others wait for it in their collectives.
	const std::uint64_t late = std::max(nccl_ns[4], nccl_ns[5]);
	for (int r : {0, 1, 2, 3, 6, 7})
		EXPECT_GT(nccl_ns[r], late) << "rank " << r;
}

TEST(SimGpuTest, GoodFlagsRun)
{
	const std::vector<std::vector<std::string>> cases = {
		{"--ranks", "2", "--gpu-slow", "1:1.5"},
		{"--ranks", "2", "--gpu-slow", "0:100@1", "--gpu-slow", "1:2"},
		{"--ranks", "2", "--pp", "2"},
		{"--ranks", "4", "--pp", "2", "--bubble", "0:1", "--bubble", "1:3"},
		{"--ranks", "4", "--pp", "4", "--bubble", "3:1", "--gpu-slow", "2:4"},
	};
	for (const auto &a : cases) {
		std::string joined;
		for (const auto &s : a)
			joined += s + " ";
		SCOPED_TRACE(joined);
		TempDir dir;
		std::vector<std::string> args = a;
		for (const char *x : {"--steps", "2", "--step-ms", "2"})
			args.push_back(x);
		const fs::path out = dir.path / "truth";
		EXPECT_EQ(run_sim(with(args, out), dir.path), 0) << slurp(dir.path / "stderr.txt");
		EXPECT_EQ(slurp(dir.path / "stderr.txt"), "");
	}
	TempDir dir;
	ASSERT_EQ(run_sim({"--help"}, dir.path), 0);
	const std::string help = slurp(dir.path / "stdout.txt");
	for (const char *flag : {"--gpu-slow", "--pp", "--bubble"})
		EXPECT_NE(help.find(flag), std::string::npos) << flag;
}

TEST(SimGpuTest, BadFlagsExit2WithOneLine)
{
	const std::vector<std::vector<std::string>> cases = {
		{"--ranks", "3", "--gpu-slow", "1:1"},       // FACTOR must be > 1
		{"--ranks", "3", "--gpu-slow", "1:0.5"},
		{"--ranks", "3", "--gpu-slow", "1:100.5"},   // <= 100
		{"--ranks", "3", "--gpu-slow", "1:x"},
		{"--ranks", "3", "--gpu-slow", "1:nan"},
		{"--ranks", "3", "--gpu-slow", "3:2"},       // rank out of range
		{"--ranks", "3", "--gpu-slow", "-1:2"},
		{"--ranks", "3", "--gpu-slow", "1"},
		{"--ranks", "3", "--gpu-slow", "1:2@"},
		{"--ranks", "3", "--gpu-slow", "1:2@-1"},
		{"--ranks", "3", "--steps", "3", "--gpu-slow", "1:2@3"},
		{"--ranks", "3", "--gpu-slow", "1:2", "--gpu-slow", "1:3"},
		{"--ranks", "4", "--pp", "1"},
		{"--ranks", "4", "--pp", "0"},
		{"--ranks", "4", "--pp", "3"},               // does not divide ranks
		{"--ranks", "4", "--pp", "8"},
		{"--ranks", "4", "--pp", "x"},
		{"--ranks", "4", "--bubble", "0:5"},         // needs --pp
		{"--kernel-names", "3"},                     // 4..1024
		{"--kernel-names", "1025"},
		{"--ranks", "4", "--pp", "2", "--bubble", "2:5"}, // stage out of range
		{"--ranks", "4", "--pp", "2", "--bubble", "-1:5"},
		{"--ranks", "4", "--pp", "2", "--bubble", "x:5"},
		{"--ranks", "4", "--pp", "2", "--bubble", "1:0"},
		{"--ranks", "4", "--pp", "2", "--bubble", "1:60001"},
		{"--ranks", "4", "--pp", "2", "--bubble", "1:2.5"},
		{"--ranks", "4", "--pp", "2", "--bubble", "1"},
		{"--ranks", "4", "--pp", "2", "--bubble", "1:"},
		{"--ranks", "4", "--pp", "2", "--bubble", "1:5", "--bubble", "1:6"},
	};
	for (const auto &a : cases) {
		std::string joined;
		for (const auto &s : a)
			joined += s + " ";
		SCOPED_TRACE(joined);
		TempDir dir;
		EXPECT_EQ(run_sim(a, dir.path, {}, 5s), 2);
		auto err = lines_of(slurp(dir.path / "stderr.txt"));
		ASSERT_EQ(err.size(), 1u) << slurp(dir.path / "stderr.txt");
		EXPECT_EQ(err[0].rfind("argus-sim: error:", 0), 0u) << err[0];
		EXPECT_EQ(slurp(dir.path / "stdout.txt"), "");
	}
}

// ---- the library: USDT notes, exported producer symbol, the timeline in-process ----

struct SdtNote {
	std::string provider, name, args;
	std::uint64_t semaphore;
};

// The stapsdt notes of an ELF64 file (readelf -n).
std::vector<SdtNote> sdt_notes(const std::string &path)
{
	std::vector<SdtNote> notes;
	const std::string data = slurp(path);
	if (data.size() < sizeof(Elf64_Ehdr))
		return notes;
	Elf64_Ehdr eh;
	std::memcpy(&eh, data.data(), sizeof eh);
	if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_shoff + sizeof(Elf64_Shdr) * eh.e_shnum > data.size())
		return notes;
	for (unsigned i = 0; i < eh.e_shnum; i++) {
		Elf64_Shdr sh;
		std::memcpy(&sh, data.data() + eh.e_shoff + i * sizeof sh, sizeof sh);
		if (sh.sh_type != SHT_NOTE || sh.sh_offset + sh.sh_size > data.size())
			continue;
		std::size_t off = sh.sh_offset, end = sh.sh_offset + sh.sh_size;
		while (off + sizeof(Elf64_Nhdr) <= end) {
			Elf64_Nhdr nh;
			std::memcpy(&nh, data.data() + off, sizeof nh);
			const std::size_t name_off = off + sizeof nh;
			const std::size_t desc_off = name_off + ((nh.n_namesz + 3) & ~3u);
			const std::size_t next = desc_off + ((nh.n_descsz + 3) & ~3u);
			if (next > end)
				break;
			if (nh.n_type == 3 && std::string(data.data() + name_off) == "stapsdt" &&
			    nh.n_descsz > 24) {
				SdtNote n;
				std::uint64_t addrs[3];
				std::memcpy(addrs, data.data() + desc_off, sizeof addrs);
				n.semaphore = addrs[2];
				const char *p = data.data() + desc_off + 24;
				n.provider = p;
				p += n.provider.size() + 1;
				n.name = p;
				p += n.name.size() + 1;
				n.args = p;
				notes.push_back(n);
			}
			off = next;
		}
	}
	return notes;
}

TEST(SimGpuTest, CudaShimCarriesTheUsdtProbesAndTheProducerSymbol)
{
	std::map<std::string, SdtNote> by_name;
	for (const auto &n : sdt_notes(kCudaLib)) {
		if (n.provider == ARGUS_GPU_USDT_PROVIDER) {
			EXPECT_TRUE(by_name.emplace(n.name, n).second) << "two notes for " << n.name;
		}
	}
	ASSERT_EQ(by_name.count(ARGUS_GPU_USDT_BATCH), 1u);
	ASSERT_EQ(by_name.count(ARGUS_GPU_USDT_NAME), 1u);
	EXPECT_EQ(by_name.size(), 2u);
	for (const auto &[name, n] : by_name) {
		SCOPED_TRACE(name);
		EXPECT_NE(n.semaphore, 0u); // semaphores: the producer knows whether an agent listens
	}
	// (recs pointer, u32 n, u64 dropped) and (u32 id, pointer)
	EXPECT_EQ(lines_of(by_name[ARGUS_GPU_USDT_BATCH].args).size(), 1u);
	EXPECT_EQ(by_name[ARGUS_GPU_USDT_BATCH].args.rfind("8@", 0), 0u) << by_name[ARGUS_GPU_USDT_BATCH].args;
	EXPECT_NE(by_name[ARGUS_GPU_USDT_BATCH].args.find(" 4@"), std::string::npos);
	EXPECT_NE(by_name[ARGUS_GPU_USDT_BATCH].args.find(" 8@"), std::string::npos);
	EXPECT_EQ(by_name[ARGUS_GPU_USDT_NAME].args.rfind("4@", 0), 0u) << by_name[ARGUS_GPU_USDT_NAME].args;
	// The NCCL shim is no producer.
	for (const auto &n : sdt_notes(kNcclLib))
		EXPECT_NE(n.provider, ARGUS_GPU_USDT_PROVIDER);

	void *lib = dlopen(kCudaLib.c_str(), RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(lib, nullptr) << dlerror();
	auto version = reinterpret_cast<argus_gpu_wire_version_fn>(dlsym(lib, "argus_gpu_wire_version"));
	ASSERT_NE(version, nullptr);
	EXPECT_EQ(version(), static_cast<unsigned>(ARGUS_GPU_WIRE_VERSION));
	for (const char *s : {"argus_sim_gpu_flush_all", "argus_sim_gpu_totals", "argus_sim_gpu_ready_ns",
			      "argus_sim_gpu_kernel"})
		EXPECT_NE(dlsym(lib, s), nullptr) << s;
	dlclose(lib);
}

long long mono_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

TEST(SimGpuTest, EmulatedTimelineInProcess)
{
	setenv(ARGUS_SIM_GPU_ASSUME_LISTENING_ENV, "1", 1); // no agent here; read at the first batch
	void *lib = dlopen(kCudaLib.c_str(), RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(lib, nullptr) << dlerror();
	using CUresult = int;
	auto cuInit = sym<CUresult (*)(unsigned)>(lib, "cuInit");
	auto cuStreamCreate = sym<CUresult (*)(void **, unsigned)>(lib, "cuStreamCreate");
	auto cuStreamSynchronize = sym<CUresult (*)(void *)>(lib, "cuStreamSynchronize");
	auto cuModuleLoadData = sym<CUresult (*)(void **, const void *)>(lib, "cuModuleLoadData");
	auto cuModuleGetFunction = sym<CUresult (*)(void **, void *, const char *)>(lib, "cuModuleGetFunction");
	auto set_us = sym<void (*)(void *, unsigned)>(lib, "argus_sim_set_kernel_us");
	auto cuLaunchKernel = sym<CUresult (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
					       unsigned, unsigned, void *, void **, void **)>(lib, "cuLaunchKernel");
	auto ready_ns = sym<argus_sim_gpu_ready_ns_fn>(lib, "argus_sim_gpu_ready_ns");
	auto gpu_kernel = sym<argus_sim_gpu_kernel_fn>(lib, "argus_sim_gpu_kernel");
	auto totals = sym<argus_sim_gpu_totals_fn>(lib, "argus_sim_gpu_totals");
	auto flush_all = sym<argus_sim_gpu_flush_all_fn>(lib, "argus_sim_gpu_flush_all");
	ASSERT_TRUE(cuInit && cuStreamCreate && cuStreamSynchronize && cuModuleLoadData && cuModuleGetFunction &&
		    set_us && cuLaunchKernel && ready_ns && gpu_kernel && totals && flush_all);

	ASSERT_EQ(cuInit(0), 0);
	argus_sim_gpu_totals t0{}, t1{};
	EXPECT_EQ(totals(nullptr, sizeof t0), -1);
	ASSERT_EQ(totals(&t0, sizeof t0), 0);
	void *compute = nullptr, *comm = nullptr, *mod = nullptr, *fn = nullptr;
	ASSERT_EQ(cuStreamCreate(&compute, 0), 0);
	ASSERT_EQ(cuStreamCreate(&comm, 0), 0);
	ASSERT_EQ(cuModuleLoadData(&mod, "fake"), 0);
	ASSERT_EQ(cuModuleGetFunction(&fn, mod, "gpu_test_kernel"), 0);
	set_us(fn, 1);

	// More than a batch's worth of short kernels: split into <= 256 per fire.
	const int n = 600;
	for (int i = 0; i < n; i++)
		ASSERT_EQ(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, compute, nullptr, nullptr), 0);
	ASSERT_EQ(cuStreamSynchronize(compute), 0);
	ASSERT_EQ(totals(&t1, sizeof t1), 0);
	EXPECT_EQ(t1.records - t0.records, static_cast<std::uint64_t>(n));
	EXPECT_EQ(t1.kernels - t0.kernels, static_cast<std::uint64_t>(n));
	EXPECT_EQ(t1.kernel_ns - t0.kernel_ns, static_cast<std::uint64_t>(n) * 1000);
	EXPECT_GE(t1.batches - t0.batches, 3u);
	EXPECT_EQ(t1.nccl_kernels, t0.nccl_kernels);

	// An NCCL kernel on the comm stream holds every stream until it ends.
	const long long now = mono_ns();
	EXPECT_GE(ready_ns(), now);
	const long long end = now + 30'000'000; // 30 ms
	EXPECT_EQ(gpu_kernel(reinterpret_cast<void *>(0xdead0), "x", now, end, ARGUS_GPU_F_NCCL), -1);
	EXPECT_EQ(gpu_kernel(comm, "x", now, now - 1, ARGUS_GPU_F_NCCL), -1);
	ASSERT_EQ(gpu_kernel(comm, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", now + 10'000'000, end,
			     ARGUS_GPU_F_NCCL),
		  0);
	EXPECT_GE(ready_ns(), end);
	ASSERT_EQ(cuStreamSynchronize(compute), 0);
	EXPECT_GE(mono_ns(), end);
	ASSERT_EQ(gpu_kernel(compute, "ncclDevKernel_SendRecv", end, end + 1000,
			     ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV),
		  0);
	flush_all();
	argus_sim_gpu_totals t2{};
	ASSERT_EQ(totals(&t2, sizeof t2), 0);
	EXPECT_EQ(t2.nccl_kernels - t1.nccl_kernels, 2u);
	EXPECT_EQ(t2.nccl_kernel_ns - t1.nccl_kernel_ns, 20'000'000u + 1000u);
	EXPECT_EQ(t2.recv_kernels - t1.recv_kernels, 1u);
	EXPECT_EQ(t2.dropped, t0.dropped);
	// A short struct gets a prefix only.
	argus_sim_gpu_totals part{};
	part.records = 12345;
	ASSERT_EQ(totals(&part, sizeof(std::uint64_t)), 0);
	EXPECT_EQ(part.batches, t2.batches);
	EXPECT_EQ(part.records, 12345u);
	dlclose(lib);
}

} // namespace
