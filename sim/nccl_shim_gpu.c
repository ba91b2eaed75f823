/* The libnccl.so.2 shim's (nccl_shim.c) side of the emulated GPU of the
 * simulator's libcuda.so.1 (sim_gpu.h): found once, the NCCL kernels put on its
 * timeline, the truth's collective log kept there, and async mode, whose
 * operations the emulated GPU's own thread resolves in issue order. */
#define _GNU_SOURCE
#include "nccl_shim_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- the emulated GPU of the simulator's libcuda.so.1 (sim_gpu.h) ---- */

#define GPU_BYTES_PER_NS 100ull  /* 100 GB/s */
#define GPU_LATENCY_NS 10000LL   /* 10 us */
#define GPU_MAX_RECV_DELAY_US (3600ull * 1000000ull)

static pthread_once_t g_gpu_once = PTHREAD_ONCE_INIT;
static argus_sim_gpu_ready_ns_fn g_gpu_ready;
static argus_sim_gpu_kernel_fn g_gpu_kernel;
static argus_sim_gpu_external_fn g_gpu_external;
static argus_sim_coll_note_fn g_coll_note;
static argus_sim_p2p_note_fn g_p2p_note;
static int g_async_mode = 1; /* ARGUS_SIM_NCCL_MODE: async unless "blocking" */
long long g_recv_delay_ns;

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
			*(void **)&g_p2p_note = dlsym(h, "argus_sim_p2p_note");
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

int gpu_on(void)
{
	pthread_once(&g_gpu_once, gpu_find);
	return g_gpu_kernel != NULL;
}

/* Real NCCL's semantics: a call only enqueues its kernel on the (emulated) GPU. */
int async_on(void)
{
	return gpu_on() && g_gpu_external != NULL && g_async_mode;
}

/* When this process's GPU could start an NCCL kernel: max(GPU idle, now). */
long long gpu_ready_at(void)
{
	long long now = now_ns();
	if (!gpu_on())
		return now;
	long long t = g_gpu_ready();
	return t > now ? t : now;
}

long long transfer_ns(unsigned long long bytes)
{
	return (long long)(bytes / GPU_BYTES_PER_NS) + GPU_LATENCY_NS;
}

void gpu_kernel(cudaStream_t stream, const char *name, long long start, long long end,
		unsigned flags)
{
	if (gpu_on())
		g_gpu_kernel((void *)stream, name, start, end, flags);
}

/* ---- the truth's collective log (kept by the simulator's libcuda) ---- */

/* A new collective call: its number (as the agent's BPF counts them) and call time. */
uint64_t log_call(struct ncclComm *c, long long call_ns)
{
	uint64_t seq = __atomic_add_fetch(&c->coll_seq, 1u, __ATOMIC_ACQ_REL);
	if (gpu_on() && g_coll_note)
		g_coll_note((uint64_t)(uintptr_t)c, seq, call_ns, 0, 0);
	return seq;
}

/* The GPU times of collectives first..last (one kernel: a group, or one call). */
void log_gpu(struct ncclComm *c, uint64_t first, uint64_t last, long long start, long long end)
{
	if (first == 0 || !gpu_on() || !g_coll_note)
		return;
	for (uint64_t q = first; q <= last; q++)
		g_coll_note((uint64_t)(uintptr_t)c, q, 0, start, end);
}

/* ---- the truth's point-to-point log ---- */

/* A new send or receive: its number in the communicator's p2p log. */
uint64_t log_p2p(struct ncclComm *c, int is_send, int peer, unsigned long long bytes, long long call_ns)
{
	uint64_t id = __atomic_add_fetch(&c->p2p_seq, 1u, __ATOMIC_ACQ_REL);
	if (gpu_on() && g_p2p_note) {
		struct argus_sim_p2p_rec rec = {(uint64_t)(uintptr_t)c, id, is_send, peer, bytes, call_ns, 0, 0};
		g_p2p_note(&rec);
	}
	return id;
}

void log_p2p_gpu(struct ncclComm *c, uint64_t id, long long start, long long end)
{
	if (id == 0 || !gpu_on() || !g_p2p_note)
		return;
	struct argus_sim_p2p_rec rec = {(uint64_t)(uintptr_t)c, id, 0, 0, 0, 0, start, end};
	g_p2p_note(&rec);
}

/* ---- async mode: operations resolved by the emulated GPU's thread ---- */

struct async_op {
	struct ncclComm *c;
	const char *api;
	int kind;
	int peer;
	unsigned long long bytes;
	uint64_t seq_first, seq_last; /* collectives this kernel runs (0: none); eager p2p: its log id */
	struct p2p_op *ops;           /* AOP_P2P_GROUP */
	int nops;
};

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
	} else if (op->kind == AOP_P2P_GROUP) {
		r = p2p_group_run(c, op->ops, op->nops, ready, start, end);
		rc = r == ncclSuccess ? 0 : -1;
	} else if (op->kind == AOP_SEND) {
		*start = ready;
		*end = ready + transfer_ns(op->bytes);
		log_p2p_gpu(c, op->seq_first, *start, *end);
		rc = 0;
	} else {
		r = wait_p2p_posted(c, op->peer, op->api);
		if (r == ncclSuccess) {
			long long now = now_ns();
			*start = (ready > now ? ready : now) + g_recv_delay_ns;
			*end = *start + transfer_ns(op->bytes);
			log_p2p_gpu(c, op->seq_first, *start, *end);
			rc = 0;
		}
	}
	if (r != ncclSuccess)
		async_fail(c, r);
	__atomic_sub_fetch(&c->inflight, 1u, __ATOMIC_ACQ_REL);
	free(op->ops);
	free(op);
	return rc;
}

/* Queues an operation on the emulated GPU; the call returns at once. */
ncclResult_t enqueue_async(struct ncclComm *c, cudaStream_t stream, const char *api, int kind,
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

/* Queues a group's point-to-point operations on one communicator: the GPU's
 * thread matches them with the peers' (p2p_group_run) when it reaches them. */
ncclResult_t enqueue_p2p_group(struct ncclComm *c, cudaStream_t stream, const struct p2p_op *ops,
			       int nops, unsigned flags)
{
	struct async_op *op = calloc(1, sizeof *op);
	struct p2p_op *copy = calloc((size_t)(nops > 0 ? nops : 1), sizeof *copy);
	if (!op || !copy) {
		free(op);
		free(copy);
		set_error("ncclGroupEnd: out of host memory");
		return ncclSystemError;
	}
	memcpy(copy, ops, (size_t)nops * sizeof *copy);
	op->c = c;
	op->api = "ncclGroupEnd";
	op->kind = AOP_P2P_GROUP;
	op->ops = copy;
	op->nops = nops;
	__atomic_add_fetch(&c->inflight, 1u, __ATOMIC_ACQ_REL);
	if (g_gpu_external((void *)stream, "ncclDevKernel_SendRecv", flags, resolve_async, op) != 0) {
		__atomic_sub_fetch(&c->inflight, 1u, __ATOMIC_ACQ_REL);
		free(copy);
		free(op);
		set_error("ncclGroupEnd: invalid stream %p", (void *)stream);
		return ncclInvalidArgument;
	}
	return ncclSuccess;
}

/* An error an earlier asynchronous operation met, returned by the next call. */
ncclResult_t async_error(struct ncclComm *c)
{
	int r = __atomic_load_n(&c->async_error, __ATOMIC_ACQUIRE);
	if (r != ncclSuccess)
		set_error("an earlier operation on this communicator failed (asynchronous error)");
	return (ncclResult_t)r;
}
