/* libnccl.so.2 shim for the simulated training job.
 *
 * Exports the real NCCL 2.28 API names with the real C signatures and the real
 * symbol shape: every function is a strong (GLOBAL) `pncclX` and a WEAK `ncclX`
 * alias at the same address. Nothing else is exported (-fvisibility=hidden).
 *
 * No exported function calls another exported function: they all go through
 * static helpers, so an eBPF uprobe on one API address fires exactly once per
 * application call.
 *
 * A communicator is a POSIX shared-memory segment named after the unique id
 * (sim_shm.h). Collectives and groups are cross-process barriers over it; every
 * wait sleeps on a futex in 100 ms slices, checking the segment's abort flag,
 * and gives up after ARGUS_SIM_NCCL_TIMEOUT_S (default 600 s). Buffers are
 * never touched: they are (fake) device pointers.
 *
 * The emulated GPU: when the process has the simulator's libcuda.so.1 loaded
 * (found once by dlopen(RTLD_NOLOAD) + dlsym of its private functions,
 * sim_gpu.h; absent with a real libcuda or none: no GPU emulation), every
 * collective outside a group, every group (at ncclGroupEnd) and every eager
 * Send/Recv outside a group puts an NCCL kernel on the call's stream. For the
 * barrier-synchronised ones, each rank publishes when its GPU is ready
 * (ready_r) in the segment before the barrier; after it the kernel runs
 * [ready_r, E] with E = max over ranks of ready + transfer time (bytes at
 * 100 GB/s + 10 us): the peers of a rank whose GPU is late run long NCCL
 * kernels (they wait for it) while its own is short. An eager send runs
 * [ready, ready + transfer]; an eager receive starts
 * ARGUS_SIM_PP_RECV_DELAY_US (read once, default 0) after the GPU is ready and
 * lasts the transfer time. */
#define _GNU_SOURCE
#include "sim_shm.h"
#include "sim_gpu.h"

#include <argus_gpu_wire.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/random.h>

/* ---- minimal NCCL types (values as in nccl.h of NCCL 2.28) ---- */

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclNumResults = 8
} ncclResult_t;

typedef enum {
	ncclInt8 = 0,
	ncclChar = 0,
	ncclUint8 = 1,
	ncclInt32 = 2,
	ncclInt = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6,
	ncclHalf = 6,
	ncclFloat32 = 7,
	ncclFloat = 7,
	ncclFloat64 = 8,
	ncclDouble = 8,
	ncclBfloat16 = 9,
	ncclFloat8e4m3 = 10,
	ncclFloat8e5m2 = 11,
	ncclNumTypes = 12
} ncclDataType_t;

typedef enum {
	ncclSum = 0,
	ncclProd = 1,
	ncclMax = 2,
	ncclMin = 3,
	ncclAvg = 4,
	ncclNumOps = 5,
	ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ncclComm *ncclComm_t;
typedef struct ncclConfig_v22800 ncclConfig_t; /* opaque here: never dereferenced */
typedef struct CUstream_st *cudaStream_t;

#define SIM_NCCL_VERSION_CODE 22809 /* 2.28.9 */

#define NCCL_API __attribute__((visibility("default")))
/* The weak public name, an alias of the strong p-name (same address). */
#define NCCL_ALIAS(fn) \
	extern __typeof(p##fn) fn __attribute__((weak, alias("p" #fn), visibility("default")));

/* ---- communicator objects ---- */

#define COMM_MAGIC 0x4e43434cu /* "NCCL" */
#define WAIT_SLICE_NS 100000000L /* 100 ms */

struct ncclComm {
	uint32_t magic;
	int rank;
	int nranks;
	int local;   /* made by ncclCommInitAll: all ranks in this process, no segment */
	int cu_device;
	long long timeout_ns;
	struct argus_sim_shm *shm;
	char shm_name[ARGUS_SIM_SHM_NAME_MAX];
	uint32_t *p2p_received; /* [src]: eager sends from src already received */
	/* Async mode (ARGUS_SIM_NCCL_MODE=async): operations queued on the emulated
	 * GPU and not resolved yet, and the first error one of them met (returned
	 * by the next call, as ncclCommGetAsyncError surfaces it). */
	uint32_t inflight;
	int async_error;
	uint64_t coll_seq; /* collective calls so far (the truth's numbering) */
};

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm **g_live;
static size_t g_nlive, g_caplive;

static __thread char g_last_error[256];

static void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
	va_end(ap);
}

static int reg_add(struct ncclComm *c)
{
	int ok = 1;
	pthread_mutex_lock(&g_reg_mu);
	if (g_nlive == g_caplive) {
		size_t cap = g_caplive ? g_caplive * 2 : 16;
		struct ncclComm **n = realloc(g_live, cap * sizeof *n);
		if (n) {
			g_live = n;
			g_caplive = cap;
		} else {
			ok = 0;
		}
	}
	if (ok)
		g_live[g_nlive++] = c;
	pthread_mutex_unlock(&g_reg_mu);
	return ok;
}

/* Removes c; returns 1 if it was live. */
static int reg_remove(struct ncclComm *c)
{
	int found = 0;
	pthread_mutex_lock(&g_reg_mu);
	for (size_t i = 0; i < g_nlive; i++) {
		if (g_live[i] == c) {
			g_live[i] = g_live[--g_nlive];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&g_reg_mu);
	return found;
}

/* The communicator behind a handle, or NULL for NULL/unknown/destroyed handles
 * (never dereferences an unknown pointer). */
static struct ncclComm *comm_get(ncclComm_t h)
{
	struct ncclComm *found = NULL;
	if (!h)
		return NULL;
	pthread_mutex_lock(&g_reg_mu);
	for (size_t i = 0; i < g_nlive; i++) {
		if (g_live[i] == h) {
			found = h;
			break;
		}
	}
	pthread_mutex_unlock(&g_reg_mu);
	if (found && found->magic != COMM_MAGIC)
		found = NULL;
	return found;
}

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- the emulated GPU of the simulator's libcuda.so.1 (sim_gpu.h) ---- */

#define GPU_BYTES_PER_NS 100ull  /* 100 GB/s */
#define GPU_LATENCY_NS 10000LL   /* 10 us */
#define GPU_MAX_RECV_DELAY_US (3600ull * 1000000ull)

static pthread_once_t g_gpu_once = PTHREAD_ONCE_INIT;
static argus_sim_gpu_ready_ns_fn g_gpu_ready;
static argus_sim_gpu_kernel_fn g_gpu_kernel;
static argus_sim_gpu_external_fn g_gpu_external;
static argus_sim_coll_note_fn g_coll_note;
static int g_async_mode = 1; /* ARGUS_SIM_NCCL_MODE: async unless "blocking" */
static long long g_recv_delay_ns;

static void gpu_find(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
	if (h) {
		void *ready = dlsym(h, "argus_sim_gpu_ready_ns");
		void *kernel = dlsym(h, "argus_sim_gpu_kernel");
		void *external = dlsym(h, "argus_sim_gpu_external");
		if (ready && kernel) {
			*(void **)&g_gpu_ready = ready;
			*(void **)&g_gpu_kernel = kernel;
			*(void **)&g_gpu_external = external;
			*(void **)&g_coll_note = dlsym(h, "argus_sim_coll_note");
		} else {
			dlclose(h); /* a real libcuda: no emulated timeline */
		}
	}
	const char *mode = getenv(ARGUS_SIM_NCCL_MODE_ENV);
	if (mode && strcmp(mode, "blocking") == 0)
		g_async_mode = 0;
	const char *v = getenv(ARGUS_SIM_PP_RECV_DELAY_ENV);
	if (v && *v) {
		char *end = NULL;
		unsigned long long us = strtoull(v, &end, 10);
		if (end && *end == '\0' && us <= GPU_MAX_RECV_DELAY_US)
			g_recv_delay_ns = (long long)us * 1000LL;
	}
}

static int gpu_on(void)
{
	pthread_once(&g_gpu_once, gpu_find);
	return g_gpu_kernel != NULL;
}

static long long now_ns(void);

/* Real NCCL's semantics: a call only enqueues its kernel on the (emulated) GPU. */
static int async_on(void)
{
	return gpu_on() && g_gpu_external != NULL && g_async_mode;
}

/* When this process's GPU could start an NCCL kernel: max(GPU idle, now). */
static long long gpu_ready_at(void)
{
	long long now = now_ns();
	if (!gpu_on())
		return now;
	long long t = g_gpu_ready();
	return t > now ? t : now;
}

static long long transfer_ns(unsigned long long bytes)
{
	return (long long)(bytes / GPU_BYTES_PER_NS) + GPU_LATENCY_NS;
}

static void gpu_kernel(cudaStream_t stream, const char *name, long long start, long long end,
		       unsigned flags)
{
	if (gpu_on())
		g_gpu_kernel((void *)stream, name, start, end, flags);
}

static long long env_timeout_ns(void)
{
	const char *v = getenv("ARGUS_SIM_NCCL_TIMEOUT_S");
	if (v && *v) {
		char *end = NULL;
		double s = strtod(v, &end);
		if (end && *end == '\0' && s > 0 && s < 1e9)
			return (long long)(s * 1e9);
	}
	return 600LL * 1000000000LL;
}

static int env_local_rank(void)
{
	const char *v = getenv("LOCAL_RANK");
	if (v && *v) {
		char *end = NULL;
		long r = strtol(v, &end, 10);
		if (end && *end == '\0' && r >= 0 && r < 1 << 20)
			return (int)r;
	}
	return 0;
}

static ncclResult_t aborted_error(struct ncclComm *c)
{
	uint32_t reason = argus_sim_load(&c->shm->abort_reason);
	if (reason == ARGUS_SIM_ABORT_NONE)
		return ncclSuccess;
	switch (reason) {
	case ARGUS_SIM_ABORT_SHUTDOWN:
		set_error("communicator aborted: the job is shutting down");
		break;
	case ARGUS_SIM_ABORT_RANK_FAILED:
		set_error("communicator aborted: a peer rank exited");
		break;
	default:
		set_error("communicator aborted by rank %d (ncclCommAbort)",
			  (int)__atomic_load_n(&c->shm->abort_rank, __ATOMIC_ACQUIRE));
		break;
	}
	return ncclRemoteError;
}

/* Sleep until *word != seen (or a 100 ms slice ends). Returns an error when the
 * communicator is aborted or the deadline has passed, else ncclSuccess (the
 * caller re-checks its condition). */
static ncclResult_t wait_slice(struct ncclComm *c, uint32_t *word, uint32_t seen,
			       long long deadline, const char *what)
{
	ncclResult_t r = aborted_error(c);
	if (r != ncclSuccess)
		return r;
	long long left = deadline - now_ns();
	if (left <= 0) {
		set_error("timed out waiting in %s for peer ranks (ARGUS_SIM_NCCL_TIMEOUT_S)", what);
		return ncclSystemError;
	}
	argus_sim_futex_wait(word, seen, left < WAIT_SLICE_NS ? (long)left : WAIT_SLICE_NS);
	return ncclSuccess;
}

/* Cross-process barrier over every rank of the communicator. All ranks call
 * collectives (and groups) in the same order, so one generation counter does.
 * Each rank brings `ready` (when its GPU can run the collective's kernel) and
 * leaves with the latest `ready` of all ranks in *all_ready. */
static ncclResult_t comm_barrier(struct ncclComm *c, const char *what, long long ready,
				 long long *all_ready)
{
	*all_ready = ready;
	if (c->local || c->nranks == 1)
		return ncclSuccess;
	struct argus_sim_shm *s = c->shm;
	ncclResult_t r = aborted_error(c);
	if (r != ncclSuccess)
		return r;
	/* bar_gen cannot move past `gen` before this rank arrives. */
	uint32_t gen = argus_sim_load(&s->bar_gen);
	__atomic_store_n(&s->gpu_ready[gen & 1u][c->rank], (uint64_t)ready, __ATOMIC_RELEASE);
	uint32_t n = __atomic_add_fetch(&s->bar_count, 1u, __ATOMIC_ACQ_REL);
	if (n >= (uint32_t)c->nranks) {
		argus_sim_store(&s->bar_count, 0);
		__atomic_add_fetch(&s->bar_gen, 1u, __ATOMIC_ACQ_REL);
		argus_sim_futex_wake(&s->bar_gen);
	} else {
		long long deadline = now_ns() + c->timeout_ns;
		while (argus_sim_load(&s->bar_gen) == gen) {
			r = wait_slice(c, &s->bar_gen, gen, deadline, what);
			if (r != ncclSuccess)
				return r;
		}
	}
	for (int i = 0; i < c->nranks; i++) {
		long long t = (long long)__atomic_load_n(&s->gpu_ready[gen & 1u][i], __ATOMIC_ACQUIRE);
		if (t > *all_ready)
			*all_ready = t;
	}
	__atomic_add_fetch(&s->rank_colls[c->rank], 1u, __ATOMIC_RELAXED);
	return ncclSuccess;
}

/* ---- the truth's collective log (kept by the simulator's libcuda) ---- */

/* A new collective call: its number (as the agent's BPF counts them) and call time. */
static uint64_t log_call(struct ncclComm *c, long long call_ns)
{
	uint64_t seq = __atomic_add_fetch(&c->coll_seq, 1u, __ATOMIC_ACQ_REL);
	if (gpu_on() && g_coll_note)
		g_coll_note((uint64_t)(uintptr_t)c, seq, call_ns, 0, 0);
	return seq;
}

/* The GPU times of collectives first..last (one kernel: a group, or one call). */
static void log_gpu(struct ncclComm *c, uint64_t first, uint64_t last, long long start, long long end)
{
	if (first == 0 || !gpu_on() || !g_coll_note)
		return;
	for (uint64_t q = first; q <= last; q++)
		g_coll_note((uint64_t)(uintptr_t)c, q, 0, start, end);
}

/* ---- async mode: operations resolved by the emulated GPU's thread ---- */

enum { AOP_COLL = 0, AOP_SEND = 1, AOP_RECV = 2 };

struct async_op {
	struct ncclComm *c;
	const char *api;
	int kind;
	int peer;
	unsigned long long bytes;
	uint64_t seq_first, seq_last; /* collectives this kernel runs (0: none) */
};

static ncclResult_t wait_p2p_posted(struct ncclComm *c, int peer, const char *api);

static void async_fail(struct ncclComm *c, ncclResult_t r)
{
	int none = ncclSuccess;
	__atomic_compare_exchange_n(&c->async_error, &none, (int)r, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* Runs on the emulated GPU's thread, in issue order. A collective's kernel
 * starts when this GPU is ready and ends once every rank's GPU has reached it
 * (the barrier publishes each rank's ready time), plus the transfer. */
static int resolve_async(void *ctx, long long ready, long long *start, long long *end)
{
	struct async_op *op = ctx;
	struct ncclComm *c = op->c;
	int rc = -1;
	ncclResult_t r = ncclSuccess;
	if (op->kind == AOP_COLL) {
		long long all_ready = ready;
		r = comm_barrier(c, op->api, ready, &all_ready);
		if (r == ncclSuccess) {
			*start = ready;
			*end = all_ready + transfer_ns(op->bytes);
			log_gpu(c, op->seq_first, op->seq_last, *start, *end);
			rc = 0;
		}
	} else if (op->kind == AOP_SEND) {
		*start = ready;
		*end = ready + transfer_ns(op->bytes);
		rc = 0;
	} else {
		r = wait_p2p_posted(c, op->peer, op->api);
		if (r == ncclSuccess) {
			long long now = now_ns();
			*start = (ready > now ? ready : now) + g_recv_delay_ns;
			*end = *start + transfer_ns(op->bytes);
			rc = 0;
		}
	}
	if (r != ncclSuccess)
		async_fail(c, r);
	__atomic_sub_fetch(&c->inflight, 1u, __ATOMIC_ACQ_REL);
	free(op);
	return rc;
}

/* Queues an operation on the emulated GPU; the call returns at once. */
static ncclResult_t enqueue_async(struct ncclComm *c, cudaStream_t stream, const char *api, int kind,
				  int peer, unsigned long long bytes, const char *kname, unsigned flags,
				  uint64_t seq_first, uint64_t seq_last)
{
	struct async_op *op = calloc(1, sizeof *op);
	if (!op) {
		set_error("%s: out of host memory", api);
		return ncclSystemError;
	}
	op->c = c;
	op->api = api;
	op->kind = kind;
	op->peer = peer;
	op->bytes = bytes;
	op->seq_first = seq_first;
	op->seq_last = seq_last;
	__atomic_add_fetch(&c->inflight, 1u, __ATOMIC_ACQ_REL);
	if (g_gpu_external((void *)stream, kname, flags, resolve_async, op) != 0) {
		__atomic_sub_fetch(&c->inflight, 1u, __ATOMIC_ACQ_REL);
		free(op);
		set_error("%s: invalid stream %p", api, (void *)stream);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

/* An error an earlier asynchronous operation met, returned by the next call. */
static ncclResult_t async_error(struct ncclComm *c)
{
	int r = __atomic_load_n(&c->async_error, __ATOMIC_ACQUIRE);
	if (r != ncclSuccess)
		set_error("an earlier operation on this communicator failed (asynchronous error)");
	return (ncclResult_t)r;
}

/* ncclCommDestroy waits for the communicator's queued operations (an abort
 * releases them first); bounded by the communicator's timeout. */
static void wait_inflight(struct ncclComm *c)
{
	long long deadline = now_ns() + c->timeout_ns + 1000000000LL;
	while (__atomic_load_n(&c->inflight, __ATOMIC_ACQUIRE) > 0 && now_ns() < deadline) {
		struct timespec ts = {0, 1000000L};
		nanosleep(&ts, NULL);
	}
}

static void comm_detach(struct ncclComm *c)
{
	if (c->shm) {
		struct argus_sim_shm *s = c->shm;
		uint32_t left = __atomic_sub_fetch(&s->attached, 1u, __ATOMIC_ACQ_REL);
		int self_owned = s->owner_external == 0;
		argus_sim_shm_close(s);
		c->shm = NULL;
		if (left == 0 && self_owned)
			shm_unlink(c->shm_name);
	}
	free(c->p2p_received);
	c->p2p_received = NULL;
	c->magic = 0;
	free(c);
}

/* ---- group state (per thread, as in NCCL) ---- */

#define MAX_GROUP_COMMS 64
#define KERNEL_NAME_MAX 64
#define SENDRECV_KERNEL "ncclDevKernel_SendRecv"

/* A communicator touched by the open group: its one kernel at ncclGroupEnd runs
 * on the stream of the comm's first operation, for all of its bytes; named after
 * the first collective in it, else SendRecv (point-to-point only). */
struct group_entry {
	struct ncclComm *comm;
	cudaStream_t stream;
	unsigned long long bytes;
	uint64_t seq_first, seq_last; /* collective calls in it (0: none) */
	char kernel[KERNEL_NAME_MAX]; /* "" = point-to-point only */
};

static __thread int g_group_depth;
static __thread struct group_entry g_group[MAX_GROUP_COMMS];
static __thread int g_group_ncomms;

static ncclResult_t group_add(struct ncclComm *c, cudaStream_t stream, unsigned long long bytes,
			      const char *kernel, uint64_t seq)
{
	for (int i = 0; i < g_group_ncomms; i++) {
		if (g_group[i].comm == c) {
			g_group[i].bytes += bytes;
			if (seq) {
				if (!g_group[i].seq_first)
					g_group[i].seq_first = seq;
				g_group[i].seq_last = seq;
			}
			if (kernel && !g_group[i].kernel[0])
				snprintf(g_group[i].kernel, sizeof g_group[i].kernel, "%s", kernel);
			return ncclSuccess;
		}
	}
	if (g_group_ncomms == MAX_GROUP_COMMS) {
		set_error("too many communicators in one group (max %d)", MAX_GROUP_COMMS);
		return ncclInvalidUsage;
	}
	struct group_entry *e = &g_group[g_group_ncomms++];
	e->comm = c;
	e->stream = stream;
	e->bytes = bytes;
	e->seq_first = e->seq_last = seq;
	snprintf(e->kernel, sizeof e->kernel, "%s", kernel ? kernel : "");
	return ncclSuccess;
}

/* ---- argument checks ---- */

static int dtype_ok(ncclDataType_t t)
{
	return (int)t >= 0 && (int)t < (int)ncclNumTypes;
}

static int redop_ok(ncclRedOp_t op)
{
	return (int)op >= 0 && (int)op < (int)ncclNumOps;
}

static unsigned long long dtype_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
	case ncclFloat8e4m3:
	case ncclFloat8e5m2:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	default:
		return 8;
	}
}

/* NCCL's device-kernel name of a collective: "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
 * "ncclDevKernel_AllGather_RING_LL", ...; `coll` NULL = point-to-point (SendRecv). */
static void kernel_name(char out[KERNEL_NAME_MAX], const char *coll, int redop, ncclDataType_t dt)
{
	static const char *const ops[] = {"Sum", "Prod", "Max", "Min", "Avg"};
	static const char *const types[] = {"i8",  "u8",  "i32", "u32",    "i64",   "u64",
					    "f16", "f32", "f64", "bf16", "f8e4m3", "f8e5m2"};
	if (!coll)
		snprintf(out, KERNEL_NAME_MAX, "%s", SENDRECV_KERNEL);
	else if (redop >= 0 && redop < (int)ncclNumOps && dtype_ok(dt))
		snprintf(out, KERNEL_NAME_MAX, "ncclDevKernel_%s_%s_%s_RING_LL", coll, ops[redop],
			 types[(int)dt]);
	else
		snprintf(out, KERNEL_NAME_MAX, "ncclDevKernel_%s_RING_LL", coll);
}

static ncclResult_t check_comm(ncclComm_t comm, struct ncclComm **out, const char *api)
{
	*out = comm_get(comm);
	if (!*out) {
		set_error("%s: invalid communicator %p", api, (void *)comm);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

enum { NO_ROOT = -1, NO_REDOP = -1 };

/* Common path of every collective. `coll` names its device kernel (NULL: one
 * NCCL builds from point-to-point operations, as Gather/Scatter). */
static ncclResult_t collective(const char *api, const char *coll, const void *sendbuff,
			      const void *recvbuff, size_t count, ncclDataType_t dt, int redop,
			      int root, ncclComm_t comm, cudaStream_t stream)
{
	const long long call_ns = now_ns();
	struct ncclComm *c;
	ncclResult_t r = check_comm(comm, &c, api);
	if (r != ncclSuccess)
		return r;
	if (!dtype_ok(dt)) {
		set_error("%s: invalid datatype %d", api, (int)dt);
		return ncclInvalidArgument;
	}
	if (redop != NO_REDOP && !redop_ok((ncclRedOp_t)redop)) {
		set_error("%s: invalid reduction op %d", api, redop);
		return ncclInvalidArgument;
	}
	if (root != NO_ROOT && (root < 0 || root >= c->nranks)) {
		set_error("%s: invalid root %d (nranks %d)", api, root, c->nranks);
		return ncclInvalidArgument;
	}
	if (count > 0 && sendbuff == NULL && recvbuff == NULL) {
		set_error("%s: NULL buffers with count %zu", api, count);
		return ncclInvalidArgument;
	}
	const unsigned long long bytes = (unsigned long long)count * dtype_size(dt);
	char kname[KERNEL_NAME_MAX];
	kernel_name(kname, coll, redop, dt);
	if ((r = async_error(c)) != ncclSuccess)
		return r;
	const uint64_t seq = log_call(c, call_ns);
	if (g_group_depth > 0)
		return group_add(c, stream, bytes, kname, seq);
	const unsigned flags = ARGUS_GPU_F_NCCL | (coll ? 0u : ARGUS_GPU_F_P2P);
	if (async_on() && !c->local)
		return enqueue_async(c, stream, api, AOP_COLL, -1, bytes, kname, flags, seq, seq);
	/* Blocking (Gloo-like): the call returns once every rank has called it. */
	const long long ready = gpu_ready_at();
	long long all_ready = ready;
	r = comm_barrier(c, api, ready, &all_ready);
	if (r == ncclSuccess) {
		gpu_kernel(stream, kname, ready, all_ready + transfer_ns(bytes), flags);
		log_gpu(c, seq, seq, ready, all_ready + transfer_ns(bytes));
	}
	return r;
}

static ncclResult_t p2p(const char *api, int is_send, const void *buff, size_t count,
			ncclDataType_t dt, int peer, ncclComm_t comm, cudaStream_t stream)
{
	struct ncclComm *c;
	ncclResult_t r = check_comm(comm, &c, api);
	if (r != ncclSuccess)
		return r;
	if (!dtype_ok(dt)) {
		set_error("%s: invalid datatype %d", api, (int)dt);
		return ncclInvalidArgument;
	}
	if (peer < 0 || peer >= c->nranks) {
		set_error("%s: invalid peer %d (nranks %d)", api, peer, c->nranks);
		return ncclInvalidArgument;
	}
	if (count > 0 && buff == NULL) {
		set_error("%s: NULL buffer with count %zu", api, count);
		return ncclInvalidArgument;
	}
	const unsigned long long bytes = (unsigned long long)count * dtype_size(dt);
	if (g_group_depth > 0)
		return group_add(c, stream, bytes, NULL, 0);
	if (c->local)
		return ncclSuccess;
	struct argus_sim_shm *s = c->shm;
	r = aborted_error(c);
	if (r == ncclSuccess)
		r = async_error(c);
	if (r != ncclSuccess)
		return r;
	const unsigned flags = ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | (is_send ? ARGUS_GPU_F_SEND : ARGUS_GPU_F_RECV);
	if (is_send) {
		/* Eager send: post to the peer's mailbox and return. */
		__atomic_add_fetch(&s->p2p_posted[(size_t)peer * ARGUS_SIM_MAX_RANKS + c->rank], 1u,
				   __ATOMIC_ACQ_REL);
		__atomic_add_fetch(&s->p2p_bell[peer], 1u, __ATOMIC_ACQ_REL);
		argus_sim_futex_wake(&s->p2p_bell[peer]);
		if (async_on())
			return enqueue_async(c, stream, api, AOP_SEND, peer, bytes, SENDRECV_KERNEL, flags, 0, 0);
		const long long start = gpu_ready_at();
		gpu_kernel(stream, SENDRECV_KERNEL, start, start + transfer_ns(bytes), flags);
		return ncclSuccess;
	}
	/* Async: the receive kernel waits for the data on the GPU, not the host. */
	if (async_on())
		return enqueue_async(c, stream, api, AOP_RECV, peer, bytes, SENDRECV_KERNEL, flags, 0, 0);
	/* Receive: wait until the peer has posted one more send to us. */
	r = wait_p2p_posted(c, peer, api);
	if (r != ncclSuccess)
		return r;
	/* The receive kernel starts the rank's receive delay after the GPU is ready
	 * (a pipeline stage waiting for its input) and lasts the transfer. */
	const long long start = gpu_ready_at() + (gpu_on() ? g_recv_delay_ns : 0);
	gpu_kernel(stream, SENDRECV_KERNEL, start, start + transfer_ns(bytes), flags);
	return ncclSuccess;
}

/* Waits until `peer` has posted one more eager send to this rank, and takes it. */
static ncclResult_t wait_p2p_posted(struct ncclComm *c, int peer, const char *api)
{
	struct argus_sim_shm *s = c->shm;
	uint32_t *posted = &s->p2p_posted[(size_t)c->rank * ARGUS_SIM_MAX_RANKS + peer];
	uint32_t *bell = &s->p2p_bell[c->rank];
	long long deadline = now_ns() + c->timeout_ns;
	for (;;) {
		uint32_t ring = argus_sim_load(bell);
		if (argus_sim_load(posted) != c->p2p_received[peer])
			break;
		ncclResult_t r = wait_slice(c, bell, ring, deadline, api);
		if (r != ncclSuccess)
			return r;
	}
	c->p2p_received[peer]++;
	return ncclSuccess;
}

/* ---- init / destroy ---- */

static ncclResult_t init_rank(const char *api, ncclComm_t *out, int nranks, const ncclUniqueId *id,
			      int rank)
{
	if (!out) {
		set_error("%s: NULL comm pointer", api);
		return ncclInvalidArgument;
	}
	*out = NULL;
	if (nranks < 1 || nranks > ARGUS_SIM_MAX_RANKS) {
		set_error("%s: invalid nranks %d (1..%d)", api, nranks, ARGUS_SIM_MAX_RANKS);
		return ncclInvalidArgument;
	}
	if (rank < 0 || rank >= nranks) {
		set_error("%s: invalid rank %d (nranks %d)", api, rank, nranks);
		return ncclInvalidArgument;
	}
	struct ncclComm *c = calloc(1, sizeof *c);
	uint32_t *rec = calloc((size_t)nranks, sizeof *rec);
	if (!c || !rec) {
		free(c);
		free(rec);
		set_error("%s: out of host memory", api);
		return ncclSystemError;
	}
	c->magic = COMM_MAGIC;
	c->rank = rank;
	c->nranks = nranks;
	c->cu_device = env_local_rank();
	c->timeout_ns = env_timeout_ns();
	c->p2p_received = rec;
	argus_sim_shm_name(id->internal, c->shm_name);

	int created = 0;
	struct argus_sim_shm *s =
		argus_sim_shm_open(c->shm_name, (uint32_t)nranks, 0, &created, (long)c->timeout_ns);
	if (!s) {
		set_error("%s: cannot open shared memory %s: %s", api, c->shm_name, strerror(errno));
		free(rec);
		free(c);
		return ncclSystemError;
	}
	c->shm = s;
	__atomic_add_fetch(&s->attached, 1u, __ATOMIC_ACQ_REL);
	ncclResult_t r = ncclSuccess;
	if (s->nranks != (uint32_t)nranks) {
		set_error("%s: nranks %d does not match the communicator's %u", api, nranks, s->nranks);
		r = ncclInvalidUsage;
		goto fail;
	}
	r = aborted_error(c);
	if (r != ncclSuccess)
		goto fail;
	uint32_t expect = 0;
	if (!__atomic_compare_exchange_n(&s->rank_joined[rank], &expect, 1u, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE)) {
		set_error("%s: rank %d has already joined this communicator", api, rank);
		r = ncclInvalidUsage;
		goto fail;
	}
	__atomic_store_n(&s->rank_pid[rank], (int32_t)getpid(), __ATOMIC_RELEASE);
	__atomic_add_fetch(&s->joined, 1u, __ATOMIC_ACQ_REL);
	argus_sim_futex_wake(&s->joined);
	/* Like real NCCL, init returns only once every rank has joined. */
	long long deadline = now_ns() + c->timeout_ns;
	uint32_t j;
	while ((j = argus_sim_load(&s->joined)) < (uint32_t)nranks) {
		r = wait_slice(c, &s->joined, j, deadline, api);
		if (r != ncclSuccess)
			goto fail;
	}
	if (!reg_add(c)) {
		set_error("%s: out of host memory", api);
		r = ncclSystemError;
		goto fail;
	}
	*out = c;
	return ncclSuccess;
fail:
	comm_detach(c);
	return r;
}

static ncclResult_t destroy_comm(const char *api, ncclComm_t comm, int abort_it)
{
	struct ncclComm *c = comm_get(comm);
	if (!c || !reg_remove(c)) {
		set_error("%s: invalid communicator %p", api, (void *)comm);
		return ncclInvalidArgument;
	}
	for (int i = 0; i < g_group_ncomms; i++) {
		if (g_group[i].comm == c) {
			g_group[i] = g_group[--g_group_ncomms];
			break;
		}
	}
	if (abort_it && c->shm)
		argus_sim_shm_abort(c->shm, ARGUS_SIM_ABORT_COMM_ABORT, c->rank);
	wait_inflight(c);
	comm_detach(c);
	return ncclSuccess;
}

/* ======================= exported API ======================= */

NCCL_API ncclResult_t pncclGetVersion(int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = SIM_NCCL_VERSION_CODE;
	return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion)

NCCL_API ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
	if (!uniqueId) {
		set_error("ncclGetUniqueId: NULL uniqueId");
		return ncclInvalidArgument;
	}
	size_t got = 0;
	while (got < sizeof uniqueId->internal) {
		ssize_t n = getrandom(uniqueId->internal + got, sizeof uniqueId->internal - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += (size_t)n;
	}
	if (got < sizeof uniqueId->internal) {
		/* no entropy source: fall back to time and pid */
		unsigned long long x = (unsigned long long)now_ns() ^ ((unsigned long long)getpid() << 32);
		for (size_t i = got; i < sizeof uniqueId->internal; i++) {
			x = x * 6364136223846793005ULL + 1442695040888963407ULL;
			uniqueId->internal[i] = (char)(x >> 56);
		}
	}
	return ncclSuccess;
}
NCCL_ALIAS(ncclGetUniqueId)

NCCL_API const char *pncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error";
	case ncclSystemError:
		return "unhandled system error (a call failed or timed out)";
	case ncclInternalError:
		return "internal error";
	case ncclInvalidArgument:
		return "invalid argument";
	case ncclInvalidUsage:
		return "invalid usage";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}
NCCL_ALIAS(ncclGetErrorString)

NCCL_API const char *pncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return g_last_error;
}
NCCL_ALIAS(ncclGetLastError)

NCCL_API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return init_rank("ncclCommInitRank", comm, nranks, &commId, rank);
}
NCCL_ALIAS(ncclCommInitRank)

NCCL_API ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
					      int rank, ncclConfig_t *config)
{
	(void)config;
	return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank);
}
NCCL_ALIAS(ncclCommInitRankConfig)

NCCL_API ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
						ncclUniqueId *commIds, ncclConfig_t *config)
{
	(void)config;
	if (nId < 1 || !commIds) {
		set_error("ncclCommInitRankScalable: need at least one unique id");
		if (newcomm)
			*newcomm = NULL;
		return ncclInvalidArgument;
	}
	return init_rank("ncclCommInitRankScalable", newcomm, nranks, &commIds[0], myrank);
}
NCCL_ALIAS(ncclCommInitRankScalable)

NCCL_API ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	if (!comm || ndev < 1 || ndev > ARGUS_SIM_MAX_RANKS) {
		set_error("ncclCommInitAll: invalid arguments");
		return ncclInvalidArgument;
	}
	for (int i = 0; i < ndev; i++) {
		struct ncclComm *c = calloc(1, sizeof *c);
		if (!c || !reg_add(c)) {
			free(c);
			for (int k = 0; k < i; k++) {
				reg_remove(comm[k]);
				comm_detach(comm[k]);
				comm[k] = NULL;
			}
			set_error("ncclCommInitAll: out of host memory");
			return ncclSystemError;
		}
		c->magic = COMM_MAGIC;
		c->rank = i;
		c->nranks = ndev;
		c->local = 1;
		c->cu_device = devlist ? devlist[i] : i;
		c->timeout_ns = env_timeout_ns();
		comm[i] = c;
	}
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommInitAll)

NCCL_API ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess; /* as NCCL: destroying NULL is a no-op */
	return destroy_comm("ncclCommDestroy", comm, 0);
}
NCCL_ALIAS(ncclCommDestroy)

NCCL_API ncclResult_t pncclCommAbort(ncclComm_t comm)
{
	if (!comm)
		return ncclSuccess;
	return destroy_comm("ncclCommAbort", comm, 1);
}
NCCL_ALIAS(ncclCommAbort)

/* As in NCCL: the error an asynchronous operation of the communicator met (the
 * watchdog of PyTorch polls it). */
NCCL_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	struct ncclComm *c;
	ncclResult_t r = check_comm(comm, &c, "ncclCommGetAsyncError");
	if (r != ncclSuccess)
		return r;
	if (!asyncError)
		return ncclInvalidArgument;
	*asyncError = (ncclResult_t)__atomic_load_n(&c->async_error, __ATOMIC_ACQUIRE);
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommGetAsyncError)

NCCL_API ncclResult_t pncclCommCount(const ncclComm_t comm, int *count)
{
	struct ncclComm *c;
	ncclResult_t r = check_comm(comm, &c, "ncclCommCount");
	if (r != ncclSuccess)
		return r;
	if (!count)
		return ncclInvalidArgument;
	*count = c->nranks;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommCount)

NCCL_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device)
{
	struct ncclComm *c;
	ncclResult_t r = check_comm(comm, &c, "ncclCommCuDevice");
	if (r != ncclSuccess)
		return r;
	if (!device)
		return ncclInvalidArgument;
	*device = c->cu_device;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommCuDevice)

NCCL_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank)
{
	struct ncclComm *c;
	ncclResult_t r = check_comm(comm, &c, "ncclCommUserRank");
	if (r != ncclSuccess)
		return r;
	if (!rank)
		return ncclInvalidArgument;
	*rank = c->rank;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommUserRank)

NCCL_API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
				     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				     cudaStream_t stream)
{
	return collective("ncclAllReduce", "AllReduce", sendbuff, recvbuff, count, datatype,
			  (int)op, NO_ROOT, comm, stream);
}
NCCL_ALIAS(ncclAllReduce)

NCCL_API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
				     ncclDataType_t datatype, int root, ncclComm_t comm,
				     cudaStream_t stream)
{
	return collective("ncclBroadcast", "Broadcast", sendbuff, recvbuff, count, datatype,
			  NO_REDOP, root, comm, stream);
}
NCCL_ALIAS(ncclBroadcast)

NCCL_API ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
				 ncclComm_t comm, cudaStream_t stream)
{
	return collective("ncclBcast", "Broadcast", buff, buff, count, datatype,
			  NO_REDOP, root, comm, stream);
}
NCCL_ALIAS(ncclBcast)

NCCL_API ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
				  ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
				  cudaStream_t stream)
{
	return collective("ncclReduce", "Reduce", sendbuff, recvbuff, count, datatype,
			  (int)op, root, comm, stream);
}
NCCL_ALIAS(ncclReduce)

NCCL_API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
				     ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	return collective("ncclAllGather", "AllGather", sendbuff, recvbuff, sendcount, datatype,
			  NO_REDOP, NO_ROOT, comm, stream);
}
NCCL_ALIAS(ncclAllGather)

NCCL_API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
					 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
					 cudaStream_t stream)
{
	return collective("ncclReduceScatter", "ReduceScatter", sendbuff, recvbuff, recvcount,
			  datatype, (int)op, NO_ROOT, comm, stream);
}
NCCL_ALIAS(ncclReduceScatter)

NCCL_API ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	return collective("ncclAlltoAll", "AllToAll", sendbuff, recvbuff, count, datatype,
			  NO_REDOP, NO_ROOT, comm, stream);
}
NCCL_ALIAS(ncclAlltoAll)

NCCL_API ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
				  ncclDataType_t datatype, int root, ncclComm_t comm,
				  cudaStream_t stream)
{
	return collective("ncclGather", NULL, sendbuff, recvbuff, count, datatype,
			  NO_REDOP, root, comm, stream);
}
NCCL_ALIAS(ncclGather)

NCCL_API ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
				   ncclDataType_t datatype, int root, ncclComm_t comm,
				   cudaStream_t stream)
{
	return collective("ncclScatter", NULL, sendbuff, recvbuff, count, datatype,
			  NO_REDOP, root, comm, stream);
}
NCCL_ALIAS(ncclScatter)

NCCL_API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
				ncclComm_t comm, cudaStream_t stream)
{
	return p2p("ncclSend", 1, sendbuff, count, datatype, peer, comm, stream);
}
NCCL_ALIAS(ncclSend)

NCCL_API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
				ncclComm_t comm, cudaStream_t stream)
{
	return p2p("ncclRecv", 0, recvbuff, count, datatype, peer, comm, stream);
}
NCCL_ALIAS(ncclRecv)

NCCL_API ncclResult_t pncclGroupStart(void)
{
	g_group_depth++;
	return ncclSuccess;
}
NCCL_ALIAS(ncclGroupStart)

NCCL_API ncclResult_t pncclGroupEnd(void)
{
	if (g_group_depth <= 0) {
		set_error("ncclGroupEnd: no matching ncclGroupStart");
		return ncclInvalidUsage;
	}
	if (--g_group_depth > 0)
		return ncclSuccess;
	/* Outermost group end: the recorded operations complete together, as one
	 * barrier (and one kernel) per communicator touched. */
	ncclResult_t result = ncclSuccess;
	int n = g_group_ncomms;
	struct group_entry entries[MAX_GROUP_COMMS];
	memcpy(entries, g_group, (size_t)n * sizeof entries[0]);
	g_group_ncomms = 0;
	for (int i = 0; i < n; i++) {
		struct ncclComm *c = comm_get(entries[i].comm);
		if (!c)
			continue; /* destroyed meanwhile */
		const int p2p_only = entries[i].kernel[0] == '\0';
		const char *kname = p2p_only ? SENDRECV_KERNEL : entries[i].kernel;
		const unsigned flags = ARGUS_GPU_F_NCCL | (p2p_only ? ARGUS_GPU_F_P2P : 0u);
		ncclResult_t r = async_error(c);
		if (r == ncclSuccess && async_on() && !c->local) {
			r = enqueue_async(c, entries[i].stream, "ncclGroupEnd", AOP_COLL, -1, entries[i].bytes,
					  kname, flags, entries[i].seq_first, entries[i].seq_last);
		} else if (r == ncclSuccess) {
			const long long ready = gpu_ready_at();
			long long all_ready = ready;
			r = comm_barrier(c, "ncclGroupEnd", ready, &all_ready);
			if (r == ncclSuccess) {
				const long long end = all_ready + transfer_ns(entries[i].bytes);
				gpu_kernel(entries[i].stream, kname, ready, end, flags);
				log_gpu(c, entries[i].seq_first, entries[i].seq_last, ready, end);
			}
		}
		if (r != ncclSuccess && result == ncclSuccess)
			result = r;
	}
	return result;
}
NCCL_ALIAS(ncclGroupEnd)
