// The simulated training job: truth files of a short run, flag errors, signal
// and rank-death handling, and the ELF shape of the shim libraries.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
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

#include "sim/sim_config.h"
#include "tests/unit/sim_test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace argus::simtest;

// Waits until `path` exists (job.json is written once all ranks are started).
bool wait_for_file(const fs::path &path, std::chrono::milliseconds timeout)
{
	auto deadline = std::chrono::steady_clock::now() + timeout;
	while (!fs::exists(path)) {
		if (std::chrono::steady_clock::now() > deadline)
			return false;
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	}
	return true;
}

// ---- a minimal reader of an ELF64 file's dynamic symbols and SONAME ----

struct DynSym {
	std::uint64_t value;
	unsigned bind;
	unsigned type;
};

struct DynInfo {
	std::multimap<std::string, DynSym> syms; // defined symbols only
	std::string soname;
};

DynInfo read_dynamic(const std::string &path)
{
	DynInfo info;
	std::string data = slurp(path);
	if (data.size() < sizeof(Elf64_Ehdr))
		return info;
	const char *base = data.data();
	Elf64_Ehdr eh;
	std::memcpy(&eh, base, sizeof eh);
	if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
		return info;
	std::vector<Elf64_Shdr> sh(eh.e_shnum);
	if (eh.e_shoff + sizeof(Elf64_Shdr) * eh.e_shnum > data.size())
		return info;
	std::memcpy(sh.data(), base + eh.e_shoff, sizeof(Elf64_Shdr) * eh.e_shnum);
	for (const auto &s : sh) {
		if (s.sh_type == SHT_DYNSYM && s.sh_link < sh.size()) {
			const Elf64_Shdr &str = sh[s.sh_link];
			for (std::uint64_t off = 0; off + sizeof(Elf64_Sym) <= s.sh_size; off += sizeof(Elf64_Sym)) {
				Elf64_Sym sym;
				std::memcpy(&sym, base + s.sh_offset + off, sizeof sym);
				if (sym.st_shndx == SHN_UNDEF || sym.st_name == 0)
					continue;
				std::string name(base + str.sh_offset + sym.st_name);
				info.syms.insert({name, {sym.st_value, ELF64_ST_BIND(sym.st_info),
							 ELF64_ST_TYPE(sym.st_info)}});
			}
		}
		if (s.sh_type == SHT_DYNAMIC && s.sh_link < sh.size()) {
			const Elf64_Shdr &str = sh[s.sh_link];
			for (std::uint64_t off = 0; off + sizeof(Elf64_Dyn) <= s.sh_size; off += sizeof(Elf64_Dyn)) {
				Elf64_Dyn d;
				std::memcpy(&d, base + s.sh_offset + off, sizeof d);
				if (d.d_tag == DT_SONAME)
					info.soname = std::string(base + str.sh_offset + d.d_un.d_val);
			}
		}
	}
	return info;
}

// ---- the expected truth of a run, restated from the documented pattern ----

struct Expected {
	std::map<std::string, std::uint64_t> calls, bytes;
};

Expected expected_nccl(int steps, int world)
{
	Expected e;
	auto add = [&](const char *op, std::uint64_t count, std::uint64_t size) {
		e.calls[op] += 1;
		e.bytes[op] += count * size;
	};
	for (std::uint64_t s = 0; s < static_cast<std::uint64_t>(steps); s++) {
		add("all_reduce", (1u << 20) * (4 + s % 4), 4); // float32
		add("all_reduce", (1u << 19) * (3 + s % 3), 2); // bfloat16
		add("all_gather", (1u << 18) * (1 + s % 2), 2); // bfloat16
		add("reduce_scatter", (1u << 18) * (2 + s % 2), 4); // float32
		if (s % 5 == 0) {
			add("broadcast", 1u << 16, 8); // int64
			add("reduce", 1u << 14, 8);    // float64
			add("all_to_all", 1u << 17, 1); // uint8
		}
		if (world > 1) {
			add("send", (1u << 17) + 4096 * (s % 8), 2); // float16
			add("recv", (1u << 17) + 4096 * (s % 8), 2);
		}
	}
	return e;
}

TEST(SimTest, TruthFilesMatchTheCallPattern)
{
	TempDir dir;
	ASSERT_FALSE(dir.path.empty());
	const fs::path out = dir.path / "truth";
	SimProcess p;
	p.start({"--ranks", "3", "--steps", "7", "--step-ms", "5", "--init-ms", "0", "--out",
			    out.string(), "--straggler", "1:2", "--cuda-errors", "2:3", "--job-id",
			    "unit-job", "--quiet"},
			   dir.path);
	ASSERT_GT(p.pid, 0);
	ASSERT_EQ(p.wait(), 0) << slurp(p.err);
	EXPECT_EQ(slurp(p.out), ""); // --quiet

	json job = json::parse(slurp(out / "job.json"));
	EXPECT_EQ(job["job_id"], "unit-job");
	EXPECT_EQ(job["world_size"], 3);
	ASSERT_EQ(job["ranks"].size(), 3u);
	EXPECT_EQ(job["nccl_lib"], fs::canonical(kNcclLib).string());
	EXPECT_EQ(job["cuda_lib"], fs::canonical(kCudaLib).string());

	const Expected want = expected_nccl(7, 3);
	std::set<int> pids;
	for (int r = 0; r < 3; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		const fs::path f = out / ("rank-" + std::to_string(r) + ".json");
		ASSERT_TRUE(fs::exists(f));
		json t = json::parse(slurp(f));
		EXPECT_EQ(t["job_id"], "unit-job");
		EXPECT_EQ(t["rank"], r);
		EXPECT_EQ(t["local_rank"], r);
		EXPECT_EQ(t["world_size"], 3);
		EXPECT_EQ(t["steps_completed"], 7);
		EXPECT_EQ(t["status"], "completed");
		EXPECT_DOUBLE_EQ(t["host_cpu"].get<double>(), argus::sim::kDefaultHostCpu);
		EXPECT_EQ(t["pid"], job["ranks"][r]["pid"]);
		pids.insert(t["pid"].get<int>());

		EXPECT_EQ(t["nccl"]["all_reduce"]["calls"], 14);
		EXPECT_EQ(t["nccl"].size(), want.calls.size());
		for (const auto &[op, calls] : want.calls) {
			SCOPED_TRACE(op);
			ASSERT_TRUE(t["nccl"].contains(op));
			EXPECT_EQ(t["nccl"][op]["calls"].get<std::uint64_t>(), calls);
			EXPECT_EQ(t["nccl"][op]["bytes"].get<std::uint64_t>(), want.bytes.at(op));
		}
		EXPECT_EQ(t["nccl"]["send"]["calls"], 7);
		EXPECT_EQ(t["nccl"]["recv"]["calls"], 7);
		EXPECT_EQ(t["nccl"]["broadcast"]["calls"], 2); // steps 0 and 5
		EXPECT_EQ(t["nccl_group"]["start"], 7);
		EXPECT_EQ(t["nccl_group"]["end"], 7);
		EXPECT_EQ(t["nccl_init"], 1);
		EXPECT_TRUE(t["nccl_errors"].empty());

		EXPECT_EQ(t["cuda"]["kernel_launches"], 7 * 16);
		EXPECT_EQ(t["cuda"]["sync"]["cuStreamSynchronize"], 7);
		EXPECT_EQ(t["cuda"]["sync"]["cuCtxSynchronize"], 1);   // step 0
		EXPECT_EQ(t["cuda"]["sync"]["cuEventSynchronize"], 1); // step 0
		EXPECT_EQ(t["cuda"]["calls"]["cuLaunchKernel_ptsz"], 7 * 2);
		EXPECT_EQ(t["cuda"]["calls"]["cuLaunchKernelEx"], 7);
		EXPECT_EQ(t["cuda"]["calls"]["cuLaunchKernelEx_ptsz"], 7);
		// Host copies (workload.h): setup HtoD 4096; per step DtoDAsync 4096 and
		// DtoHAsync 64; at step 0 (s%10 == 0) HtoDAsync 256 and DtoD 8192.
		EXPECT_EQ(t["cuda"]["memcpy"]["htod"], json::parse(R"({"calls":2,"bytes":4352})"));
		EXPECT_EQ(t["cuda"]["memcpy"]["dtoh"], json::parse(R"({"calls":7,"bytes":448})"));
		EXPECT_EQ(t["cuda"]["memcpy"]["dtod"], json::parse(R"({"calls":8,"bytes":36864})"));
		EXPECT_EQ(t["cuda"]["calls"]["cuMemcpyDtoHAsync_v2"], 7);
		EXPECT_EQ(t["cuda"]["calls"]["cuMemcpyDtoDAsync_v2"], 7);
		EXPECT_EQ(t["cuda"]["calls"]["cuMemcpyHtoDAsync_v2"], 1);
		EXPECT_EQ(t["cuda"]["calls"]["cuMemcpyDtoD_v2"], 1);
		if (r == 2) {
			EXPECT_EQ(t["cuda"]["errors"], json::parse(R"({"cuMemAlloc":{"CUDA_ERROR_OUT_OF_MEMORY":3}})"));
			// params and grads, the caching allocator's 7 pool segments (classic), the 3 failures
			EXPECT_EQ(t["cuda"]["calls"]["cuMemAlloc_v2"], 2 + 7 + 3);
		} else {
			EXPECT_TRUE(t["cuda"]["errors"].empty());
		}
	}
	EXPECT_EQ(pids.size(), 3u);
	EXPECT_EQ(pids.count(getpid()), 0u);
}

TEST(SimTest, OneRankNeedsNoPeers)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	SimProcess p;
	p.start({"--ranks", "1", "--steps", "3", "--step-ms", "1", "--init-ms", "0",
			    "--kernels-per-step", "4", "--out", out.string()},
			   dir.path);
	ASSERT_EQ(p.wait(), 0) << slurp(p.err);
	EXPECT_EQ(lines_of(slurp(p.out)).size(), 2u); // one line per rank started + the summary
	json t = json::parse(slurp(out / "rank-0.json"));
	EXPECT_EQ(t["steps_completed"], 3);
	EXPECT_EQ(t["cuda"]["kernel_launches"], 12);
	EXPECT_FALSE(t["nccl"].contains("send")); // no ring exchange with one rank
	EXPECT_EQ(t["nccl_group"]["start"], 0);
}

// --host-cpu: that share of the host compute is burnt on CPU, counted in the
// thread's CPU time (so it is exact whatever the load), the rest slept; a
// --straggler scales it too; 0 burns nothing.
TEST(SimTest, HostCpuShareIsBurntOnCpuAndScaledByTheStraggler)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	SimProcess p;
	p.start({"--ranks", "2", "--steps", "10", "--step-ms", "20", "--init-ms", "0", "--kernels-per-step",
		 "4", "--host-cpu", "0.5", "--straggler", "1:2", "--out", out.string(), "--quiet"},
		dir.path);
	ASSERT_EQ(p.wait(), 0) << slurp(p.err);
	for (int r = 0; r < 2; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		json t = json::parse(slurp(out / ("rank-" + std::to_string(r) + ".json")));
		EXPECT_DOUBLE_EQ(t["host_cpu"].get<double>(), 0.5);
		// 10 steps x 20 ms (x2 for the straggler) x 0.5: at least that, a burn
		// loop's overshoot per chunk at most.
		const double want = 10 * 0.020 * (r == 1 ? 2 : 1) * 0.5;
		EXPECT_GE(t["host_cpu_seconds"].get<double>(), want);
		EXPECT_LE(t["host_cpu_seconds"].get<double>(), want * 1.1 + 0.005);
	}

	const fs::path out0 = dir.path / "truth0";
	SimProcess q;
	q.start({"--ranks", "1", "--steps", "3", "--step-ms", "5", "--init-ms", "0", "--host-cpu", "0", "--out",
		 out0.string(), "--quiet"},
		dir.path);
	ASSERT_EQ(q.wait(), 0) << slurp(q.err);
	json t = json::parse(slurp(out0 / "rank-0.json"));
	EXPECT_EQ(t["host_cpu"].get<double>(), 0.0);
	EXPECT_EQ(t["host_cpu_seconds"].get<double>(), 0.0);
	EXPECT_EQ(t["steps_completed"], 3);
}

TEST(SimTest, BadFlagsExitNonZeroWithOneLine)
{
	const std::vector<std::vector<std::string>> cases = {
		{"--ranks", "3", "--straggler", "9:2"},
		{"--bogus"},
		{"--ranks", "0"},
		{"--straggler", "1:0.5"},
		{"--cuda-errors", "x"},
		{"--host-cpu", "1.5"},
		{"--host-cpu", "-0.1"},
		{"--host-cpu", "half"},
		{"--nccl-lib", "/nonexistent/libnccl.so.2"},
	};
	for (const auto &args : cases) {
		std::string joined;
		for (const auto &a : args)
			joined += a + " ";
		SCOPED_TRACE(joined);
		TempDir dir;
		SimProcess p;
	p.start(args, dir.path);
		int code = p.wait(std::chrono::seconds(5));
		EXPECT_EQ(code, 2);
		auto err = lines_of(slurp(p.err));
		ASSERT_EQ(err.size(), 1u) << slurp(p.err);
		EXPECT_NE(err[0].find("argus-sim: error:"), std::string::npos);
		EXPECT_EQ(slurp(p.out), "");
	}
}

TEST(SimTest, SigtermStopsEveryRankCleanly)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	SimProcess p;
	p.start({"--ranks", "3", "--steps", "0", "--step-ms", "10", "--init-ms", "0",
			    "--out", out.string(), "--quiet"},
			   dir.path);
	ASSERT_TRUE(wait_for_file(out / "job.json", std::chrono::seconds(5)));
	std::this_thread::sleep_for(std::chrono::milliseconds(300));
	kill(p.pid, SIGTERM);
	ASSERT_EQ(p.wait(std::chrono::seconds(10)), 0) << slurp(p.err);
	json job = json::parse(slurp(out / "job.json"));
	for (int r = 0; r < 3; r++) {
		json t = json::parse(slurp(out / ("rank-" + std::to_string(r) + ".json")));
		EXPECT_EQ(t["status"], "stopped");
		EXPECT_GT(t["steps_completed"].get<int>(), 0);
		// every rank's process is gone
		EXPECT_NE(kill(job["ranks"][r]["pid"].get<int>(), 0), 0);
	}
	const std::string shm = job["shm"];
	EXPECT_FALSE(fs::exists("/dev/shm" + shm));
}

TEST(SimTest, DeadRankAbortsItsPeers)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	SimProcess p;
	p.start({"--ranks", "3", "--steps", "0", "--step-ms", "10", "--init-ms", "0",
			    "--out", out.string(), "--quiet"},
			   dir.path);
	ASSERT_TRUE(wait_for_file(out / "job.json", std::chrono::seconds(5)));
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	json job = json::parse(slurp(out / "job.json"));
	kill(job["ranks"][1]["pid"].get<int>(), SIGKILL);
	EXPECT_EQ(p.wait(std::chrono::seconds(10)), 1);
	for (int r : {0, 2}) {
		json t = json::parse(slurp(out / ("rank-" + std::to_string(r) + ".json")));
		EXPECT_EQ(t["status"], "aborted");
		EXPECT_FALSE(t["nccl_errors"].empty());
	}
	EXPECT_FALSE(fs::exists(out / "rank-1.json"));
	const std::string shm = job["shm"];
	EXPECT_FALSE(fs::exists("/dev/shm" + shm));
}

TEST(SimTest, ShimLibrariesLookLikeTheRealOnes)
{
	DynInfo nccl = read_dynamic(kNcclLib);
	EXPECT_EQ(nccl.soname, "libnccl.so.2");
	for (const char *api : {"AllReduce", "Broadcast", "Bcast", "Reduce", "AllGather", "ReduceScatter",
				"AlltoAll", "Gather", "Scatter", "Send", "Recv", "GroupStart", "GroupEnd",
				"CommInitRank", "CommInitRankConfig", "CommInitRankScalable", "CommInitAll",
				"CommDestroy", "CommAbort", "CommCount", "CommCuDevice", "CommUserRank",
				"GetVersion", "GetUniqueId", "GetErrorString", "GetLastError", "CommGetAsyncError"}) {
		const std::string pub = std::string("nccl") + api, prof = "p" + pub;
		SCOPED_TRACE(pub);
		ASSERT_EQ(nccl.syms.count(pub), 1u);
		ASSERT_EQ(nccl.syms.count(prof), 1u);
		const DynSym &w = nccl.syms.find(pub)->second;
		const DynSym &g = nccl.syms.find(prof)->second;
		EXPECT_EQ(w.bind, static_cast<unsigned>(STB_WEAK));
		EXPECT_EQ(g.bind, static_cast<unsigned>(STB_GLOBAL));
		EXPECT_EQ(w.type, static_cast<unsigned>(STT_FUNC));
		EXPECT_EQ(w.value, g.value);
	}
	// Only the API is exported: every defined symbol is ncclX or pncclX.
	for (const auto &[name, sym] : nccl.syms)
		EXPECT_TRUE(name.rfind("nccl", 0) == 0 || name.rfind("pnccl", 0) == 0) << name;

	DynInfo cuda = read_dynamic(kCudaLib);
	EXPECT_EQ(cuda.soname, "libcuda.so.1");
	std::map<std::uint64_t, std::string> by_addr;
	for (const char *api :
	     {"cuInit", "cuDriverGetVersion", "cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetName",
	      "cuCtxCreate", "cuCtxCreate_v2", "cuCtxDestroy_v2", "cuCtxSynchronize", "cuStreamCreate",
	      "cuStreamDestroy_v2", "cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuEventCreate",
	      "cuEventRecord", "cuEventRecord_ptsz", "cuEventSynchronize", "cuEventDestroy_v2",
	      "cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel", "cuLaunchKernel_ptsz",
	      "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuMemAlloc", "cuMemAlloc_v2",
	      "cuMemAllocAsync", "cuMemFree_v2", "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2",
	      "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2", "cuGetErrorString",
	      "cuGetErrorName", "argus_sim_set_kernel_us"}) {
		SCOPED_TRACE(api);
		ASSERT_EQ(cuda.syms.count(api), 1u);
		const DynSym &s = cuda.syms.find(api)->second;
		EXPECT_EQ(s.bind, static_cast<unsigned>(STB_GLOBAL));
		EXPECT_EQ(s.type, static_cast<unsigned>(STT_FUNC));
		// every name is its own function
		EXPECT_TRUE(by_addr.emplace(s.value, api).second)
			<< "shares its address with " << by_addr[s.value];
	}
}

// ---- the shims called in-process ----

long long mono_ms()
{
	return std::chrono::duration_cast<std::chrono::milliseconds>(
		       std::chrono::steady_clock::now().time_since_epoch())
		.count();
}

TEST(SimShimTest, CudaEmulatesMemoryAndStreamTime)
{
	void *lib = dlopen(kCudaLib.c_str(), RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(lib, nullptr) << dlerror();
	using CUresult = int;
	auto cuInit = sym<CUresult (*)(unsigned)>(lib, "cuInit");
	auto cuMemAlloc_v2 = sym<CUresult (*)(unsigned long long *, std::size_t)>(lib, "cuMemAlloc_v2");
	auto cuMemFree_v2 = sym<CUresult (*)(unsigned long long)>(lib, "cuMemFree_v2");
	auto cuStreamCreate = sym<CUresult (*)(void **, unsigned)>(lib, "cuStreamCreate");
	auto cuStreamSynchronize = sym<CUresult (*)(void *)>(lib, "cuStreamSynchronize");
	auto cuModuleLoadData = sym<CUresult (*)(void **, const void *)>(lib, "cuModuleLoadData");
	auto cuModuleGetFunction = sym<CUresult (*)(void **, void *, const char *)>(lib, "cuModuleGetFunction");
	auto set_us = sym<void (*)(void *, unsigned)>(lib, "argus_sim_set_kernel_us");
	auto cuLaunchKernel = sym<CUresult (*)(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
					       unsigned, unsigned, void *, void **, void **)>(lib, "cuLaunchKernel");
	auto cuEventCreate = sym<CUresult (*)(void **, unsigned)>(lib, "cuEventCreate");
	auto cuEventRecord = sym<CUresult (*)(void *, void *)>(lib, "cuEventRecord");
	auto cuEventSynchronize = sym<CUresult (*)(void *)>(lib, "cuEventSynchronize");
	auto cuGetErrorName = sym<CUresult (*)(CUresult, const char **)>(lib, "cuGetErrorName");
	ASSERT_TRUE(cuInit && cuMemAlloc_v2 && cuMemFree_v2 && cuStreamCreate && cuStreamSynchronize &&
		    cuModuleLoadData && cuModuleGetFunction && set_us && cuLaunchKernel && cuEventCreate &&
		    cuEventRecord && cuEventSynchronize && cuGetErrorName);

	unsigned long long p = 0;
	EXPECT_EQ(cuMemAlloc_v2(&p, 1024), 3); // CUDA_ERROR_NOT_INITIALIZED
	ASSERT_EQ(cuInit(0), 0);
	EXPECT_EQ(cuMemAlloc_v2(nullptr, 1024), 1); // CUDA_ERROR_INVALID_VALUE
	EXPECT_EQ(cuMemAlloc_v2(&p, std::size_t{1} << 50), 2); // CUDA_ERROR_OUT_OF_MEMORY
	ASSERT_EQ(cuMemAlloc_v2(&p, 1 << 20), 0);
	EXPECT_NE(p, 0u);
	EXPECT_EQ(cuMemFree_v2(p), 0);
	EXPECT_EQ(cuMemFree_v2(p), 1); // double free
	const char *name = nullptr;
	EXPECT_EQ(cuGetErrorName(2, &name), 0);
	EXPECT_STREQ(name, "CUDA_ERROR_OUT_OF_MEMORY");

	void *stream = nullptr, *mod = nullptr, *fn = nullptr, *ev = nullptr;
	ASSERT_EQ(cuStreamCreate(&stream, 0), 0);
	ASSERT_EQ(cuModuleLoadData(&mod, "fake"), 0);
	ASSERT_EQ(cuModuleGetFunction(&fn, mod, "k"), 0);
	ASSERT_EQ(cuEventCreate(&ev, 0), 0);
	set_us(fn, 20000); // 20 ms per launch
	long long t0 = mono_ms();
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr), 0);
	EXPECT_LT(mono_ms() - t0, 30); // launches are asynchronous
	ASSERT_EQ(cuEventRecord(ev, stream), 0);
	ASSERT_EQ(cuEventSynchronize(ev), 0);
	EXPECT_GE(mono_ms() - t0, 59); // the event completes after the three kernels
	ASSERT_EQ(cuStreamSynchronize(stream), 0);
	EXPECT_EQ(cuLaunchKernel(reinterpret_cast<void *>(0x1234), 1, 1, 1, 1, 1, 1, 0, stream, nullptr,
				 nullptr),
		  400); // CUDA_ERROR_INVALID_HANDLE, no crash
	EXPECT_EQ(cuStreamSynchronize(reinterpret_cast<void *>(0xdead0)), 400);
	dlclose(lib);
}

TEST(SimShimTest, NcclCommunicatorAcrossThreads)
{
	void *lib = dlopen(kNcclLib.c_str(), RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(lib, nullptr) << dlerror();
	struct Id {
		char internal[128];
	};
	using R = int;
	auto getId = sym<R (*)(Id *)>(lib, "ncclGetUniqueId");
	auto init = sym<R (*)(void **, int, Id, int)>(lib, "ncclCommInitRank");
	auto destroy = sym<R (*)(void *)>(lib, "ncclCommDestroy");
	auto abort_ = sym<R (*)(void *)>(lib, "ncclCommAbort");
	auto allReduce = sym<R (*)(const void *, void *, std::size_t, int, int, void *, void *)>(lib, "ncclAllReduce");
	auto send = sym<R (*)(const void *, std::size_t, int, int, void *, void *)>(lib, "ncclSend");
	auto recv = sym<R (*)(void *, std::size_t, int, int, void *, void *)>(lib, "ncclRecv");
	auto groupStart = sym<R (*)()>(lib, "ncclGroupStart");
	auto groupEnd = sym<R (*)()>(lib, "ncclGroupEnd");
	auto userRank = sym<R (*)(void *, int *)>(lib, "ncclCommUserRank");
	ASSERT_TRUE(getId && init && destroy && abort_ && allReduce && send && recv && groupStart &&
		    groupEnd && userRank);

	char buf[16];
	EXPECT_EQ(allReduce(buf, buf, 4, 7, 0, nullptr, nullptr), 4); // ncclInvalidArgument
	EXPECT_EQ(allReduce(buf, buf, 4, 7, 0, reinterpret_cast<void *>(0x99), nullptr), 4);
	EXPECT_EQ(groupEnd(), 5); // ncclInvalidUsage: no group open

	Id id{};
	ASSERT_EQ(getId(&id), 0);
	void *comms[2] = {};
	R init_rc[2] = {-1, -1};
	long long arrive_ms[2] = {};
	R coll_rc[2][4] = {};
	auto rank_fn = [&](int r) {
		init_rc[r] = init(&comms[r], 2, id, r);
		if (init_rc[r] != 0)
			return;
		void *c = comms[r];
		if (r == 1)
			std::this_thread::sleep_for(std::chrono::milliseconds(60)); // a slow rank
		coll_rc[r][0] = allReduce(buf, buf, 4, 7, 0, c, nullptr);
		arrive_ms[r] = mono_ms();
		// a symmetric exchange inside a group, and a matched pair outside one
		groupStart();
		send(buf, 4, 7, 1 - r, c, nullptr);
		recv(buf, 4, 7, 1 - r, c, nullptr);
		coll_rc[r][1] = groupEnd();
		coll_rc[r][2] = send(buf, 4, 7, 1 - r, c, nullptr);
		coll_rc[r][3] = recv(buf, 4, 7, 1 - r, c, nullptr);
	};
	long long t0 = mono_ms();
	std::thread a(rank_fn, 0), b(rank_fn, 1);
	a.join();
	b.join();
	ASSERT_EQ(init_rc[0], 0);
	ASSERT_EQ(init_rc[1], 0);
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < 4; k++)
			EXPECT_EQ(coll_rc[r][k], 0) << "rank " << r << " call " << k;
	// the fast rank waited inside the collective for the slow one
	EXPECT_GE(arrive_ms[0] - t0, 55);
	int rank = -1;
	EXPECT_EQ(userRank(comms[1], &rank), 0);
	EXPECT_EQ(rank, 1);

	// ncclCommAbort releases a peer blocked in a collective with an error.
	R blocked_rc = -1;
	std::thread waiter([&] { blocked_rc = allReduce(buf, buf, 4, 7, 0, comms[0], nullptr); });
	std::this_thread::sleep_for(std::chrono::milliseconds(50));
	EXPECT_EQ(abort_(comms[1]), 0);
	waiter.join();
	EXPECT_EQ(blocked_rc, 6); // ncclRemoteError
	EXPECT_EQ(destroy(comms[0]), 0);
	EXPECT_EQ(destroy(comms[0]), 4); // already destroyed: invalid argument, no crash
	dlclose(lib);
}

} // namespace
