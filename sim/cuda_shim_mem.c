/* Device memory of the emulated GPU of the libcuda.so.1 shim (cuda_shim.c):
 * linear allocations (cuMemAlloc*, cuMemAllocPitch, cuMemAllocManaged, the
 * stream-ordered cuMemAllocAsync / cuMemAllocFromPoolAsync and their frees)
 * accounted against the emulated capacity (ARGUS_SIM_GPU_MEM_MB), at fake
 * addresses nothing is ever read or written through; what the device reports of
 * its memory (cuMemGetInfo, cuDeviceTotalMem); and the copies between host and
 * device, timed on the emulated timeline. The virtual memory management calls
 * (cuMemCreate, cuMemMap, ...) are in cuda_shim_vmm.c and take their physical
 * memory from the same capacity. */
#define _GNU_SOURCE
#include "cuda_shim_internal.h"

#include <argus_gpu_wire.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_COPY_BYTES_PER_US 25000ull /* ~25 GB/s host<->device */

#define DPTR_BASE 0x7f0000000000ull /* fake device addresses (cuMemAlloc_v2) */
#define DPTR32_BASE 0x10000000ull   /* legacy 32-bit cuMemAlloc */
#define DPTR32_END 0xffff0000ull
#define ALLOC_ALIGN 512ull
/* cuMemAllocPitch: rows padded to 512 bytes, the texture alignment of current GPUs. */
#define PITCH_ALIGN 512ull
/* Default memory pools (cuDeviceGetDefaultMemPool): one per device, base + (dev + 1) * 16. */
#define H_POOL_BASE 0x5a6000000000ull
#define H_POOL_STRIDE 16ull

struct alloc {
	CUdeviceptr ptr;
	size_t size;
};

unsigned long long g_capacity = (unsigned long long)ARGUS_SIM_GPU_MEM_MB_DEFAULT << 20; /* cuInit: the env */
static unsigned long long g_allocated; /* physical bytes in use: linear and cuMemCreate */
static CUdeviceptr g_next_ptr = DPTR_BASE;
static CUdeviceptr g_next_ptr32 = DPTR32_BASE;

static struct alloc *g_allocs;
static size_t g_nallocs, g_capallocs;

/* Takes `size` bytes of the capacity; 0 when they do not fit. Call with g_mu held. */
int phys_take(unsigned long long size)
{
	if (size > g_capacity || g_allocated > g_capacity - size)
		return 0;
	g_allocated += size;
	return 1;
}

/* Gives back what phys_take took. Call with g_mu held. */
void phys_give(unsigned long long size)
{
	g_allocated -= size <= g_allocated ? size : g_allocated;
}

static CUresult alloc_mem(CUdeviceptr *out64, CUdeviceptr_v1 *out32, size_t size)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if ((!out64 && !out32) || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	CUresult r = CUDA_SUCCESS;
	unsigned long long rounded = (size + ALLOC_ALIGN - 1) & ~(ALLOC_ALIGN - 1);
	if (rounded < size || (out32 && g_next_ptr32 + rounded > DPTR32_END)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (!grow((void **)&g_allocs, &g_capallocs, g_nallocs, sizeof *g_allocs)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	} else if (!phys_take(size)) {
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
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* Any linear allocation, whichever call made it: the driver lets cuMemFree free
 * stream-ordered allocations and cuMemFreeAsync free cuMemAlloc's. */
static CUresult free_mem(CUdeviceptr p)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	for (size_t i = 0; i < g_nallocs; i++) {
		if (g_allocs[i].ptr == p) {
			phys_give(g_allocs[i].size);
			g_allocs[i] = g_allocs[--g_nallocs];
			r = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* Is `h` a stream of this device? (the stream-ordered calls' check) */
static int stream_ok(CUstream h)
{
	pthread_mutex_lock(&g_mu);
	int ok = stream_get(h) != NULL;
	pthread_mutex_unlock(&g_mu);
	return ok;
}

static int device_ok(CUdevice dev)
{
	return dev >= 0 && dev < g_device_count;
}

/* Is [p, p+n) inside one allocation (or mapped memory)? Call with g_mu held. */
static int dptr_valid(CUdeviceptr p, size_t n)
{
	for (size_t i = 0; i < g_nallocs; i++) {
		CUdeviceptr b = g_allocs[i].ptr;
		if (p >= b && p - b <= g_allocs[i].size && n <= g_allocs[i].size - (p - b))
			return 1;
	}
	return vmm_mapped(p, n);
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

/* Stream-ordered allocations are made at once: nothing reads the memory, and
 * what the device holds is what the capacity must answer for. */
CU_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!stream_ok(hStream))
		return CUDA_ERROR_INVALID_HANDLE;
	return alloc_mem(dptr, NULL, bytesize);
}

CU_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pool_out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!device_ok(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*pool_out = (CUmemoryPool)(uintptr_t)(H_POOL_BASE + ((unsigned long long)dev + 1) * H_POOL_STRIDE);
	return CUDA_SUCCESS;
}

/* A pool of cuDeviceGetDefaultMemPool? (the only pools the emulated device has) */
static int pool_ok(CUmemoryPool pool)
{
	unsigned long long v = (unsigned long long)(uintptr_t)pool;
	if (v <= H_POOL_BASE || (v - H_POOL_BASE) % H_POOL_STRIDE)
		return 0;
	return device_ok((CUdevice)((v - H_POOL_BASE) / H_POOL_STRIDE - 1));
}

CU_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					CUstream hStream)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !pool_ok(pool))
		return CUDA_ERROR_INVALID_VALUE; /* cuda.h documents no INVALID_HANDLE for a pool */
	if (!stream_ok(hStream))
		return CUDA_ERROR_INVALID_HANDLE;
	return alloc_mem(dptr, NULL, bytesize);
}

/* Rows of WidthInBytes padded to the pitch; the allocation is pitch x Height
 * bytes, which is what the capacity (and a free) accounts. */
CU_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
				   unsigned int ElementSizeBytes)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
	    (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t pitch = (WidthInBytes + PITCH_ALIGN - 1) & ~(size_t)(PITCH_ALIGN - 1);
	if (pitch < WidthInBytes || Height > SIZE_MAX / pitch)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = alloc_mem(dptr, NULL, pitch * Height);
	if (r == CUDA_SUCCESS)
		*pPitch = pitch;
	return r;
}

/* Managed memory lives on the device once touched: counted against its capacity. */
CU_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_mem(dptr, NULL, bytesize);
}

/* Legacy 32-bit ABI of the unversioned symbol: frees what the legacy cuMemAlloc made. */
CU_API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
	return free_mem((CUdeviceptr)dptr);
}

CU_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	return free_mem(dptr);
}

/* Freed at once, as the allocation was made at once (cuMemAllocAsync). */
CU_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!stream_ok(hStream))
		return CUDA_ERROR_INVALID_HANDLE;
	return free_mem(dptr);
}

/* free = capacity less what this process holds: each rank is alone on its GPU. */
CU_API CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	*total = (size_t)g_capacity;
	*free = (size_t)(g_capacity - (g_allocated < g_capacity ? g_allocated : g_capacity));
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!device_ok(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = (size_t)g_capacity;
	return CUDA_SUCCESS;
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
