// Private to argus-sim's worker mode (worker.cpp, worker_libs.cpp, worker_step.cpp,
// worker_comms.cpp, worker_layout.cpp, worker_memory.cpp): one rank of the simulated
// job (Rank) and the C ABI of the CUDA and NCCL libraries it calls.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <unistd.h>

#include "argus_result_codes.h"
#include "cuda_vmm_abi.h"
#include "layout.h"
#include "sim_config.h"
#include "sim_gpu.h"
#include "truth.h"
#include "workload.h"

namespace argus::sim::worker_detail {

// ---- the C ABI of the two libraries (opaque handles, by-value unique id) ----

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st *;
using CUmodule = CUmod_st *;
using CUfunction = CUfunc_st *;
using CUstream = CUstream_st *;
using CUevent = CUevent_st *;
struct CUlaunchConfig {
	unsigned gridDimX, gridDimY, gridDimZ;
	unsigned blockDimX, blockDimY, blockDimZ;
	unsigned sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned numAttrs;
};
// Device memory: pools, and the virtual memory handles and their properties
// (cuda_vmm_abi.h).
struct CUmemPoolHandle_st;
using CUmemoryPool = CUmemPoolHandle_st *;
using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
			      unsigned, CUstream, void **, void **);
using LaunchExFn = CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **);

using ncclResult_t = int;
struct ncclComm;
using ncclComm_t = ncclComm *;
struct NcclUniqueId {
	char internal[128];
};

struct CudaApi {
	CUresult (*cuInit)(unsigned);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuCtxCreate_v2)(CUcontext *, unsigned, CUdevice);
	CUresult (*cuCtxDestroy_v2)(CUcontext);
	CUresult (*cuCtxSynchronize)();
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy_v2)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuStreamSynchronize_ptsz)(CUstream);
	CUresult (*cuEventCreate)(CUevent *, unsigned);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventDestroy_v2)(CUevent);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	LaunchFn cuLaunchKernel;
	LaunchFn cuLaunchKernel_ptsz;
	LaunchExFn cuLaunchKernelEx;
	LaunchExFn cuLaunchKernelEx_ptsz;
	CUresult (*cuMemGetInfo_v2)(std::size_t *, std::size_t *);
	CUresult (*cuDeviceTotalMem_v2)(std::size_t *, CUdevice);
	CUresult (*cuMemAlloc)(unsigned *, unsigned); // legacy 32-bit ABI
	CUresult (*cuMemAlloc_v2)(CUdeviceptr *, std::size_t);
	CUresult (*cuMemAllocPitch_v2)(CUdeviceptr *, std::size_t *, std::size_t, std::size_t, unsigned);
	CUresult (*cuMemAllocManaged)(CUdeviceptr *, std::size_t, unsigned);
	CUresult (*cuMemAllocAsync)(CUdeviceptr *, std::size_t, CUstream);
	CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, std::size_t, CUmemoryPool, CUstream);
	CUresult (*cuMemFree)(unsigned); // legacy 32-bit ABI
	CUresult (*cuMemFree_v2)(CUdeviceptr);
	CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*cuMemGetAllocationGranularity)(std::size_t *, const CUmemAllocationProp *, int);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, std::size_t, std::size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, std::size_t);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, std::size_t, const CUmemAllocationProp *,
				unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemMap)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, std::size_t);
	CUresult (*cuMemSetAccess)(CUdeviceptr, std::size_t, const CUmemAccessDesc *, std::size_t);
	CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr, const void *, std::size_t);
	CUresult (*cuMemcpyDtoD_v2)(CUdeviceptr, CUdeviceptr, std::size_t);
	CUresult (*cuMemcpyHtoDAsync_v2)(CUdeviceptr, const void *, std::size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync_v2)(void *, CUdeviceptr, std::size_t, CUstream);
	CUresult (*cuMemcpyDtoDAsync_v2)(CUdeviceptr, CUdeviceptr, std::size_t, CUstream);
	// Optional, sim only (a real libcuda has none of them; sim_gpu.h).
	void (*argus_sim_set_kernel_us)(CUfunction, unsigned);
	argus_sim_gpu_flush_all_fn argus_sim_gpu_flush_all;
	argus_sim_gpu_totals_fn argus_sim_gpu_totals;
	argus_sim_coll_log_fn argus_sim_coll_log;
	argus_sim_p2p_log_fn argus_sim_p2p_log;
};

struct NcclApi {
	ncclResult_t (*ncclCommInitRank)(ncclComm_t *, int, NcclUniqueId, int);
	ncclResult_t (*ncclCommDestroy)(ncclComm_t);
	ncclResult_t (*ncclCommAbort)(ncclComm_t);
	const char *(*ncclGetErrorString)(ncclResult_t);
	const char *(*ncclGetLastError)(ncclComm_t);
	ncclResult_t (*ncclAllReduce)(const void *, void *, std::size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*ncclAllGather)(const void *, void *, std::size_t, int, ncclComm_t, CUstream);
	ncclResult_t (*ncclReduceScatter)(const void *, void *, std::size_t, int, int, ncclComm_t,
					  CUstream);
	ncclResult_t (*ncclBroadcast)(const void *, void *, std::size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*ncclReduce)(const void *, void *, std::size_t, int, int, int, ncclComm_t,
				   CUstream);
	ncclResult_t (*ncclAlltoAll)(const void *, void *, std::size_t, int, ncclComm_t, CUstream);
	ncclResult_t (*ncclSend)(const void *, std::size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*ncclRecv)(void *, std::size_t, int, int, ncclComm_t, CUstream);
	ncclResult_t (*ncclGroupStart)();
	ncclResult_t (*ncclGroupEnd)();
	ncclResult_t (*ncclCommGetAsyncError)(ncclComm_t, ncclResult_t *);
	// Optional: a framework job with --tp/--ep needs it (NCCL >= 2.18 has it).
	ncclResult_t (*ncclCommSplit)(ncclComm_t, int, int, ncclComm_t *, void *);
};

// The name NCCL gives a result code (the agent's table), or the number.
std::string nccl_result_name(int r);
// The name of a CUresult (the agent's table), or "CUDA_ERROR_<number>".
std::string cuda_result_name(int r);
// Clocks and pacing of the rank (worker.cpp): CLOCK_MONOTONIC ns, CLOCK_REALTIME
// unix seconds (the truth's fault and pause times), a sleep cut short by a stop
// (false then), and whether SIGTERM/SIGINT came.
long long now_ns();
double realtime_s();
bool sleep_until(long long t);
bool stop_requested();
// An environment variable as an int in [0, 2^30]; false when unset or not one.
bool env_int(const char *name, int &out);

// The rank's own device buffers, made at init with the driver directly.
inline constexpr std::size_t kParamsBytes = std::size_t{2} << 30;
inline constexpr std::size_t kGradsBytes = std::size_t{2} << 30;
inline constexpr std::size_t kCommBufBytes = std::size_t{512} << 20;

// Oom: the caching allocator ran out of device memory (worker_memory.cpp).
enum class StepResult { Ok, Stopped, NcclFailed, Hang, Exit, Oom };

// One segment (classic, async) or 20 MiB page (vmm) of a rank's caching allocator.
struct PoolBlock {
	CUdeviceptr ptr = 0;                     // the segment, or where the page is mapped
	CUmemGenericAllocationHandle handle = 0; // vmm: the page's physical memory
	std::size_t bytes = 0;
	bool in_use = false; // holds live tensors: never released while the rank runs
};

// A rank's caching allocator (worker_memory.cpp): what it holds from the driver.
struct MemPool {
	CUdevice dev = 0;
	CUmemoryPool pool = nullptr; // async: the device's default pool
	CUdeviceptr va = 0;          // vmm: the reserved range (0: none)
	std::size_t va_bytes = 0;
	std::vector<bool> page_mapped; // vmm: the range's pages
	std::vector<PoolBlock> blocks;
	std::size_t growth_pages = 0;  // vmm: pages of the first steps' growth
	std::uint64_t leaked = 0;      // vmm: leaked bytes; pages are mapped as they need
	std::size_t leak_pages = 0;
	// An extension's own buffers, made at init and freed at teardown: the legacy
	// 32-bit cuMemAlloc, a pitched and a managed allocation.
	unsigned legacy = 0;
	CUdeviceptr pitched = 0, managed = 0;
	std::size_t pitched_bytes = 0;
};

// One communicator of the rank (worker_comms.cpp): comms_[0] is the world.
struct RankComm {
	Group group;
	bool split = false;                  // made with ncclCommSplit (else ncclCommInitRank)
	std::array<unsigned char, 16> id{};  // the first bytes of its unique id
	ncclComm_t handle = nullptr;         // nullptr once destroyed
	std::uint64_t handle_value = 0;      // as the shim's logs name it
};

class Rank {
public:
	Rank(SimConfig cfg, int rank, int world, int local_rank, NcclUniqueId id)
	    : cfg_(std::move(cfg)), rank_(rank), world_(world), local_rank_(local_rank), id_(id),
	      plan_(plan_for(cfg_, rank)), layout_(layout_of(cfg_)), place_(place_of(layout_, rank))
	{
		truth_.job_id = cfg_.job_id;
		truth_.rank = rank;
		truth_.pid = static_cast<int>(getpid());
		truth_.local_rank = local_rank;
		truth_.world_size = world;
		truth_.node = node_name(node_of(cfg_, rank));
		truth_.local_world_size = local_world_size_of(cfg_, node_of(cfg_, rank));
		if (const char *node = std::getenv(kNodeEnv); node && *node)
			truth_.node = node;
		if (int lws = 0; env_int("LOCAL_WORLD_SIZE", lws) && lws > 0)
			truth_.local_world_size = lws;
		if (plan_.pp_stage >= 0) {
			truth_.pp_stage = plan_.pp_stage;
			// What the NCCL shim applies: the launcher's value, else the plan's.
			int delay = 0;
			truth_.recv_delay_us = env_int(ARGUS_SIM_PP_RECV_DELAY_ENV, delay)
						       ? delay
						       : plan_.recv_delay_us;
		}
	}

	int run();

private:
	void log(const std::string &msg) const
	{
		std::fprintf(stderr, "argus-sim[rank %d]: %s\n", rank_, msg.c_str());
	}

	int finish(const char *status, int code);
	void write_truth();
	void add_fault(nlohmann::json fault);
	int hang(std::int64_t s);
	bool load_libraries();
	bool setup_cuda();
	// worker_step.cpp: the flat step of workload.h, and what every step shares.
	StepResult step(std::int64_t s);
	StepResult step_start(std::int64_t s);
	StepResult step_end(std::int64_t s);
	ncclResult_t call_nccl(const NcclCall &c, CUstream stream, ncclComm_t comm = nullptr);
	void set_kernel_durations(double factor);
	bool host_burn(long long ns, long long &took);
	bool host_compute(long long ns);
	bool launch(int i, int kernel = -1);
	bool pauses(std::int64_t s);
	double straggler_factor(std::int64_t s) const;
	void teardown(bool abort_comm);
	bool stopped_by_launcher() const;
	// worker_memory.cpp: the caching allocator, its pool, and the memory truth.
	CUresult memory_init(CUdevice dev);
	CUresult memory_extras();
	StepResult memory_step(std::int64_t s);
	void memory_teardown();
	StepResult pool_alloc(std::int64_t s, std::size_t bytes, bool in_use, const char *cause);
	CUresult pool_grow(std::size_t bytes, bool in_use, const char *&label);
	CUresult vmm_grow(std::size_t pages, bool in_use);
	void pool_release(PoolBlock &b);
	std::uint64_t release_cached();
	void release_newest_cached();
	std::uint64_t cached_bytes() const;
	// worker_comms.cpp: the communicators and their truth.
	StepResult make_comms();
	void destroy_comms(bool abort_comm);
	ncclComm_t comm_of(GroupKind kind) const;
	const RankComm *comm_by_handle(std::uint64_t handle) const;
	void comms_truth();
	// worker_layout.cpp: the framework job's step.
	StepResult framework_step(std::int64_t s);
	StepResult forward(std::int64_t s, int micro, long long unit_ns);
	StepResult backward(std::int64_t s, int micro, long long unit_ns);
	StepResult exchange(const PipeAction &a);
	StepResult tp_all_reduce();
	StepResult moe_all_to_all(std::int64_t s, int micro, int layer, bool dispatch);
	StepResult dp_all_reduce(std::int64_t s);
	StepResult before_first_nccl(std::int64_t s);
	bool group_call(bool start);

	// Records a CUDA call (whatever it returned) and passes its result on.
	CUresult cuda(const char *symbol, CUresult r)
	{
		truth_.cuda_calls[symbol]++;
		std::string base = cuda_base_api(symbol);
		if (base.rfind("cuLaunchKernel", 0) == 0)
			truth_.kernel_launches++;
		if (base == "cuStreamSynchronize" || base == "cuCtxSynchronize" ||
		    base == "cuEventSynchronize")
			truth_.sync[base]++;
		if (r != 0)
			truth_.cuda_errors[base][cuda_result_name(r)]++;
		return r;
	}

	// Records a driver memory call (whatever it returned): the call, and in the
	// memory truth its bytes under its family's label, or its failure.
	CUresult mem_call(MemOp op, const char *symbol, const char *label, std::uint64_t bytes, CUresult r)
	{
		if (r == 0)
			truth_.gpu_memory.count(op, label, bytes);
		else
			truth_.gpu_memory.failed(cuda_result_name(r));
		return cuda(symbol, r);
	}
	// An allocation; a free (`bytes` = the size of the allocation it frees); a
	// cuMemMap / cuMemUnmap (physical memory is counted by cuMemCreate).
	CUresult mem_alloc(const char *symbol, const char *label, std::uint64_t bytes, CUresult r)
	{
		return mem_call(MemOp::Alloc, symbol, label, bytes, r);
	}
	CUresult mem_free(const char *symbol, const char *label, std::uint64_t bytes, CUresult r)
	{
		return mem_call(MemOp::Free, symbol, label, bytes, r);
	}
	CUresult mem_map(const char *symbol, std::uint64_t bytes, CUresult r)
	{
		return mem_call(MemOp::Map, symbol, symbol, bytes, r);
	}

	// Records a host-API copy (calls and bytes per direction, whatever it
	// returned) and passes its result on.
	CUresult copy(const char *symbol, const char *direction, std::size_t bytes, CUresult r)
	{
		auto &c = truth_.memcpy[direction];
		c.calls++;
		c.bytes += bytes;
		return cuda(symbol, r);
	}

	// Records a NCCL collective/p2p call.
	ncclResult_t nccl(Op op, std::uint64_t bytes, ncclResult_t r)
	{
		auto &c = truth_.nccl[std::string(op_label(op))];
		c.calls++;
		c.bytes += bytes;
		if (r != 0) {
			truth_.nccl_errors[std::string(op_label(op))][nccl_result_name(r)]++;
			note_nccl_error(std::string(op_label(op)), r);
		}
		return r;
	}

	void note_nccl_error(const std::string &what, ncclResult_t r)
	{
		if (!nccl_error_.empty())
			return;
		const char *last = nc_.ncclGetLastError ? nc_.ncclGetLastError(comm_) : nullptr;
		nccl_error_ = what + ": " + nccl_result_name(r) + (last && *last ? std::string(" (") + last + ")" : "");
	}

	SimConfig cfg_;
	int rank_, world_, local_rank_;
	NcclUniqueId id_;
	RankPlan plan_;
	Truth truth_;
	CudaApi cu_{};
	NcclApi nc_{};
	void *cuda_lib_ = nullptr;
	void *nccl_lib_ = nullptr;

	CUcontext ctx_ = nullptr;
	CUstream stream_ = nullptr;
	CUstream nccl_stream_ = nullptr;
	CUevent event_ = nullptr;
	CUmodule module_ = nullptr;
	std::vector<CUfunction> kernels_;  // --kernel-names of them
	std::vector<double> kernel_us_;     // nominal emulated durations
	CUdeviceptr params_ = 0, grads_ = 0, comm_buf_ = 0;
	MemPool mem_;
	float loss_host_[16] = {};   // each step's loss, copied back (DtoH)
	float lr_host_[64] = {};     // optimizer state uploaded every 10 steps (HtoD)
	ncclComm_t comm_ = nullptr; // the world
	std::vector<RankComm> comms_;
	Layout layout_;
	RankPlace place_;
	std::uint64_t launches_ = 0;   // framework step: launches so far (picks the launch symbol)
	double gpu_factor_ = 1.0;      // --gpu-slow / --gpu-hang factor of the kernel durations
	double jitter_ = 1.0;          // --jitter factor of the current step
	double applied_kernel_factor_ = 1.0;
	bool first_nccl_ = true;       // framework step: --hang/--exit fire before its first NCCL call
	std::int64_t cur_step_ = 0;
	std::string nccl_error_;
};

} // namespace argus::sim::worker_detail
