/* Device memory of the emulated GPU of the libcuda.so.1 shim (cuda_shim.c):
 * allocations accounted against the emulated capacity (ARGUS_SIM_GPU_MEM_MB),
 * at fake addresses nothing is ever read or written through, and the copies
 * between host and device, timed on the emulated timeline. */
#define _GNU_SOURCE
#include "cuda_shim_internal.h"

#include <argus_gpu_wire.h>

#include <pthread.h>
#include <stddef.h>

#define SIM_COPY_BYTES_PER_US 25000ull /* ~25 GB/s host<->device */

#define DPTR_BASE 0x7f0000000000ull /* fake device addresses (cuMemAlloc_v2) */
#define DPTR32_BASE 0x10000000ull   /* legacy 32-bit cuMemAlloc */
#define DPTR32_END 0xffff0000ull
#define ALLOC_ALIGN 512ull

struct alloc {
	CUdeviceptr ptr;
	size_t size;
};

unsigned long long g_capacity = 81920ull << 20; /* cuInit: ARGUS_SIM_GPU_MEM_MB */
static unsigned long long g_allocated;
static CUdeviceptr g_next_ptr = DPTR_BASE;
static CUdeviceptr g_next_ptr32 = DPTR32_BASE;

static struct alloc *g_allocs;
static size_t g_nallocs, g_capallocs;

static CUresult alloc_mem(CUdeviceptr *out64, CUdeviceptr_v1 *out32, size_t size)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((!out64 && !out32) || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	CUresult r = CUDA_SUCCESS;
	unsigned long long rounded = (size + ALLOC_ALIGN - 1) & ~(ALLOC_ALIGN - 1);
	if (rounded < size || size > g_capacity || g_allocated + size > g_capacity ||
	    (out32 && g_next_ptr32 + rounded > DPTR32_END)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (!grow((void **)&g_allocs, &g_capallocs, g_nallocs, sizeof *g_allocs)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		CUdeviceptr p;
		if (out32) {
			p = g_next_ptr32;
			g_next_ptr32 += rounded;
			*out32 = (CUdeviceptr_v1)p;
		} else {
			p = g_next_ptr;
			g_next_ptr += rounded;
			*out64 = p;
		}
		g_allocs[g_nallocs].ptr = p;
		g_allocs[g_nallocs].size = size;
		g_nallocs++;
		g_allocated += size;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

static CUresult free_mem(CUdeviceptr p)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	for (size_t i = 0; i < g_nallocs; i++) {
		if (g_allocs[i].ptr == p) {
			g_allocated -= g_allocs[i].size;
			g_allocs[i] = g_allocs[--g_nallocs];
			r = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* Is [p, p+n) inside one allocation? Call with g_mu held. */
static int dptr_valid(CUdeviceptr p, size_t n)
{
	for (size_t i = 0; i < g_nallocs; i++) {
		CUdeviceptr b = g_allocs[i].ptr;
		if (p >= b && p - b <= g_allocs[i].size && n <= g_allocs[i].size - (p - b))
			return 1;
	}
	return 0;
}

/* Synchronous copy: waits for the device, then for the transfer. `dptr` is the
 * device side (both sides checked for DtoD: `dptr2`); `host` the host side. */
static CUresult memcpy_sync(CUdeviceptr dptr, CUdeviceptr dptr2, const void *host, size_t n, unsigned dir)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (n > 0 && dir != ARGUS_GPU_COPY_DTOD && !host)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	def_wait_empty();
	int ok = n == 0 || (dptr_valid(dptr, n) && (dir != ARGUS_GPU_COPY_DTOD || dptr_valid(dptr2, n)));
	long long idle = device_busy_until();
	long long now = now_ns();
	long long start = idle > now ? idle : now;
	long long end = start + (long long)(n / SIM_COPY_BYTES_PER_US) * 1000LL;
	if (ok)
		enqueue(start, end, n, 0, 0, ARGUS_GPU_MEMCPY, dir << ARGUS_GPU_COPY_SHIFT);
	pthread_mutex_unlock(&g_mu);
	if (!ok)
		return CUDA_ERROR_INVALID_VALUE;
	sleep_until(end);
	return CUDA_SUCCESS;
}

/* Asynchronous copy: queued on the stream after its work, the caller does not
 * wait. `dptr` is the device side (both sides checked for DtoD: `dptr2`). */
static CUresult memcpy_async(CUdeviceptr dptr, CUdeviceptr dptr2, const void *host, size_t n,
			     unsigned dir, CUstream hstream)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (n > 0 && dir != ARGUS_GPU_COPY_DTOD && !host)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	struct stream *s = stream_get(hstream);
	if (!s) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (n > 0 && (!dptr_valid(dptr, n) || (dir == ARGUS_GPU_COPY_DTOD && !dptr_valid(dptr2, n)))) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		defer_or_run((size_t)(s - g_streams), DEF_COPY, (long long)(n / SIM_COPY_BYTES_PER_US) * 1000LL,
			     n, 0, dir << ARGUS_GPU_COPY_SHIFT);
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* Legacy 32-bit ABI of the unversioned symbol. */
CU_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_mem(NULL, dptr, bytesize);
}

CU_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_mem(dptr, NULL, bytesize);
}

CU_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	int ok = stream_get(hStream) != NULL;
	pthread_mutex_unlock(&g_mu);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	return alloc_mem(dptr, NULL, bytesize);
}

CU_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return free_mem(dptr);
}

CU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return memcpy_sync(dstDevice, 0, srcHost, ByteCount, ARGUS_GPU_COPY_HTOD);
}

CU_API CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	/* The host buffer is not written: device memory is fake. */
	CUresult r = memcpy_sync(srcDevice, 0, dstHost, ByteCount, ARGUS_GPU_COPY_DTOH);
	return r;
}

CU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return memcpy_sync(dstDevice, srcDevice, NULL, ByteCount, ARGUS_GPU_COPY_DTOD);
}

CU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
				     CUstream hStream)
{
	return memcpy_async(dstDevice, 0, srcHost, ByteCount, ARGUS_GPU_COPY_HTOD, hStream);
}

CU_API CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
				     CUstream hStream)
{
	/* The host buffer is not written: device memory is fake. */
	CUresult r = memcpy_async(srcDevice, 0, dstHost, ByteCount, ARGUS_GPU_COPY_DTOH, hStream);
	return r;
}

CU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
				     CUstream hStream)
{
	CUresult r = memcpy_async(dstDevice, srcDevice, NULL, ByteCount, ARGUS_GPU_COPY_DTOD, hStream);
	return r;
}
