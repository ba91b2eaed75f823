/* Virtual memory management of the emulated GPU of the libcuda.so.1 shim
 * (cuda_shim.c), the calls PyTorch's expandable segments are made of: a virtual
 * address range is reserved (cuMemAddressReserve, no memory), physical memory
 * is created in handles (cuMemCreate, taken from the emulated capacity as a
 * linear allocation is: cuda_shim_mem.c), mapped into the range (cuMemMap) and
 * made accessible (cuMemSetAccess). The physical memory goes back to the
 * capacity once its handle is released and its last mapping unmapped, in either
 * order, as the driver documents. Addresses and handles are fake and checked
 * against tables, so a bad one gives the documented error instead of a crash. */
#include "cuda_shim_internal.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Reserved ranges: far from the linear allocations (DPTR_BASE, 0x7f...). */
#define VA_BASE 0x200000000000ull
#define VA_END 0x7e0000000000ull
/* Sizes and addresses of a reservation: multiples of the host page, as documented. */
#define HOST_PAGE 4096ull
/* Handles: base + (index + 1) * 16, never 0, never reused. */
#define H_MEM_BASE 0x5a7000000000ull
#define H_MEM_STRIDE 16ull

struct reservation {
	CUdeviceptr base;
	size_t size;
	int live;
};

struct mem_handle {
	size_t size;
	int released;  /* cuMemRelease was called */
	size_t nmaps;  /* live mappings of it */
};

struct mapping {
	CUdeviceptr ptr;
	size_t size;
	size_t handle; /* index in g_handles */
};

static struct reservation *g_resv;
static size_t g_nresv, g_capresv;
static struct mem_handle *g_handles;
static size_t g_nhandles, g_caphandles;
static struct mapping *g_maps;
static size_t g_nmaps, g_capmaps;
static CUdeviceptr g_next_va = VA_BASE;

/* Index behind a handle that is not released yet, or -1. Call with g_mu held. */
static long handle_index(CUmemGenericAllocationHandle h)
{
	if (h <= H_MEM_BASE || (h - H_MEM_BASE) % H_MEM_STRIDE)
		return -1;
	unsigned long long i = (h - H_MEM_BASE) / H_MEM_STRIDE - 1;
	if (i >= g_nhandles || g_handles[i].released)
		return -1;
	return (long)i;
}

/* Is [p, p+n) inside one live reservation? Call with g_mu held. */
static int reserved(CUdeviceptr p, size_t n)
{
	for (size_t i = 0; i < g_nresv; i++) {
		const struct reservation *r = &g_resv[i];
		if (r->live && p >= r->base && p - r->base <= r->size && n <= r->size - (p - r->base))
			return 1;
	}
	return 0;
}

/* Does [p, p+n) overlap a mapping? Call with g_mu held. */
static int overlaps_mapping(CUdeviceptr p, size_t n)
{
	for (size_t i = 0; i < g_nmaps; i++)
		if (p < g_maps[i].ptr + g_maps[i].size && g_maps[i].ptr < p + n)
			return 1;
	return 0;
}

/* Is [p, p+n) exactly a run of whole mappings (what cuMemUnmap and cuMemSetAccess
 * take: no part of a mapping, no hole)? Call with g_mu held. */
static int whole_mappings(CUdeviceptr p, size_t n)
{
	if (n == 0 || p + n < p)
		return 0;
	size_t covered = 0;
	for (size_t i = 0; i < g_nmaps; i++) {
		const struct mapping *m = &g_maps[i];
		if (!(p < m->ptr + m->size && m->ptr < p + n))
			continue;
		if (m->ptr < p || m->ptr + m->size > p + n)
			return 0; /* cuts a mapping */
		covered += m->size;
	}
	return covered == n; /* mappings never overlap: no hole */
}

int vmm_mapped(CUdeviceptr p, size_t n)
{
	/* A tensor of an expandable segment may span several contiguous mappings. */
	CUdeviceptr at = p, end = p + n;
	if (end < p || g_nmaps == 0)
		return 0;
	do {
		size_t i = 0;
		while (i < g_nmaps && !(at >= g_maps[i].ptr && at < g_maps[i].ptr + g_maps[i].size))
			i++;
		if (i == g_nmaps)
			return 0;
		at = g_maps[i].ptr + g_maps[i].size;
	} while (at < end);
	return 1;
}

/* A handle's physical memory goes back once it is released and unmapped. Call with g_mu held. */
static void handle_maybe_free(struct mem_handle *h)
{
	if (h->released && h->nmaps == 0 && h->size) {
		phys_give(h->size);
		h->size = 0;
	}
}

CU_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!granularity || !prop || option < 0 || option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
		return CUDA_ERROR_INVALID_VALUE;
	/* 2 MiB, minimum and recommended alike, as current GPUs report. */
	*granularity = (size_t)SIM_VMM_GRANULARITY;
	return CUDA_SUCCESS;
}

/* `addr` is only a hint: the range goes where the emulated address space has room. */
CU_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				    unsigned long long flags)
{
	(void)addr;
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ptr || size == 0 || size % HOST_PAGE || flags != 0 || (alignment & (alignment - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	unsigned long long align = alignment > SIM_VMM_GRANULARITY ? alignment : SIM_VMM_GRANULARITY;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	CUdeviceptr base = (g_next_va + align - 1) & ~(CUdeviceptr)(align - 1);
	if (base < g_next_va || base > VA_END || size > VA_END - base) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (!grow((void **)&g_resv, &g_capresv, g_nresv, sizeof *g_resv)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		g_resv[g_nresv].base = base;
		g_resv[g_nresv].size = size;
		g_resv[g_nresv].live = 1;
		g_nresv++;
		g_next_va = base + size;
		*ptr = base;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* The whole reservation, as reserved. The emulation refuses to free one that
 * still has mappings (CUDA_ERROR_INVALID_VALUE): they would outlive their range. */
CU_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	for (size_t i = 0; i < g_nresv; i++) {
		if (g_resv[i].live && g_resv[i].base == ptr && g_resv[i].size == size) {
			if (!overlaps_mapping(ptr, size)) {
				g_resv[i].live = 0;
				r = CUDA_SUCCESS;
			}
			break;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			    unsigned long long flags)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle || !prop || size == 0 || size % SIM_VMM_GRANULARITY || flags != 0 ||
	    prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_NOT_SUPPORTED; /* the emulated device makes device memory only */
	if (prop->location.id < 0 || prop->location.id >= g_device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	if (!grow((void **)&g_handles, &g_caphandles, g_nhandles, sizeof *g_handles) || !phys_take(size)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		g_handles[g_nhandles].size = size;
		g_handles[g_nhandles].released = 0;
		g_handles[g_nhandles].nmaps = 0;
		*handle = H_MEM_BASE + (g_nhandles + 1) * H_MEM_STRIDE;
		g_nhandles++;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	long i = handle_index(handle);
	if (i >= 0) {
		g_handles[i].released = 1;
		handle_maybe_free(&g_handles[i]);
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			 unsigned long long flags)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	/* offset: "currently must be zero" (cuda.h). */
	if (size == 0 || offset != 0 || flags != 0 || ptr % SIM_VMM_GRANULARITY || size % SIM_VMM_GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	long h = handle_index(handle);
	if (h >= 0 && size <= g_handles[h].size && reserved(ptr, size) && !overlaps_mapping(ptr, size)) {
		if (!grow((void **)&g_maps, &g_capmaps, g_nmaps, sizeof *g_maps)) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			g_maps[g_nmaps].ptr = ptr;
			g_maps[g_nmaps].size = size;
			g_maps[g_nmaps].handle = (size_t)h;
			g_nmaps++;
			g_handles[h].nmaps++;
			r = CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	if (whole_mappings(ptr, size)) {
		for (size_t i = 0; i < g_nmaps;) {
			struct mapping *m = &g_maps[i];
			if (m->ptr >= ptr && m->ptr < ptr + size) {
				struct mem_handle *h = &g_handles[m->handle];
				h->nmaps--;
				handle_maybe_free(h);
				*m = g_maps[--g_nmaps];
			} else {
				i++;
			}
		}
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!desc || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
		    desc[i].location.id >= g_device_count)
			return CUDA_ERROR_INVALID_DEVICE;
		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_VALUE;
	}
	/* Only checked: nothing is ever read or written through the fake addresses. */
	pthread_mutex_lock(&g_mu);
	int ok = whole_mappings(ptr, size);
	pthread_mutex_unlock(&g_mu);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
