// A rank's device memory as PyTorch's caching allocator takes it from the driver
// (worker_rank.h): the pool grows in the first steps, is trimmed once (as
// torch.cuda.empty_cache() after a first evaluation), then serves every step
// without a driver call. --mem-api picks the driver family it grows by, as
// PYTORCH_CUDA_ALLOC_CONF does: cuMemAlloc/cuMemFree (the native allocator),
// cuMemAllocFromPoolAsync/cuMemFreeAsync (backend:cudaMallocAsync), or one
// reserved range mapped 20 MiB page by page (expandable_segments:True).
// --mem-leak grows the pool every step; --mem-oom asks for more than fits. An
// allocation that fails takes PyTorch's path: release the cached segments, retry
// once, then give up (the rank exits, status "oom").
//
// Every driver call is counted where it is made (mem_alloc, mem_free, mem_map):
// the truth's "gpu_memory".
#include "worker_rank.h"

#include <algorithm>

namespace argus::sim::worker_detail {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
// PyTorch's CUDACachingAllocator: a request of at most kSmallSize gets a
// kSmallBuffer segment, one below kMinLargeAlloc a kLargeBuffer segment, a
// larger one is rounded up to kRoundLarge.
constexpr std::size_t kSmallSize = 1 * kMiB;
constexpr std::size_t kSmallBuffer = 2 * kMiB;
constexpr std::size_t kLargeBuffer = 20 * kMiB;
constexpr std::size_t kMinLargeAlloc = 10 * kMiB;
constexpr std::size_t kRoundLarge = 2 * kMiB;
// Expandable segments: pages of kLargeBuffer, in a range of 9/8 of the device's
// memory (PyTorch reserves totalGlobalMem + totalGlobalMem / 8).
constexpr std::size_t kPageBytes = kLargeBuffer;
// --mem-oom: more than fits even once the cache is released.
constexpr std::uint64_t kOomMargin = std::uint64_t{1} << 30;
// PyTorch's empty_cache() after the first evaluation.
constexpr std::int64_t kTrimStep = 3;

constexpr int kLocationDevice = 1;     // CU_MEM_LOCATION_TYPE_DEVICE
constexpr int kAllocationPinned = 1;   // CU_MEM_ALLOCATION_TYPE_PINNED
constexpr int kAccessReadWrite = 3;    // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
constexpr int kGranularityMinimum = 0; // CU_MEM_ALLOC_GRANULARITY_MINIMUM
constexpr unsigned kAttachGlobal = 1;  // CU_MEM_ATTACH_GLOBAL
constexpr CUresult kInvalidValue = 1;  // CUDA_ERROR_INVALID_VALUE
constexpr CUresult kOutOfMemory = 2;   // CUDA_ERROR_OUT_OF_MEMORY

// A tensor's request of the first steps: the forward pass's activations and the
// optimizer's state as they first appear. Small ones hold live tensors (kept in
// use); the large ones are freed back to the cache at each step's end.
struct Request {
	std::int64_t step;
	std::size_t bytes;
};
constexpr Request kGrowth[] = {
	{0, 512 * 1024},             // -> 2 MiB (small pool)
	{0, 6 * kMiB},               // -> 20 MiB
	{0, 61 * kMiB + 300 * 1024}, // -> 62 MiB
	{1, 256 * 1024},             // -> 2 MiB (small pool)
	{1, 37 * kMiB + 1024},       // -> 38 MiB
	{2, 4 * kMiB},               // -> 20 MiB
	{2, 95 * kMiB + 1},          // -> 96 MiB
};

// An extension's own buffers (memory_extras): a pitched 2-D staging buffer, a
// managed one, and a legacy 32-bit allocation.
constexpr std::size_t kPitchWidth = 3000, kPitchHeight = 1024;
constexpr unsigned kPitchElement = 4;
constexpr std::size_t kManagedBytes = 8 * kMiB;
constexpr unsigned kLegacyBytes = 1 << 20;

constexpr std::size_t round_up(std::size_t n, std::size_t to)
{
	return (n + to - 1) / to * to;
}

// The segment PyTorch's native allocator asks the driver for, for a request.
constexpr std::size_t segment_size(std::size_t request)
{
	if (request <= kSmallSize)
		return kSmallBuffer;
	if (request < kMinLargeAlloc)
		return kLargeBuffer;
	return round_up(request, kRoundLarge);
}

// What the first steps' requests take, up to and with step s.
std::size_t growth_through(std::int64_t s)
{
	std::size_t n = 0;
	for (const Request &r : kGrowth)
		if (r.step <= s)
			n += segment_size(r.bytes);
	return n;
}

CUmemAllocationProp device_prop(CUdevice dev)
{
	CUmemAllocationProp p{};
	p.type = kAllocationPinned;
	p.location = {kLocationDevice, dev};
	return p;
}

} // namespace

// At init, as PyTorch's allocator and device properties do: the device's free and
// total memory, then what the family needs (the default pool, or the range).
CUresult Rank::memory_init(CUdevice dev)
{
	mem_.dev = dev;
	truth_.gpu_memory.api = mem_api_name(cfg_.mem_api);
	std::size_t free = 0, total = 0;
	CUresult r;
	if ((r = cuda("cuMemGetInfo_v2", cu_.cuMemGetInfo_v2(&free, &total))) != 0 ||
	    (r = cuda("cuDeviceTotalMem_v2", cu_.cuDeviceTotalMem_v2(&total, dev))) != 0)
		return r;
	truth_.gpu_memory.total = total;
	if (cfg_.mem_api == MemApi::Async)
		return cuda("cuDeviceGetDefaultMemPool", cu_.cuDeviceGetDefaultMemPool(&mem_.pool, dev));
	if (cfg_.mem_api != MemApi::Vmm)
		return 0;
	const CUmemAllocationProp prop = device_prop(dev);
	std::size_t granularity = 0;
	if ((r = cuda("cuMemGetAllocationGranularity",
		      cu_.cuMemGetAllocationGranularity(&granularity, &prop, kGranularityMinimum))) != 0)
		return r;
	if (granularity == 0 || kPageBytes % granularity != 0)
		return kInvalidValue; // pages of 20 MiB would not map
	const std::size_t pages = (total + total / 8 + kPageBytes - 1) / kPageBytes;
	if ((r = cuda("cuMemAddressReserve", cu_.cuMemAddressReserve(&mem_.va, pages * kPageBytes, 0, 0, 0))) != 0) {
		mem_.va = 0;
		return r;
	}
	mem_.va_bytes = pages * kPageBytes;
	mem_.page_mapped.assign(pages, false);
	return 0;
}

// The driver's less common allocation calls, which PyTorch itself never makes: an
// extension's buffers, so that every allocation family has calls to count.
CUresult Rank::memory_extras()
{
	CUresult r;
	if ((r = mem_alloc("cuMemAlloc", "cuMemAlloc", kLegacyBytes, cu_.cuMemAlloc(&mem_.legacy, kLegacyBytes))) != 0)
		return r;
	std::size_t pitch = 0;
	r = cu_.cuMemAllocPitch_v2(&mem_.pitched, &pitch, kPitchWidth, kPitchHeight, kPitchElement);
	if ((r = mem_alloc("cuMemAllocPitch_v2", "cuMemAllocPitch", r == 0 ? pitch * kPitchHeight : 0, r)) != 0)
		return r;
	mem_.pitched_bytes = pitch * kPitchHeight;
	return mem_alloc("cuMemAllocManaged", "cuMemAllocManaged", kManagedBytes,
			 cu_.cuMemAllocManaged(&mem_.managed, kManagedBytes, kAttachGlobal));
}

// vmm: `pages` pages of physical memory are made first, then each is mapped and
// made accessible, as PyTorch's ExpandableSegment::map does; when one cannot be
// made, those just made are released and the failure returned.
CUresult Rank::vmm_grow(std::size_t pages, bool in_use)
{
	const CUmemAllocationProp prop = device_prop(mem_.dev);
	std::vector<CUmemGenericAllocationHandle> made;
	CUresult r = 0;
	for (std::size_t i = 0; i < pages && r == 0; i++) {
		CUmemGenericAllocationHandle h = 0;
		r = mem_alloc("cuMemCreate", "cuMemCreate", kPageBytes, cu_.cuMemCreate(&h, kPageBytes, &prop, 0));
		if (r == 0)
			made.push_back(h);
	}
	// The range holds 9/8 of the device: it never runs out before the memory does.
	const std::size_t free_pages = static_cast<std::size_t>(
		std::count(mem_.page_mapped.begin(), mem_.page_mapped.end(), false));
	if (r == 0 && free_pages < made.size())
		r = kOutOfMemory;
	if (r != 0) {
		for (CUmemGenericAllocationHandle h : made)
			mem_free("cuMemRelease", "cuMemRelease", kPageBytes, cu_.cuMemRelease(h));
		return r;
	}
	const CUmemAccessDesc access{{kLocationDevice, mem_.dev}, kAccessReadWrite};
	std::size_t next = 0;
	for (CUmemGenericAllocationHandle h : made) {
		while (mem_.page_mapped[next]) // the lowest hole first, as PyTorch refills its segment
			next++;
		PoolBlock b;
		b.ptr = mem_.va + next * kPageBytes;
		b.handle = h;
		b.bytes = kPageBytes;
		b.in_use = in_use;
		if (mem_map("cuMemMap", kPageBytes, cu_.cuMemMap(b.ptr, kPageBytes, 0, h, 0)) != 0) {
			mem_free("cuMemRelease", "cuMemRelease", kPageBytes, cu_.cuMemRelease(h));
			continue;
		}
		cuda("cuMemSetAccess", cu_.cuMemSetAccess(b.ptr, kPageBytes, &access, 1));
		mem_.page_mapped[next] = true;
		mem_.blocks.push_back(b);
	}
	return 0;
}

// One growth of the pool by `bytes` through the family's calls; `label` = the
// label of the allocation call that failed (vmm: `bytes` is whole pages).
CUresult Rank::pool_grow(std::size_t bytes, bool in_use, const char *&label)
{
	if (cfg_.mem_api == MemApi::Vmm) {
		label = "cuMemCreate";
		return vmm_grow(bytes / kPageBytes, in_use);
	}
	PoolBlock b;
	b.bytes = bytes;
	b.in_use = in_use;
	CUresult r;
	if (cfg_.mem_api == MemApi::Async) {
		label = "cuMemAllocAsync";
		// Small segments from the stream's current pool, the rest from the default pool named.
		r = bytes <= kSmallBuffer
			    ? mem_alloc("cuMemAllocAsync", label, bytes, cu_.cuMemAllocAsync(&b.ptr, bytes, stream_))
			    : mem_alloc("cuMemAllocFromPoolAsync", label, bytes,
					cu_.cuMemAllocFromPoolAsync(&b.ptr, bytes, mem_.pool, stream_));
	} else {
		label = "cuMemAlloc";
		r = mem_alloc("cuMemAlloc_v2", label, bytes, cu_.cuMemAlloc_v2(&b.ptr, bytes));
	}
	if (r == 0)
		mem_.blocks.push_back(b);
	return r;
}

// Gives one segment or page back to the driver (the caller drops it from the pool).
void Rank::pool_release(PoolBlock &b)
{
	switch (cfg_.mem_api) {
	case MemApi::Classic:
		mem_free("cuMemFree_v2", "cuMemFree", b.bytes, cu_.cuMemFree_v2(b.ptr));
		break;
	case MemApi::Async:
		mem_free("cuMemFreeAsync", "cuMemFreeAsync", b.bytes, cu_.cuMemFreeAsync(b.ptr, stream_));
		break;
	case MemApi::Vmm:
		mem_map("cuMemUnmap", b.bytes, cu_.cuMemUnmap(b.ptr, b.bytes));
		mem_free("cuMemRelease", "cuMemRelease", b.bytes, cu_.cuMemRelease(b.handle));
		mem_.page_mapped[(b.ptr - mem_.va) / kPageBytes] = false;
		break;
	}
}

std::uint64_t Rank::cached_bytes() const
{
	std::uint64_t n = 0;
	for (const PoolBlock &b : mem_.blocks)
		n += b.in_use ? 0 : b.bytes;
	return n;
}

// As PyTorch's release_cached_blocks: every segment (page) that holds no live tensor.
std::uint64_t Rank::release_cached()
{
	std::uint64_t n = 0;
	for (PoolBlock &b : mem_.blocks) {
		if (!b.in_use) {
			pool_release(b);
			n += b.bytes;
		}
	}
	std::erase_if(mem_.blocks, [](const PoolBlock &b) { return !b.in_use; });
	return n;
}

void Rank::release_newest_cached()
{
	auto it = std::find_if(mem_.blocks.rbegin(), mem_.blocks.rend(), [](const PoolBlock &b) { return !b.in_use; });
	if (it == mem_.blocks.rend())
		return;
	pool_release(*it);
	mem_.blocks.erase(std::next(it).base());
}

// A request the pool cannot serve from its cache: grow it; when the driver has no
// room, PyTorch's path (release the cache, retry once), and if that fails too the
// rank records the out-of-memory and gives up (StepResult::Oom).
StepResult Rank::pool_alloc(std::int64_t s, std::size_t bytes, bool in_use, const char *cause)
{
	const char *label = nullptr;
	const CUresult r = pool_grow(bytes, in_use, label);
	if (r == 0)
		return StepResult::Ok;
	GpuMemoryTruth &m = truth_.gpu_memory;
	if (m.oom.is_null())
		m.oom = {{"step", s},	      {"asked_bytes", bytes}, {"held_bytes", m.held},
			 {"peak_bytes", m.peak}, {"code", cuda_result_name(r)}, {"api", label}};
	if (r == kOutOfMemory) {
		release_cached();
		if (pool_grow(bytes, in_use, label) == 0)
			return StepResult::Ok;
	}
	// PyTorch's message says what the device has left ("of which X is free").
	std::size_t free = 0, total = 0;
	cuda("cuMemGetInfo_v2", cu_.cuMemGetInfo_v2(&free, &total));
	add_fault({{"kind", "oom"},
		   {"step", s},
		   {"asked_bytes", bytes},
		   {"cause", cause},
		   {"api", label},
		   {"injected_at", realtime_s()}});
	return StepResult::Oom;
}

// At the start of step s, before its compute: the pool's growth (steps 0..2), its
// trim (step 3), --mem-leak's growth, --mem-oom's request. Nothing else calls the
// driver: the pool serves the step.
StepResult Rank::memory_step(std::int64_t s)
{
	const bool vmm = cfg_.mem_api == MemApi::Vmm;
	if (vmm && s < kTrimStep) {
		// One expandable segment: pages as the requests so far need them; the first
		// holds the small live tensors.
		const std::size_t need = (growth_through(s) + kPageBytes - 1) / kPageBytes;
		for (; mem_.growth_pages < need; mem_.growth_pages++)
			if (StepResult r = pool_alloc(s, kPageBytes, mem_.growth_pages == 0, "growth"); r != StepResult::Ok)
				return r;
	} else if (!vmm) {
		for (const Request &q : kGrowth)
			if (q.step == s)
				if (StepResult r = pool_alloc(s, segment_size(q.bytes), q.bytes <= kSmallSize, "growth");
				    r != StepResult::Ok)
					return r;
	}
	if (s == kTrimStep)
		release_newest_cached();
	if (const std::uint64_t leak = round_up(plan_.mem_leak_bytes, kRoundLarge); leak > 0) {
		if (s == 0)
			add_fault({{"kind", "mem_leak"},
				   {"bytes_per_step", leak},
				   {"from_step", s},
				   {"injected_at", realtime_s()}});
		std::size_t bytes = leak;
		if (vmm) {
			// Leaked tensors fill the segment's pages; a page is mapped once they need it.
			mem_.leaked += leak;
			const std::size_t need = (mem_.leaked + kPageBytes - 1) / kPageBytes;
			bytes = (need - mem_.leak_pages) * kPageBytes;
			mem_.leak_pages = need;
		}
		if (bytes > 0)
			if (StepResult r = pool_alloc(s, bytes, true, "mem_leak"); r != StepResult::Ok)
				return r;
	}
	if (s == plan_.mem_oom_step) {
		const GpuMemoryTruth &m = truth_.gpu_memory;
		const std::uint64_t free = m.total > m.held ? m.total - m.held : 0;
		std::size_t asked = round_up(free + cached_bytes() + kOomMargin, kRoundLarge);
		if (vmm)
			asked = round_up(asked, kPageBytes);
		if (StepResult r = pool_alloc(s, asked, true, "mem_oom"); r != StepResult::Ok)
			return r;
	}
	return StepResult::Ok;
}

// Teardown: the pool, the extension's buffers and the range go back to the driver.
void Rank::memory_teardown()
{
	for (PoolBlock &b : mem_.blocks)
		pool_release(b);
	mem_.blocks.clear();
	if (mem_.legacy)
		mem_free("cuMemFree", "cuMemFree", kLegacyBytes, cu_.cuMemFree(mem_.legacy));
	if (mem_.pitched)
		mem_free("cuMemFree_v2", "cuMemFree", mem_.pitched_bytes, cu_.cuMemFree_v2(mem_.pitched));
	if (mem_.managed)
		mem_free("cuMemFree_v2", "cuMemFree", kManagedBytes, cu_.cuMemFree_v2(mem_.managed));
	mem_.legacy = 0;
	mem_.pitched = mem_.managed = 0;
	if (mem_.va)
		cuda("cuMemAddressFree", cu_.cuMemAddressFree(mem_.va, mem_.va_bytes));
	mem_.va = 0;
}

} // namespace argus::sim::worker_detail
