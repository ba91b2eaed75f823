/* libcuda.so.1 shim for the simulated training job: an emulated GPU.
 *
 * Exports real CUDA driver API names with their real C signatures. As in the
 * real libcuda, every name (cuLaunchKernel, cuLaunchKernel_ptsz, cuMemAlloc,
 * cuMemAlloc_v2, ...) is its own function at its own address, and no exported
 * function calls another exported one (static helpers only; the library is
 * built with -fno-ipa-icf so that identical bodies are never folded into
 * thunks), so a uprobe on one address counts each application call once.
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
 * GPU activity (bpf/argus_gpu_wire.h): every launch, copy (synchronous or on a
 * stream) and NCCL kernel (argus_sim_gpu_kernel, called by the NCCL shim)
 * becomes a record on the emulated timeline, kept in a bounded pending buffer.
 * Completed records (end <= now) cross the USDT probe argus:gpu_batch, sorted
 * by start, at most ARGUS_GPU_BATCH_MAX at a time: after every synchronize call,
 * when ARGUS_GPU_BATCH_MAX completed records are pending, and at
 * argus_sim_gpu_flush_all. Each kernel-name id is announced once through
 * argus:gpu_name before the first batch that uses it. ARGUS_SIM_GPU_ACTIVITY=0
 * turns it off. The probes fire under g_mu, so batches never interleave. The
 * sim-private functions are described in sim_gpu.h. */
#define _GNU_SOURCE
#include "argus_result_codes.h"
#include "sim_gpu.h"

#include <argus_gpu_wire.h>
#include "gpu/gpu_fold.h"
/* USDT semaphores (argus_gpu_wire.h, "Listening"), as libargus-cupti.so has them. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short argus_gpu_batch_semaphore __attribute__((unused, section(".probes")));
__extension__ unsigned short argus_gpu_name_semaphore __attribute__((unused, section(".probes")));

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <time.h>

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
};

#define CU_API __attribute__((visibility("default")))

#define SIM_DRIVER_VERSION 13000
#define SIM_DEFAULT_KERNEL_US 50u
#define SIM_COPY_BYTES_PER_US 25000ull /* ~25 GB/s host<->device */

/* ---- state ---- */

/* Handle encoding: base + (index + 1) * 16; each kind has its own base. */
#define H_STRIDE 16u
#define H_CTX_BASE 0x5a1000000000ull
#define H_MOD_BASE 0x5a2000000000ull
#define H_FUNC_BASE 0x5a3000000000ull
#define H_STREAM_BASE 0x5a4000000000ull
#define H_EVENT_BASE 0x5a5000000000ull
#define H_SPAN 0x001000000000ull

#define DPTR_BASE 0x7f0000000000ull /* fake device addresses (cuMemAlloc_v2) */
#define DPTR32_BASE 0x10000000ull   /* legacy 32-bit cuMemAlloc */
#define DPTR32_END 0xffff0000ull
#define ALLOC_ALIGN 512ull

struct stream {
	int live;
	long long busy_until; /* ns, CLOCK_MONOTONIC */
};
struct event {
	int live;
	int recorded;
	long long at;
};
struct func {
	int live;
	size_t module;
	unsigned us;
	unsigned name_id; /* wire name id (1-based), 0 = none */
	char name[96];
};
/* Kernel names of the wire format: id = index + 1. */
struct gpu_name {
	int announced; /* argus:gpu_name fired */
	char name[128];
};
struct alloc {
	CUdeviceptr ptr;
	size_t size;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_initialized;
static int g_device_count = 8;
static unsigned long long g_capacity = 81920ull << 20;
static unsigned long long g_allocated;
static CUdeviceptr g_next_ptr = DPTR_BASE;
static CUdeviceptr g_next_ptr32 = DPTR32_BASE;

static struct alloc *g_allocs;
static size_t g_nallocs, g_capallocs;
static struct stream *g_streams; /* [0] = the default stream */
static size_t g_nstreams, g_capstreams;
static struct event *g_events;
static size_t g_nevents, g_capevents;
static struct func *g_funcs;
static size_t g_nfuncs, g_capfuncs;
static size_t g_nmodules;  /* modules are only counted: handle = index */
static size_t g_ncontexts; /* same for contexts */
static unsigned char *g_ctx_live;
static size_t g_capctx;
static unsigned char *g_mod_live;
static size_t g_capmod;
static int g_device_ord; /* device of the newest context: the records' device_id */

/* GPU activity (see the top of the file). */
#define GPU_PENDING_MAX 65536u
#define GPU_RECHECK_NS 1000000LL /* a full-but-incomplete buffer is recounted after 1 ms */
static int g_activity = -1;           /* -1: ARGUS_SIM_GPU_ACTIVITY not read yet */
static struct argus_gpu_rec *g_pending; /* [GPU_PENDING_MAX], in enqueue order */
static struct argus_gpu_rec *g_ready;   /* [GPU_PENDING_MAX]: scratch of a flush */
static size_t g_npending;
static unsigned long long g_dropped_unreported; /* lost since the previous batch */
static unsigned g_next_corr = 1;
static long long g_next_check_ns;
static struct gpu_name *g_names;
static size_t g_nnames, g_capnames;
static struct argus_sim_gpu_totals g_totals; /* exactly what crossed argus:gpu_batch */

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
static struct deferred g_def[DEF_QUEUE_MAX]; /* a ring */
static size_t g_def_head, g_def_n;
static pthread_cond_t g_def_cv = PTHREAD_COND_INITIALIZER; /* the queue moved */
static int g_gpu_thread_started;

/* Grow an array to hold one more element; returns 0 on failure. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
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

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sleep until CLOCK_MONOTONIC reaches `t` ns (signals do not cut it short). */
static void sleep_until(long long t)
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
static struct stream *stream_get(CUstream h)
{
	uintptr_t v = (uintptr_t)h;
	if (v == 0 || v == 1 || v == 2)
		return &g_streams[0];
	long i = h_decode(h, H_STREAM_BASE, g_nstreams);
	if (i < 1 || !g_streams[i].live)
		return NULL;
	return &g_streams[i];
}

static long long device_busy_until(void)
{
	long long t = 0;
	for (size_t i = 0; i < g_nstreams; i++)
		if (g_streams[i].live && g_streams[i].busy_until > t)
			t = g_streams[i].busy_until;
	return t;
}

/* ---- GPU activity records (all with g_mu held) ---- */

static int activity_on(void)
{
	if (g_activity < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_ACTIVITY_ENV);
		g_activity = !(v && (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 ||
				     strcmp(v, "off") == 0 || strcmp(v, "no") == 0));
	}
	return g_activity;
}

/* The wire id of a kernel name (registered on first sight), 0 if out of memory. */
static unsigned name_id_for(const char *name)
{
	char buf[sizeof g_names[0].name];
	snprintf(buf, sizeof buf, "%s", name);
	for (size_t i = 0; i < g_nnames; i++)
		if (strcmp(g_names[i].name, buf) == 0)
			return (unsigned)(i + 1);
	if (!grow((void **)&g_names, &g_capnames, g_nnames, sizeof *g_names))
		return 0;
	g_names[g_nnames].announced = 0;
	memcpy(g_names[g_nnames].name, buf, sizeof buf);
	return (unsigned)++g_nnames;
}

/* One copy of each probe site: noinline/noclone keep a single stapsdt note each. */
static __attribute__((noinline, noclone)) void fire_gpu_name(unsigned id, const char *name)
{
	STAP_PROBE2(argus, gpu_name, id, name);
}

static __attribute__((noinline, noclone)) void fire_gpu_batch(const struct argus_gpu_rec *recs,
							       unsigned n, unsigned long long dropped)
{
	STAP_PROBE3(argus, gpu_batch, recs, n, dropped);
}

static int rec_cmp(const void *a, const void *b)
{
	const struct argus_gpu_rec *x = a, *y = b;
	if (x->start_ns != y->start_ns)
		return x->start_ns < y->start_ns ? -1 : 1;
	if (x->correlation_id != y->correlation_id)
		return x->correlation_id < y->correlation_id ? -1 : 1;
	return 0;
}

/* Adds one record to the totals (what the agent must count). */
static void count_record(const struct argus_gpu_rec *r)
{
	const uint64_t ns = r->end_ns - r->start_ns;
	if (r->kind == ARGUS_GPU_KERNEL) {
		g_totals.kernels++;
		g_totals.kernel_ns += ns;
		if (r->flags & ARGUS_GPU_F_NCCL) {
			g_totals.nccl_kernels++;
			g_totals.nccl_kernel_ns += ns;
		}
		if ((r->flags & (ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV)) == (ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV))
			g_totals.recv_kernels++;
	} else if (r->kind == ARGUS_GPU_MEMCPY) {
		g_totals.memcpy++;
		unsigned dir = (unsigned)r->flags >> ARGUS_GPU_COPY_SHIFT;
		if (dir == ARGUS_GPU_COPY_HTOD)
			g_totals.memcpy_bytes_htod += r->bytes;
		else if (dir == ARGUS_GPU_COPY_DTOH)
			g_totals.memcpy_bytes_dtoh += r->bytes;
		else if (dir == ARGUS_GPU_COPY_DTOD)
			g_totals.memcpy_bytes_dtod += r->bytes;
	}
}

static struct argus_unheard g_unheard; /* fired while no agent listened, not yet reported */

/* Both probes: the agent attaches gpu_batch, then gpu_name, and needs the names too. */
static int g_assume_listening = -1; /* ARGUS_SIM_GPU_ASSUME_LISTENING, read once */

static int agent_listening(void)
{
	if (g_assume_listening < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_ASSUME_LISTENING_ENV);
		g_assume_listening = v && strcmp(v, "1") == 0;
	}
	if (g_assume_listening)
		return 1;
	return __atomic_load_n(&argus_gpu_batch_semaphore, __ATOMIC_RELAXED) != 0 &&
	       __atomic_load_n(&argus_gpu_name_semaphore, __ATOMIC_RELAXED) != 0;
}

/* A name is announced only to a listening agent; one announced to nobody is
 * announced again (with all the others) once one listens. */
static void announce_names(const struct argus_gpu_rec *recs, size_t n)
{
	if (!agent_listening()) {
		g_unheard.names_stale = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned id = recs[i].name_id;
		if (id >= 1 && id <= g_nnames && !g_names[id - 1].announced) {
			g_names[id - 1].announced = 1;
			fire_gpu_name(id, g_names[id - 1].name);
			g_totals.names++;
		}
	}
}

static void fire_and_count(const struct argus_gpu_rec *recs, unsigned n, unsigned long long dropped)
{
	if (!agent_listening()) { /* counted, and reported to the next agent */
		argus_unheard_add(&g_unheard, recs, n, dropped);
		g_totals.unheard_records += n;
		g_totals.dropped_unheard += dropped;
		return;
	}
	if (g_unheard.names_stale) {
		for (size_t i = 0; i < g_nnames; i++) {
			fire_gpu_name((unsigned)(i + 1), g_names[i].name);
			g_names[i].announced = 1;
			g_totals.names++;
		}
		g_unheard.names_stale = 0;
	}
	struct argus_gpu_rec u;
	uint64_t u_dropped = 0;
	if (argus_unheard_take(&g_unheard, &u, &u_dropped)) {
		fire_gpu_batch(&u, 1, u_dropped);
		g_totals.batches++;
		g_totals.records++;
		g_totals.dropped += u_dropped;
	}
	fire_gpu_batch(recs, n, dropped);
	g_totals.batches++;
	g_totals.records += n;
	g_totals.dropped += dropped;
}

/* --gpu-fold (ARGUS_SIM_GPU_FOLD=1): records go through the producer's folder. */
static int g_fold = -1;
static int g_fold_per_buffer; /* ARGUS_SIM_GPU_FOLD_PER_BUFFER=1: no span across buffers */
static struct argus_gpu_folder *g_folder;

static void folded_batch(void *ctx, const struct argus_gpu_rec *recs, uint32_t n, uint64_t dropped)
{
	(void)ctx;
	fire_and_count(recs, n, dropped);
}

static int fold_on(void)
{
	if (g_fold < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_FOLD_ENV);
		g_fold = v && strcmp(v, "1") == 0;
		const char *pb = getenv(ARGUS_SIM_GPU_FOLD_PER_BUFFER_ENV);
		g_fold_per_buffer = pb && strcmp(pb, "1") == 0;
		if (g_fold && (g_folder = malloc(sizeof *g_folder)) != NULL)
			argus_fold_init(g_folder, folded_batch, NULL);
		else
			g_fold = 0;
	}
	return g_fold;
}

/* Hands `n` sorted records (and the drops not yet reported) to the agent in
 * chunks of at most ARGUS_GPU_BATCH_MAX, announcing new names first, and adds
 * them to the totals. Folding, the folder makes the batches (each call is the
 * end of a producer buffer at `now`: a young span goes on into the next). */
static void emit(struct argus_gpu_rec *recs, size_t n, long long now)
{
	for (size_t i = 0; i < n; i++)
		count_record(&recs[i]);
	if (fold_on()) {
		announce_names(recs, n);
		unsigned long long dropped = g_dropped_unreported;
		g_dropped_unreported = 0;
		argus_fold_add(g_folder, recs, n, dropped);
		if (g_fold_per_buffer)
			argus_fold_flush(g_folder);
		else
			argus_fold_end_buffer(g_folder, (uint64_t)now);
		return;
	}
	size_t off = 0;
	do {
		size_t m = n - off < ARGUS_GPU_BATCH_MAX ? n - off : ARGUS_GPU_BATCH_MAX;
		announce_names(recs + off, m);
		unsigned long long dropped = g_dropped_unreported;
		g_dropped_unreported = 0;
		fire_and_count(recs + off, (unsigned)m, dropped);
		off += m;
	} while (off < n);
}

/* Emits every pending record that has completed by `now`. */
static void flush_completed(long long now)
{
	size_t n = 0, keep = 0;
	for (size_t i = 0; i < g_npending; i++) {
		if ((long long)g_pending[i].end_ns <= now)
			g_ready[n++] = g_pending[i];
		else
			g_pending[keep++] = g_pending[i];
	}
	g_npending = keep;
	if (n == 0 && g_dropped_unreported == 0) {
		if (g_fold == 1) /* nothing new: a span kept open ends once it is old */
			argus_fold_end_buffer(g_folder, (uint64_t)now);
		return;
	}
	qsort(g_ready, n, sizeof *g_ready, rec_cmp);
	emit(g_ready, n, now);
}

/* Flushes once ARGUS_GPU_BATCH_MAX pending records have completed. */
static void maybe_flush_full(long long now)
{
	if (g_npending < ARGUS_GPU_BATCH_MAX || now < g_next_check_ns)
		return;
	size_t done = 0;
	for (size_t i = 0; i < g_npending; i++)
		done += (long long)g_pending[i].end_ns <= now;
	if (done >= ARGUS_GPU_BATCH_MAX)
		flush_completed(now);
	else
		g_next_check_ns = now + GPU_RECHECK_NS;
}

static void enqueue(long long start, long long end, unsigned long long bytes, unsigned name_id,
		    size_t stream_idx, unsigned kind, unsigned flags)
{
	if (!activity_on())
		return;
	if (!g_pending) {
		g_pending = calloc(GPU_PENDING_MAX, sizeof *g_pending);
		g_ready = calloc(GPU_PENDING_MAX, sizeof *g_ready);
		if (!g_pending || !g_ready) {
			free(g_pending);
			free(g_ready);
			g_pending = g_ready = NULL;
			g_dropped_unreported++;
			return;
		}
	}
	long long now = now_ns();
	if (g_npending == GPU_PENDING_MAX)
		flush_completed(now);
	if (g_npending == GPU_PENDING_MAX) {
		g_dropped_unreported++;
		return;
	}
	struct argus_gpu_rec *r = &g_pending[g_npending++];
	memset(r, 0, sizeof *r);
	r->start_ns = (uint64_t)start;
	r->end_ns = (uint64_t)end;
	r->bytes = bytes;
	r->correlation_id = g_next_corr++;
	r->name_id = name_id;
	r->stream_id = (uint32_t)stream_idx;
	r->device_id = (uint16_t)g_device_ord;
	r->kind = (uint8_t)kind;
	r->flags = (uint8_t)flags;
	maybe_flush_full(now);
}

static long long jittered_ns(unsigned us);

/* Runs a kernel or copy on stream `si` issued at `issued` (g_mu held). */
static void run_on_stream(size_t si, long long issued, long long dur_ns, unsigned long long bytes,
			  unsigned name_id, unsigned kind, unsigned flags)
{
	struct stream *s = &g_streams[si];
	long long start = s->busy_until > issued ? s->busy_until : issued;
	s->busy_until = start + dur_ns;
	enqueue(start, s->busy_until, bytes, name_id, si, kind, flags);
}

/* An NCCL (or other externally timed) kernel [start, end] on stream `si`: the
 * stream runs it, and every stream waits for its result (PyTorch makes the
 * compute stream wait on the NCCL stream's event). g_mu held. */
static void run_external(size_t si, unsigned name_id, long long start, long long end, unsigned flags)
{
	enqueue(start, end, 0, name_id, si, ARGUS_GPU_KERNEL, flags & 0x0fu);
	for (size_t i = 0; i < g_nstreams; i++)
		if (g_streams[i].live && g_streams[i].busy_until < end)
			g_streams[i].busy_until = end;
}

static int deferring(void)
{
	return g_def_n > 0;
}

static struct deferred *def_tail(void)
{
	return &g_def[(g_def_head + g_def_n) % DEF_QUEUE_MAX];
}

/* Waits (g_mu held) until there is room for one more deferred item. */
static void def_wait_room(void)
{
	while (g_def_n >= DEF_QUEUE_MAX)
		pthread_cond_wait(&g_def_cv, &g_mu);
}

/* Waits (g_mu held) until every deferred item has been resolved and timed. */
static void def_wait_empty(void)
{
	while (g_def_n > 0)
		pthread_cond_wait(&g_def_cv, &g_mu);
}

/* Times one queued item that needs no peer (g_mu held). */
static void def_replay(const struct deferred *d)
{
	if (d->type == DEF_EVENT) {
		struct stream *s = &g_streams[d->stream];
		if (d->event >= 0 && (size_t)d->event < g_nevents) {
			g_events[d->event].recorded = 1;
			g_events[d->event].at = s->busy_until > d->issued ? s->busy_until : d->issued;
		}
		return;
	}
	run_on_stream(d->stream, d->issued, d->dur_ns, d->bytes, d->name_id,
		      d->type == DEF_COPY ? ARGUS_GPU_MEMCPY : ARGUS_GPU_KERNEL, d->flags);
}

/* The emulated GPU's thread: resolves external items in issue order (the call
 * into `resolve` may block on the peers, without g_mu), then times what was
 * queued behind them. */
static void *gpu_thread_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_mu);
	for (;;) {
		while (g_def_n == 0)
			pthread_cond_wait(&g_def_cv, &g_mu);
		struct deferred d = g_def[g_def_head];
		if (d.type == DEF_EXTERNAL) {
			long long ready = device_busy_until();
			if (ready < d.issued)
				ready = d.issued;
			pthread_mutex_unlock(&g_mu);
			long long start = ready, end = ready;
			int ok = d.resolve(d.ctx, ready, &start, &end) == 0 && end >= start && start >= 0;
			pthread_mutex_lock(&g_mu);
			if (ok)
				run_external(d.stream, d.name_id, start, end, d.flags);
		} else {
			def_replay(&d);
		}
		g_def_head = (g_def_head + 1) % DEF_QUEUE_MAX;
		g_def_n--;
		pthread_cond_broadcast(&g_def_cv);
	}
	return NULL;
}

/* Starts the GPU thread once (g_mu held); 0 on failure. */
static int gpu_thread_start(void)
{
	if (g_gpu_thread_started)
		return 1;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	/* The thread must not take the host's signals (the sim's stop signals). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t t;
	int rc = pthread_create(&t, &a, gpu_thread_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (rc != 0)
		return 0;
	g_gpu_thread_started = 1;
	return 1;
}

/* A launch or async copy: timed now, or queued behind an unresolved item
 * (g_mu held; may wait for room in the queue). */
static void defer_or_run(size_t si, int type, long long dur_ns, unsigned long long bytes, unsigned name_id,
			 unsigned flags)
{
	long long now = now_ns();
	if (!deferring()) {
		run_on_stream(si, now, dur_ns, bytes, name_id, type == DEF_COPY ? ARGUS_GPU_MEMCPY : ARGUS_GPU_KERNEL,
			      flags);
		return;
	}
	def_wait_room();
	struct deferred *d = def_tail();
	memset(d, 0, sizeof *d);
	d->type = type;
	d->issued = now;
	d->stream = si;
	d->dur_ns = dur_ns;
	d->bytes = bytes;
	d->name_id = name_id;
	d->flags = flags;
	g_def_n++;
	pthread_cond_broadcast(&g_def_cv);
}

/* After a synchronize call returned: hand over what has completed. */
static void after_sync(void)
{
	pthread_mutex_lock(&g_mu);
	flush_completed(now_ns());
	pthread_mutex_unlock(&g_mu);
}

/* ---- helpers behind the exported functions ---- */

static CUresult do_init(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&g_mu);
	if (!g_initialized) {
		g_capacity = env_ull("ARGUS_SIM_GPU_MEM_MB", 81920ull) << 20;
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

static int initialized(void)
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

/* A launch's emulated duration: the function's, varied by up to
 * ARGUS_SIM_GPU_JITTER_PCT percent either way (real kernels of one name vary
 * from call to call; 0 or unset: exact). g_mu held. */
static long long jittered_ns(unsigned us)
{
	static int pct = -1;
	static uint64_t seq;
	if (pct < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_JITTER_ENV);
		pct = v ? atoi(v) : 0;
		if (pct < 0 || pct > 50)
			pct = 0;
	}
	long long ns = (long long)us * 1000LL;
	if (pct == 0)
		return ns;
	uint64_t x = ++seq * 0x9E3779B97F4A7C15ull; /* a fixed sequence: runs repeat */
	x ^= x >> 29;
	const long long span = ns * pct / 100;
	return ns - span + (long long)(x % (uint64_t)(2 * span + 1));
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

/* ---- sim-private GPU activity interface (sim_gpu.h) ---- */

/* The agent finds producers of the wire format by this symbol. */
CU_API unsigned argus_gpu_wire_version(void)
{
	return ARGUS_GPU_WIRE_VERSION;
}

CU_API long long argus_sim_gpu_ready_ns(void)
{
	long long now = now_ns();
	if (!initialized())
		return now;
	pthread_mutex_lock(&g_mu);
	def_wait_empty();
	long long t = device_busy_until();
	pthread_mutex_unlock(&g_mu);
	now = now_ns();
	return t > now ? t : now;
}

CU_API int argus_sim_gpu_kernel(void *stream, const char *name, long long start_ns,
				long long end_ns, unsigned flags)
{
	if (!initialized() || start_ns < 0 || end_ns < start_ns)
		return -1;
	pthread_mutex_lock(&g_mu);
	struct stream *s = stream_get((CUstream)stream);
	if (!s) {
		pthread_mutex_unlock(&g_mu);
		return -1;
	}
	run_external((size_t)(s - g_streams), name && *name ? name_id_for(name) : 0, start_ns, end_ns, flags);
	pthread_mutex_unlock(&g_mu);
	return 0;
}

CU_API int argus_sim_gpu_external(void *stream, const char *name, unsigned flags,
				  argus_sim_gpu_resolve_fn resolve, void *ctx)
{
	if (!initialized() || !resolve)
		return -1;
	pthread_mutex_lock(&g_mu);
	struct stream *s = stream_get((CUstream)stream);
	if (!s || !gpu_thread_start()) {
		pthread_mutex_unlock(&g_mu);
		return -1;
	}
	def_wait_room();
	struct deferred *d = def_tail();
	memset(d, 0, sizeof *d);
	d->type = DEF_EXTERNAL;
	d->issued = now_ns();
	d->stream = (size_t)(s - g_streams);
	d->name_id = name && *name ? name_id_for(name) : 0;
	d->flags = flags;
	d->resolve = resolve;
	d->ctx = ctx;
	g_def_n++;
	pthread_cond_broadcast(&g_def_cv);
	pthread_mutex_unlock(&g_mu);
	return 0;
}

/* The truth's collective log (sim_gpu.h): a ring of the newest entries. */
static pthread_mutex_t g_coll_mu = PTHREAD_MUTEX_INITIALIZER;
static struct argus_sim_coll_rec *g_coll;
static size_t g_coll_next; /* entries ever added */
#define COLL_UPDATE_LOOKBACK 4096u

CU_API void argus_sim_coll_note(uint64_t comm, uint64_t seq, long long call_ns, long long gpu_start_ns,
				long long gpu_end_ns)
{
	pthread_mutex_lock(&g_coll_mu);
	if (!g_coll)
		g_coll = calloc(ARGUS_SIM_COLL_LOG_MAX, sizeof *g_coll);
	if (!g_coll) {
		pthread_mutex_unlock(&g_coll_mu);
		return;
	}
	if (call_ns != 0) {
		struct argus_sim_coll_rec *e = &g_coll[g_coll_next++ % ARGUS_SIM_COLL_LOG_MAX];
		e->comm = comm;
		e->seq = seq;
		e->call_ns = call_ns;
		e->gpu_start_ns = gpu_start_ns;
		e->gpu_end_ns = gpu_end_ns;
	} else {
		size_t kept = g_coll_next < ARGUS_SIM_COLL_LOG_MAX ? g_coll_next : ARGUS_SIM_COLL_LOG_MAX;
		size_t look = kept < COLL_UPDATE_LOOKBACK ? kept : COLL_UPDATE_LOOKBACK;
		for (size_t k = 1; k <= look; k++) {
			struct argus_sim_coll_rec *e = &g_coll[(g_coll_next - k) % ARGUS_SIM_COLL_LOG_MAX];
			if (e->comm == comm && e->seq == seq) {
				e->gpu_start_ns = gpu_start_ns;
				e->gpu_end_ns = gpu_end_ns;
				break;
			}
		}
	}
	pthread_mutex_unlock(&g_coll_mu);
}

CU_API int argus_sim_coll_log(struct argus_sim_coll_rec *out, int max)
{
	if (!out || max <= 0)
		return 0;
	pthread_mutex_lock(&g_coll_mu);
	size_t kept = g_coll_next < ARGUS_SIM_COLL_LOG_MAX ? g_coll_next : ARGUS_SIM_COLL_LOG_MAX;
	if ((size_t)max < kept)
		kept = (size_t)max;
	for (size_t k = 0; k < kept; k++)
		out[k] = g_coll[(g_coll_next - kept + k) % ARGUS_SIM_COLL_LOG_MAX];
	pthread_mutex_unlock(&g_coll_mu);
	return (int)kept;
}

CU_API void argus_sim_gpu_flush_all(void)
{
	for (int round = 0; round < 1000; round++) {
		pthread_mutex_lock(&g_mu);
		def_wait_empty();
		long long until = device_busy_until();
		for (size_t i = 0; i < g_npending; i++)
			if ((long long)g_pending[i].end_ns > until)
				until = (long long)g_pending[i].end_ns;
		int idle = g_npending == 0 && g_dropped_unreported == 0;
		if (idle && g_fold == 1)
			argus_fold_flush(g_folder); /* the end: the open span too, whatever its age */
		pthread_mutex_unlock(&g_mu);
		if (idle)
			return;
		sleep_until(until);
		pthread_mutex_lock(&g_mu);
		flush_completed(now_ns());
		pthread_mutex_unlock(&g_mu);
	}
}

CU_API int argus_sim_gpu_totals(struct argus_sim_gpu_totals *out, size_t size)
{
	if (!out)
		return -1;
	pthread_mutex_lock(&g_mu);
	memcpy(out, &g_totals, size < sizeof g_totals ? size : sizeof g_totals);
	pthread_mutex_unlock(&g_mu);
	return 0;
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

static const char *describe(CUresult e)
{
	switch (e) {
	case 0:
		return "no error";
	case 1:
		return "invalid argument";
	case 2:
		return "out of memory";
	case 3:
		return "initialization error (cuInit has not been called)";
	case 4:
		return "driver shutting down";
	case 100:
		return "no CUDA-capable device is detected";
	case 101:
		return "invalid device ordinal";
	case 200:
		return "device kernel image is invalid";
	case 201:
		return "invalid device context";
	case 400:
		return "invalid resource handle";
	case 500:
		return "named symbol not found";
	case 600:
		return "device not ready";
	case 700:
		return "an illegal memory access was encountered";
	case 719:
		return "unspecified launch failure";
	case 999:
		return "unknown error";
	default:
		return argus_cuda_result_name(e);
	}
}

CU_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = argus_cuda_result_name(error) ? describe(error) : NULL;
	return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CU_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = argus_cuda_result_name(error);
	return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
