// How a rank (worker_rank.h) uses its libraries: it loads the CUDA and NCCL libraries with
// dlopen and calls them through the public names an application uses: setting up the
// context, streams, kernels and memory, launching kernels through each launch variant, and
// issuing collectives.
#include "worker_rank.h"

#include <cstdint>
#include <string>
#include <vector>

#include <dlfcn.h>

namespace argus::sim::worker_detail {
namespace {

template <typename Fn> bool load_sym(void *lib, const char *name, Fn &fn, std::string &missing)
{
	dlerror();
	void *p = dlsym(lib, name);
	if (!p) {
		if (!missing.empty())
			missing += ", ";
		missing += name;
		fn = nullptr;
		return false;
	}
	*reinterpret_cast<void **>(&fn) = p;
	return true;
}

} // namespace

bool Rank::load_libraries()
{
	cuda_lib_ = dlopen(cfg_.cuda_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
	if (!cuda_lib_) {
		const char *e = dlerror();
		log("cannot load the CUDA library " + cfg_.cuda_lib + ": " + (e ? e : "unknown error"));
		return false;
	}
	nccl_lib_ = dlopen(cfg_.nccl_lib.c_str(), RTLD_NOW | RTLD_LOCAL);
	if (!nccl_lib_) {
		const char *e = dlerror();
		log("cannot load the NCCL library " + cfg_.nccl_lib + ": " + (e ? e : "unknown error"));
		return false;
	}
	std::string missing;
#define ARGUS_CU(name) load_sym(cuda_lib_, #name, cu_.name, missing)
	ARGUS_CU(cuInit);
	ARGUS_CU(cuDriverGetVersion);
	ARGUS_CU(cuDeviceGetCount);
	ARGUS_CU(cuDeviceGet);
	ARGUS_CU(cuDeviceGetName);
	ARGUS_CU(cuCtxCreate_v2);
	ARGUS_CU(cuCtxDestroy_v2);
	ARGUS_CU(cuCtxSynchronize);
	ARGUS_CU(cuStreamCreate);
	ARGUS_CU(cuStreamDestroy_v2);
	ARGUS_CU(cuStreamSynchronize);
	ARGUS_CU(cuStreamSynchronize_ptsz);
	ARGUS_CU(cuEventCreate);
	ARGUS_CU(cuEventRecord);
	ARGUS_CU(cuEventSynchronize);
	ARGUS_CU(cuEventDestroy_v2);
	ARGUS_CU(cuModuleLoadData);
	ARGUS_CU(cuModuleGetFunction);
	ARGUS_CU(cuLaunchKernel);
	ARGUS_CU(cuLaunchKernel_ptsz);
	ARGUS_CU(cuLaunchKernelEx);
	ARGUS_CU(cuLaunchKernelEx_ptsz);
	ARGUS_CU(cuMemGetInfo_v2);
	ARGUS_CU(cuDeviceTotalMem_v2);
	ARGUS_CU(cuMemAlloc);
	ARGUS_CU(cuMemAlloc_v2);
	ARGUS_CU(cuMemAllocPitch_v2);
	ARGUS_CU(cuMemAllocManaged);
	ARGUS_CU(cuMemAllocAsync);
	ARGUS_CU(cuDeviceGetDefaultMemPool);
	ARGUS_CU(cuMemAllocFromPoolAsync);
	ARGUS_CU(cuMemFree);
	ARGUS_CU(cuMemFree_v2);
	ARGUS_CU(cuMemFreeAsync);
	ARGUS_CU(cuMemGetAllocationGranularity);
	ARGUS_CU(cuMemAddressReserve);
	ARGUS_CU(cuMemAddressFree);
	ARGUS_CU(cuMemCreate);
	ARGUS_CU(cuMemRelease);
	ARGUS_CU(cuMemMap);
	ARGUS_CU(cuMemUnmap);
	ARGUS_CU(cuMemSetAccess);
	ARGUS_CU(cuMemcpyHtoD_v2);
	ARGUS_CU(cuMemcpyDtoD_v2);
	ARGUS_CU(cuMemcpyHtoDAsync_v2);
	ARGUS_CU(cuMemcpyDtoHAsync_v2);
	ARGUS_CU(cuMemcpyDtoDAsync_v2);
#undef ARGUS_CU
#define ARGUS_NC(name) load_sym(nccl_lib_, #name, nc_.name, missing)
	ARGUS_NC(ncclCommInitRank);
	ARGUS_NC(ncclCommDestroy);
	ARGUS_NC(ncclCommAbort);
	ARGUS_NC(ncclGetErrorString);
	ARGUS_NC(ncclGetLastError);
	ARGUS_NC(ncclAllReduce);
	ARGUS_NC(ncclAllGather);
	ARGUS_NC(ncclReduceScatter);
	ARGUS_NC(ncclBroadcast);
	ARGUS_NC(ncclReduce);
	ARGUS_NC(ncclAlltoAll);
	ARGUS_NC(ncclSend);
	ARGUS_NC(ncclRecv);
	ARGUS_NC(ncclGroupStart);
	ARGUS_NC(ncclGroupEnd);
	ARGUS_NC(ncclCommGetAsyncError);
#undef ARGUS_NC
	if (!missing.empty()) {
		log("missing symbols in " + cfg_.cuda_lib + " / " + cfg_.nccl_lib + ": " + missing);
		return false;
	}
	// Sim-only knobs; a real libcuda does not have them.
	std::string ignored;
	load_sym(cuda_lib_, "argus_sim_set_kernel_us", cu_.argus_sim_set_kernel_us, ignored);
	load_sym(cuda_lib_, "argus_sim_gpu_flush_all", cu_.argus_sim_gpu_flush_all, ignored);
	load_sym(cuda_lib_, "argus_sim_gpu_totals", cu_.argus_sim_gpu_totals, ignored);
	load_sym(cuda_lib_, "argus_sim_coll_log", cu_.argus_sim_coll_log, ignored);
	load_sym(cuda_lib_, "argus_sim_p2p_log", cu_.argus_sim_p2p_log, ignored);
	load_sym(nccl_lib_, "ncclCommSplit", nc_.ncclCommSplit, ignored);
	return true;
}

bool Rank::setup_cuda()
{
	auto fail = [&](const char *what, CUresult r) {
		const char *name = argus_cuda_result_name(r);
		log(std::string(what) + " failed: " + (name ? name : std::to_string(r)));
		return false;
	};
	CUresult r;
	if ((r = cuda("cuInit", cu_.cuInit(0))) != 0)
		return fail("cuInit", r);
	int version = 0, count = 0;
	cuda("cuDriverGetVersion", cu_.cuDriverGetVersion(&version));
	if ((r = cuda("cuDeviceGetCount", cu_.cuDeviceGetCount(&count))) != 0 || count < 1)
		return fail("cuDeviceGetCount", r);
	CUdevice dev = 0;
	if ((r = cuda("cuDeviceGet", cu_.cuDeviceGet(&dev, local_rank_ % count))) != 0)
		return fail("cuDeviceGet", r);
	char name[128] = {};
	cuda("cuDeviceGetName", cu_.cuDeviceGetName(name, sizeof name, dev));
	if ((r = cuda("cuCtxCreate_v2", cu_.cuCtxCreate_v2(&ctx_, 0, dev))) != 0)
		return fail("cuCtxCreate_v2", r);
	if ((r = cuda("cuStreamCreate", cu_.cuStreamCreate(&stream_, 1))) != 0)
		return fail("cuStreamCreate", r);
	if ((r = cuda("cuStreamCreate", cu_.cuStreamCreate(&nccl_stream_, 1))) != 0)
		return fail("cuStreamCreate", r);
	if ((r = cuda("cuEventCreate", cu_.cuEventCreate(&event_, 0))) != 0)
		return fail("cuEventCreate", r);
	static const char image[] = "// argus-sim fake PTX image\n.version 8.0\n.target sm_90\n";
	if ((r = cuda("cuModuleLoadData", cu_.cuModuleLoadData(&module_, image))) != 0)
		return fail("cuModuleLoadData", r);
	// The GPU is busy ~60% of the nominal step (not scaled by a host straggler).
	const double base_us = cfg_.kernels_per_step > 0
				       ? cfg_.step_ms * 1000.0 * kGpuBusyShare / cfg_.kernels_per_step
				       : 0.0;
	kernels_.assign(static_cast<std::size_t>(cfg_.kernel_names), nullptr);
	kernel_us_.assign(kernels_.size(), 0.0);
	for (std::size_t k = 0; k < kernels_.size(); k++) {
		const std::string name = kernel_name(static_cast<int>(k));
		if ((r = cuda("cuModuleGetFunction", cu_.cuModuleGetFunction(&kernels_[k], module_, name.c_str()))) != 0)
			return fail("cuModuleGetFunction", r);
		kernel_us_[k] = cfg_.framework ? framework_kernel_us(cfg_, static_cast<int>(k))
					       : base_us * kernel_weight(static_cast<int>(k));
	}
	set_kernel_durations(1.0);
	// The caching allocator's start (worker_memory.cpp): the device's memory, its family's pool or range.
	if ((r = memory_init(dev)) != 0)
		return fail("the memory allocator's init", r);
	if ((r = mem_alloc("cuMemAlloc_v2", "cuMemAlloc", kParamsBytes, cu_.cuMemAlloc_v2(&params_, kParamsBytes))) != 0)
		return fail("cuMemAlloc_v2", r);
	if ((r = mem_alloc("cuMemAlloc_v2", "cuMemAlloc", kGradsBytes, cu_.cuMemAlloc_v2(&grads_, kGradsBytes))) != 0)
		return fail("cuMemAlloc_v2", r);
	if ((r = mem_alloc("cuMemAllocAsync", "cuMemAllocAsync", kCommBufBytes,
			   cu_.cuMemAllocAsync(&comm_buf_, kCommBufBytes, nccl_stream_))) != 0)
		return fail("cuMemAllocAsync", r);
	if ((r = memory_extras()) != 0)
		return fail("an extension's allocation", r);
	static const std::uint32_t init_weights[1024] = {};
	copy("cuMemcpyHtoD_v2", "htod", sizeof init_weights,
	     cu_.cuMemcpyHtoD_v2(params_, init_weights, sizeof init_weights));
	// --cuda-errors: allocations no GPU can satisfy (1 PiB): CUDA_ERROR_OUT_OF_MEMORY
	// (failures of the memory truth, not an out-of-memory of the caching allocator).
	for (int i = 0; i < plan_.cuda_errors; i++) {
		CUdeviceptr p = 0;
		mem_alloc("cuMemAlloc_v2", "cuMemAlloc", std::size_t{1} << 50, cu_.cuMemAlloc_v2(&p, std::size_t{1} << 50));
	}
	return true;
}

// The emulated duration of every kernel: nominal x factor (--gpu-slow).
void Rank::set_kernel_durations(double factor)
{
	if (!cu_.argus_sim_set_kernel_us)
		return;
	for (std::size_t k = 0; k < kernels_.size(); k++) {
		double us = static_cast<double>(static_cast<unsigned>(kernel_us_[k] < 1.0 ? 1.0 : kernel_us_[k]));
		us *= factor;
		if (us > 4e9)
			us = 4e9;
		cu_.argus_sim_set_kernel_us(kernels_[k], us < 1.0 ? 1u : static_cast<unsigned>(us));
	}
}

bool Rank::launch(int i, int kernel)
{
	CUfunction f = kernels_[static_cast<std::size_t>(kernel >= 0 ? kernel : i) % kernels_.size()];
	unsigned grid = 108u * static_cast<unsigned>(1 + i % 4);
	void *arg0 = reinterpret_cast<void *>(static_cast<std::uintptr_t>(grads_));
	int arg1 = i;
	void *params[] = {&arg0, &arg1};
	if (i % 16 == 15 || i % 8 == 7) {
		CUlaunchConfig lc{};
		lc.gridDimX = grid;
		lc.gridDimY = lc.gridDimZ = 1;
		lc.blockDimX = 256;
		lc.blockDimY = lc.blockDimZ = 1;
		lc.hStream = stream_;
		if (i % 16 == 15)
			return cuda("cuLaunchKernelEx_ptsz", cu_.cuLaunchKernelEx_ptsz(&lc, f, params, nullptr)) == 0;
		return cuda("cuLaunchKernelEx", cu_.cuLaunchKernelEx(&lc, f, params, nullptr)) == 0;
	}
	if (i % 8 == 3)
		return cuda("cuLaunchKernel_ptsz", cu_.cuLaunchKernel_ptsz(f, grid, 1, 1, 256, 1, 1, 0, stream_,
									  params, nullptr)) == 0;
	return cuda("cuLaunchKernel",
		    cu_.cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, stream_, params, nullptr)) == 0;
}

ncclResult_t Rank::call_nccl(const NcclCall &c, CUstream stream, ncclComm_t comm)
{
	if (!comm)
		comm = comm_;
	void *send = reinterpret_cast<void *>(static_cast<std::uintptr_t>(grads_));
	void *recv = reinterpret_cast<void *>(static_cast<std::uintptr_t>(comm_buf_));
	switch (c.op) {
	case Op::AllReduce:
		return nc_.ncclAllReduce(send, recv, c.count, c.dtype, c.redop, comm, stream);
	case Op::AllGather:
		return nc_.ncclAllGather(send, recv, c.count, c.dtype, comm, stream);
	case Op::ReduceScatter:
		return nc_.ncclReduceScatter(send, recv, c.count, c.dtype, c.redop, comm, stream);
	case Op::Broadcast:
		return nc_.ncclBroadcast(send, recv, c.count, c.dtype, c.root, comm, stream);
	case Op::Reduce:
		return nc_.ncclReduce(send, recv, c.count, c.dtype, c.redop, c.root, comm, stream);
	case Op::AllToAll:
		return nc_.ncclAlltoAll(send, recv, c.count, c.dtype, comm, stream);
	case Op::Send:
		return nc_.ncclSend(send, c.count, c.dtype, c.peer, comm, stream);
	case Op::Recv:
		return nc_.ncclRecv(recv, c.count, c.dtype, c.peer, comm, stream);
	}
	return 0;
}

} // namespace argus::sim::worker_detail
