/* Private to the libcuda.so.1 shim (sim/cuda_shim*.c): the driver API types it
 * implements and what its files share. Everything declared here is hidden
 * (-fvisibility=hidden, and the declarations say so too, so that calls and
 * accesses across the files bind locally): only the CU_API names are exported. */
#ifndef ARGUS_SIM_CUDA_SHIM_INTERNAL_H
#define ARGUS_SIM_CUDA_SHIM_INTERNAL_H

#include "sim_gpu.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- minimal driver API types ---- */

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned int CUdeviceptr_v1; /* the legacy 32-bit cuMemAlloc ABI */
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUlaunchAttribute_st CUlaunchAttribute; /* never dereferenced */
typedef struct CUmemPoolHandle_st *CUmemoryPool;

#include "cuda_vmm_abi.h" /* CUmemGenericAllocationHandle, CUmemAllocationProp, CUmemAccessDesc */

enum {
	CU_MEM_LOCATION_TYPE_DEVICE = 1,
	CU_MEM_ALLOCATION_TYPE_PINNED = 1,
	CU_MEM_ACCESS_FLAGS_PROT_NONE = 0,
	CU_MEM_ACCESS_FLAGS_PROT_READ = 1,
	CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
	CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1,
	CU_MEM_ATTACH_GLOBAL = 1,
	CU_MEM_ATTACH_HOST = 2,
};

typedef struct CUlaunchConfig_st {
	unsigned int gridDimX;
	unsigned int gridDimY;
	unsigned int gridDimZ;
	unsigned int blockDimX;
	unsigned int blockDimY;
	unsigned int blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_IMAGE = 200,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_NOT_SUPPORTED = 801,
};

#define CU_API __attribute__((visibility("default")))

/* The emulated device's streams and events (tables in cuda_shim.c). */
struct stream {
	int live;
	long long busy_until; /* ns, CLOCK_MONOTONIC */
};
struct event {
	int live;
	int recorded;
	long long at;
};

/* Work queued behind an operation whose end is not known when it is issued (an
 * asynchronous NCCL collective ends when the last rank's GPU reaches it). The
 * host never waits for it at issue: it is resolved, in issue order, by the
 * emulated GPU's own thread (gpu_thread_main), and the launches, copies and
 * event records issued after it are queued here and timed when it is resolved.
 * Synchronising calls wait until the queue is empty, as a real host waits for
 * its GPU. A full queue blocks the issuing call, as CUDA's launch queue does. */
enum { DEF_KERNEL = 1, DEF_COPY, DEF_EVENT, DEF_EXTERNAL };
#define DEF_QUEUE_MAX 4096u
struct deferred {
	int type;
	long long issued;   /* host time of the call */
	size_t stream;      /* stream index */
	long long dur_ns;   /* kernel or copy duration */
	unsigned long long bytes;
	unsigned name_id;
	unsigned flags;
	long event;         /* DEF_EVENT */
	argus_sim_gpu_resolve_fn resolve; /* DEF_EXTERNAL */
	void *ctx;
};

#pragma GCC visibility push(hidden)

/* cuda_shim.c: the entry points, and the host side of the emulated GPU. */
extern pthread_mutex_t g_mu; /* the whole emulated device */
extern struct stream *g_streams; /* [0] = the default stream */
extern size_t g_nstreams;
extern struct event *g_events;
extern size_t g_nevents;
extern int g_device_ord;
extern int g_device_count;
int grow(void **arr, size_t *cap, size_t n, size_t elem);
long long now_ns(void);
void sleep_until(long long t);
int initialized(void);
struct stream *stream_get(CUstream h);

/* cuda_shim_mem.c: device memory. Physical memory (linear allocations and
 * cuMemCreate's) is taken from and given back to the capacity under g_mu. */
#define SIM_VMM_GRANULARITY (2ull << 20) /* cuMemGetAllocationGranularity */
extern unsigned long long g_capacity;
int phys_take(unsigned long long size);
void phys_give(unsigned long long size);

/* cuda_shim_vmm.c: virtual memory management (cuMemAddressReserve, cuMemCreate,
 * cuMemMap, ...). Is [p, p+n) inside mapped memory? Call with g_mu held. */
int vmm_mapped(CUdeviceptr p, size_t n);

/* cuda_shim_engine.c: the emulated GPU's engine, which times the work. */
extern size_t g_def_n;
extern pthread_cond_t g_def_cv;
long long device_busy_until(void);
int deferring(void);
struct deferred *def_tail(void);
void def_wait_room(void);
void def_wait_empty(void);
void defer_or_run(size_t si, int type, long long dur_ns, unsigned long long bytes, unsigned name_id,
		  unsigned flags);
long long jittered_ns(unsigned us);

/* cuda_shim_records.c: the GPU activity records and their emission. */
unsigned name_id_for(const char *name);
void enqueue(long long start, long long end, unsigned long long bytes, unsigned name_id,
	     size_t stream_idx, unsigned kind, unsigned flags);
void after_sync(void);

#pragma GCC visibility pop

#endif /* ARGUS_SIM_CUDA_SHIM_INTERNAL_H */
