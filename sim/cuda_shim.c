/* libcuda.so.1 shim for the simulated training job: an emulated GPU.
 *
 * Exports real CUDA driver API names with their real C signatures. As in the
 * real libcuda, every name (cuLaunchKernel, cuLaunchKernel_ptsz, cuMemAlloc,
 * cuMemAlloc_v2, ...) is its own function at its own address, and no exported
 * function calls another exported one (static or hidden helpers only; the
 * library is built with -fno-ipa-icf so that identical bodies are never folded
 * into thunks), so a uprobe on one address counts each application call once.
 *
 * The emulated GPU: each stream has a "busy until" CLOCK_MONOTONIC time. A
 * launch enqueues the kernel's emulated duration after whatever the stream
 * already has queued; synchronize calls sleep (never spin) until the stream,
 * event or whole device is idle. Device memory is accounted against an
 * emulated capacity (ARGUS_SIM_GPU_MEM_MB, default 81920) and pointers are fake:
 * nothing is ever read or written through them.
 *
 * Handles are encoded integers checked against tables, so garbage handles give
 * CUDA_ERROR_INVALID_HANDLE instead of a crash.
 *
 * This file holds the driver API's entry points (but for memory and the error
 * strings) and the handle tables behind them. The rest of the library:
 * cuda_shim_engine.c, the emulated GPU's timeline (and the GPU thread that
 * times work queued behind an NCCL kernel); cuda_shim_records.c, the GPU
 * activity records and the USDT probes they cross; cuda_shim_mem.c, device
 * memory and copies; cuda_shim_vmm.c, virtual memory management (reserved
 * ranges, physical handles and their mappings); cuda_shim_errors.c, the error strings;
 * cuda_shim_internal.h, what they share (one lock, g_mu, over the whole
 * emulated device). The sim-private functions are described in sim_gpu.h. */
#define _GNU_SOURCE
#include "cuda_shim_internal.h"

#include <argus_gpu_wire.h>

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIM_DRIVER_VERSION 13000
#define SIM_DEFAULT_KERNEL_US 50u

/* ---- state ---- */

/* Handle encoding: base + (index + 1) * 16; each kind has its own base. */
#define H_STRIDE 16u
#define H_CTX_BASE 0x5a1000000000ull
#define H_MOD_BASE 0x5a2000000000ull
#define H_FUNC_BASE 0x5a3000000000ull
#define H_STREAM_BASE 0x5a4000000000ull
#define H_EVENT_BASE 0x5a5000000000ull
#define H_SPAN 0x001000000000ull

struct func {
	int live;
	size_t module;
	unsigned us;
	unsigned name_id; /* wire name id (1-based), 0 = none */
	char name[96];
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
int g_device_count = 8;

struct stream *g_streams; /* [0] = the default stream */
size_t g_nstreams;
static size_t g_capstreams;
struct event *g_events;
size_t g_nevents;
static size_t g_capevents;
static struct func *g_funcs;
static size_t g_nfuncs, g_capfuncs;
static size_t g_nmodules;  /* modules are only counted: handle = index */
static size_t g_ncontexts; /* same for contexts */
static unsigned char *g_ctx_live;
static size_t g_capctx;
static unsigned char *g_mod_live;
static size_t g_capmod;
int g_device_ord; /* device of the newest context: the records' device_id */

/* Grow an array to hold one more element; returns 0 on failure. */
int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 1;
	size_t nc = *cap ? *cap * 2 : 16;
	void *p = realloc(*arr, nc * elem);
	if (!p)
		return 0;
	memset((char *)p + *cap * elem, 0, (nc - *cap) * elem);
	*arr = p;
	*cap = nc;
	return 1;
}

static void *h_encode(unsigned long long base, size_t idx)
{
	return (void *)(uintptr_t)(base + (idx + 1) * H_STRIDE);
}

/* Index behind a handle of this kind, or -1. */
static long h_decode(const void *h, unsigned long long base, size_t n)
{
	uintptr_t v = (uintptr_t)h;
	if (v <= base || v >= base + H_SPAN)
		return -1;
	uintptr_t off = v - base;
	if (off % H_STRIDE)
		return -1;
	size_t idx = off / H_STRIDE - 1;
	return idx < n ? (long)idx : -1;
}

long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sleep until CLOCK_MONOTONIC reaches `t` ns (signals do not cut it short). */
void sleep_until(long long t)
{
	/* Work already done: return at once, as a synchronize on an idle stream
	 * does (a clock_nanosleep to a past deadline still costs the timer slack,
	 * ~20 us here). */
	if (t <= now_ns())
		return;
	struct timespec ts;
	ts.tv_sec = t / 1000000000LL;
	ts.tv_nsec = t % 1000000000LL;
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
	}
}

static unsigned long long env_ull(const char *name, unsigned long long def)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return def;
	char *end = NULL;
	unsigned long long x = strtoull(v, &end, 10);
	return (end && *end == '\0') ? x : def;
}

/* Stream behind a handle (NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are
 * the default stream), or NULL. Call with g_mu held. */
struct stream *stream_get(CUstream h)
{
	uintptr_t v = (uintptr_t)h;
	if (v == 0 || v == 1 || v == 2)
		return &g_streams[0];
	long i = h_decode(h, H_STREAM_BASE, g_nstreams);
	if (i < 1 || !g_streams[i].live)
		return NULL;
	return &g_streams[i];
}

/* ---- helpers behind the exported functions ---- */

static CUresult do_init(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	if (!g_initialized) {
		g_capacity = env_ull(ARGUS_SIM_GPU_MEM_MB_ENV, ARGUS_SIM_GPU_MEM_MB_DEFAULT) << 20;
		unsigned long long n = env_ull("ARGUS_SIM_GPU_COUNT", 8);
		g_device_count = (n >= 1 && n <= 64) ? (int)n : 8;
		if (!grow((void **)&g_streams, &g_capstreams, 0, sizeof *g_streams)) {
			pthread_mutex_unlock(&g_mu);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		g_streams[0].live = 1;
		g_nstreams = 1;
		g_initialized = 1;
	}
	pthread_mutex_unlock(&g_mu);
	return CUDA_SUCCESS;
}

int initialized(void)
{
	return __atomic_load_n(&g_initialized, __ATOMIC_ACQUIRE);
}

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= g_device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&g_mu);
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	if (grow((void **)&g_ctx_live, &g_capctx, g_ncontexts, 1)) {
		g_ctx_live[g_ncontexts] = 1;
		g_device_ord = dev;
		*pctx = (CUcontext)h_encode(H_CTX_BASE, g_ncontexts++);
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		       unsigned bz, CUstream hstream)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	long fi = h_decode(f, H_FUNC_BASE, g_nfuncs);
	struct stream *s = stream_get(hstream);
	if (fi < 0 || !g_funcs[fi].live || !s) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else {
		defer_or_run((size_t)(s - g_streams), DEF_KERNEL, jittered_ns(g_funcs[fi].us), 0,
			     g_funcs[fi].name_id, 0);
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
		      config->blockDimY, config->blockDimZ, config->hStream);
}

static CUresult stream_sync(CUstream h)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_lock(&g_mu);
	struct stream *s = stream_get(h);
	if (s)
		def_wait_empty();
	long long until = s ? s->busy_until : 0;
	pthread_mutex_unlock(&g_mu);
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	sleep_until(until);
	after_sync();
	return CUDA_SUCCESS;
}

static CUresult event_record(CUevent ev, CUstream h)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	long ei = h_decode(ev, H_EVENT_BASE, g_nevents);
	struct stream *s = stream_get(h);
	if (ei < 0 || !g_events[ei].live || !s) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else if (deferring()) {
		def_wait_room();
		struct deferred *d = def_tail();
		memset(d, 0, sizeof *d);
		d->type = DEF_EVENT;
		d->issued = now_ns();
		d->stream = (size_t)(s - g_streams);
		d->event = ei;
		g_def_n++;
		pthread_cond_broadcast(&g_def_cv);
		g_events[ei].recorded = 1;
		g_events[ei].at = 0; /* until the GPU thread times it */
	} else {
		long long now = now_ns();
		g_events[ei].recorded = 1;
		g_events[ei].at = s->busy_until > now ? s->busy_until : now;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* ======================= exported API ======================= */

CU_API CUresult cuInit(unsigned int Flags)
{
	return do_init(Flags);
}

CU_API CUresult cuDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = SIM_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (ordinal < 0 || ordinal >= g_device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetCount(int *count)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = g_device_count;
	return CUDA_SUCCESS;
}

CU_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev < 0 || dev >= g_device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "Argus Simulated GPU %d", dev);
	return CUDA_SUCCESS;
}

/* Legacy ABI (flags, dev) of the unversioned symbol. */
CU_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	(void)flags;
	return ctx_create(pctx, dev);
}

CU_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	(void)flags;
	return ctx_create(pctx, dev);
}

CU_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&g_mu);
	long i = h_decode(ctx, H_CTX_BASE, g_ncontexts);
	if (i >= 0 && g_ctx_live[i]) {
		g_ctx_live[i] = 0;
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuCtxSynchronize(void)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_lock(&g_mu);
	def_wait_empty();
	long long until = device_busy_until();
	pthread_mutex_unlock(&g_mu);
	sleep_until(until);
	after_sync();
	return CUDA_SUCCESS;
}

CU_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	(void)Flags;
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!phStream)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	if (grow((void **)&g_streams, &g_capstreams, g_nstreams, sizeof *g_streams)) {
		g_streams[g_nstreams].live = 1;
		g_streams[g_nstreams].busy_until = 0;
		*phStream = (CUstream)h_encode(H_STREAM_BASE, g_nstreams++);
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&g_mu);
	long i = h_decode(hStream, H_STREAM_BASE, g_nstreams);
	if (i >= 1 && g_streams[i].live) {
		g_streams[i].live = 0; /* queued work still "completes" on its own */
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuStreamSynchronize(CUstream hStream)
{
	return stream_sync(hStream);
}

CU_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	CUresult r = stream_sync(hStream);
	return r;
}

CU_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	(void)Flags;
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	if (grow((void **)&g_events, &g_capevents, g_nevents, sizeof *g_events)) {
		g_events[g_nevents].live = 1;
		g_events[g_nevents].recorded = 0;
		*phEvent = (CUevent)h_encode(H_EVENT_BASE, g_nevents++);
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	return event_record(hEvent, hStream);
}

CU_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	CUresult r = event_record(hEvent, hStream);
	return r;
}

CU_API CUresult cuEventSynchronize(CUevent hEvent)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_lock(&g_mu);
	long i = h_decode(hEvent, H_EVENT_BASE, g_nevents);
	int ok = i >= 0 && g_events[i].live;
	if (ok)
		def_wait_empty();
	long long until = (ok && g_events[i].recorded) ? g_events[i].at : 0;
	pthread_mutex_unlock(&g_mu);
	if (!ok)
		return CUDA_ERROR_INVALID_HANDLE;
	sleep_until(until);
	after_sync();
	return CUDA_SUCCESS;
}

CU_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult r = CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&g_mu);
	long i = h_decode(hEvent, H_EVENT_BASE, g_nevents);
	if (i >= 0 && g_events[i].live) {
		g_events[i].live = 0;
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&g_mu);
	if (grow((void **)&g_mod_live, &g_capmod, g_nmodules, 1)) {
		g_mod_live[g_nmodules] = 1;
		*module = (CUmodule)h_encode(H_MOD_BASE, g_nmodules++);
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&g_mu);
	return r;
}

CU_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	if (!initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&g_mu);
	long m = h_decode(hmod, H_MOD_BASE, g_nmodules);
	if (m < 0 || !g_mod_live[m]) {
		r = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	for (size_t i = 0; i < g_nfuncs; i++) {
		if (g_funcs[i].live && g_funcs[i].module == (size_t)m &&
		    strncmp(g_funcs[i].name, name, sizeof g_funcs[i].name - 1) == 0) {
			*hfunc = (CUfunction)h_encode(H_FUNC_BASE, i);
			goto out;
		}
	}
	if (!grow((void **)&g_funcs, &g_capfuncs, g_nfuncs, sizeof *g_funcs)) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	g_funcs[g_nfuncs].live = 1;
	g_funcs[g_nfuncs].module = (size_t)m;
	g_funcs[g_nfuncs].us = SIM_DEFAULT_KERNEL_US;
	snprintf(g_funcs[g_nfuncs].name, sizeof g_funcs[g_nfuncs].name, "%s", name);
	g_funcs[g_nfuncs].name_id = name_id_for(g_funcs[g_nfuncs].name);
	*hfunc = (CUfunction)h_encode(H_FUNC_BASE, g_nfuncs++);
out:
	pthread_mutex_unlock(&g_mu);
	return r;
}

/* Sim-only: the emulated duration of every launch of `f`. */
CU_API void argus_sim_set_kernel_us(CUfunction f, unsigned us)
{
	pthread_mutex_lock(&g_mu);
	long i = h_decode(f, H_FUNC_BASE, g_nfuncs);
	if (i >= 0 && g_funcs[i].live)
		g_funcs[i].us = us;
	pthread_mutex_unlock(&g_mu);
}

CU_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			       void **kernelParams, void **extra)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream);
}

CU_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				    unsigned int gridDimZ, unsigned int blockDimX,
				    unsigned int blockDimY, unsigned int blockDimZ,
				    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
				    void **extra)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	CUresult r = launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream);
	return r;
}

CU_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
				 void **extra)
{
	(void)kernelParams;
	(void)extra;
	return launch_ex(config, f);
}

CU_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
				      void **kernelParams, void **extra)
{
	(void)kernelParams;
	(void)extra;
	CUresult r = launch_ex(config, f);
	return r;
}
