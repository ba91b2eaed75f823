/* libnccl.so.2 shim for the simulated training job.
 *
 * Exports the real NCCL 2.28 API names with the real C signatures and the real
 * symbol shape: every function is a strong (GLOBAL) `pncclX` and a WEAK `ncclX`
 * alias at the same address. Nothing else is exported (-fvisibility=hidden).
 *
 * No exported function calls another exported function: they all go through
 * static or hidden helpers, so an eBPF uprobe on one API address fires exactly
 * once per application call.
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
 * lasts the transfer time.
 *
 * Send/Recv inside a group are matched pairwise, as NCCL matches them: the
 * group's kernel on a communicator ends once every peer of its operations has
 * posted the matching one (nccl_shim_p2p.c), so pipeline stages and MoE
 * all-to-alls need no barrier over the whole communicator.
 *
 * This file: collectives, point-to-point and groups, the calls of a training
 * step, with the communicator queries. nccl_shim_comm.c holds the communicators
 * (their segment, joining, the barrier, aborts and timeouts, the error strings),
 * nccl_shim_gpu.c the emulated GPU's side (kernels, async mode, the truth's
 * collective log), nccl_shim_internal.h what they share. */
#define _GNU_SOURCE
#include "nccl_shim_internal.h"

#include <argus_gpu_wire.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	struct p2p_op *ops;           /* its sends and receives, in call order (malloc'ed) */
	int nops, capops;
};

static __thread int g_group_depth;
static __thread struct group_entry g_group[MAX_GROUP_COMMS];
static __thread int g_group_ncomms;

static struct group_entry *group_entry_of(struct ncclComm *c, cudaStream_t stream)
{
	for (int i = 0; i < g_group_ncomms; i++)
		if (g_group[i].comm == c)
			return &g_group[i];
	if (g_group_ncomms == MAX_GROUP_COMMS) {
		set_error("too many communicators in one group (max %d)", MAX_GROUP_COMMS);
		return NULL;
	}
	struct group_entry *e = &g_group[g_group_ncomms++];
	memset(e, 0, sizeof *e);
	e->comm = c;
	e->stream = stream;
	return e;
}

static ncclResult_t group_add(struct ncclComm *c, cudaStream_t stream, unsigned long long bytes,
			      const char *kernel, uint64_t seq)
{
	struct group_entry *e = group_entry_of(c, stream);
	if (!e)
		return ncclInvalidUsage;
	e->bytes += bytes;
	if (seq) {
		if (!e->seq_first)
			e->seq_first = seq;
		e->seq_last = seq;
	}
	if (kernel && !e->kernel[0])
		snprintf(e->kernel, sizeof e->kernel, "%s", kernel);
	return ncclSuccess;
}

/* A send or receive inside the group: recorded, matched at ncclGroupEnd. */
static ncclResult_t group_add_p2p(struct ncclComm *c, cudaStream_t stream, int is_send, int peer,
				  unsigned long long bytes, uint64_t id)
{
	struct group_entry *e = group_entry_of(c, stream);
	if (!e)
		return ncclInvalidUsage;
	if (e->nops == e->capops) {
		int cap = e->capops ? 2 * e->capops : 8;
		struct p2p_op *n = realloc(e->ops, (size_t)cap * sizeof *n);
		if (!n) {
			set_error("ncclGroupEnd: out of host memory");
			return ncclSystemError;
		}
		e->ops = n;
		e->capops = cap;
	}
	e->ops[e->nops++] = (struct p2p_op){is_send, peer, bytes, id};
	e->bytes += bytes;
	return ncclSuccess;
}

/* A communicator destroyed while this thread's group holds it: the group forgets it. */
void group_forget(struct ncclComm *c)
{
	for (int i = 0; i < g_group_ncomms; i++) {
		if (g_group[i].comm == c) {
			free(g_group[i].ops);
			g_group[i] = g_group[--g_group_ncomms];
			break;
		}
	}
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
	const long long call_ns = now_ns();
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
		return group_add_p2p(c, stream, is_send, peer, bytes,
				     c->local ? 0 : log_p2p(c, is_send, peer, bytes, call_ns));
	if (c->local)
		return ncclSuccess;
	struct argus_sim_shm *s = c->shm;
	r = aborted_error(c);
	if (r == ncclSuccess)
		r = async_error(c);
	if (r != ncclSuccess)
		return r;
	const unsigned flags = ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | (is_send ? ARGUS_GPU_F_SEND : ARGUS_GPU_F_RECV);
	const uint64_t id = log_p2p(c, is_send, peer, bytes, call_ns);
	if (is_send) {
		/* Eager send: post to the peer's mailbox and return. */
		__atomic_add_fetch(&s->p2p_posted[(size_t)peer * ARGUS_SIM_MAX_RANKS + c->rank], 1u,
				   __ATOMIC_ACQ_REL);
		__atomic_add_fetch(&s->p2p_bell[peer], 1u, __ATOMIC_ACQ_REL);
		argus_sim_futex_wake(&s->p2p_bell[peer]);
		if (async_on())
			return enqueue_async(c, stream, api, AOP_SEND, peer, bytes, SENDRECV_KERNEL, flags, id, id);
		const long long start = gpu_ready_at();
		gpu_kernel(stream, SENDRECV_KERNEL, start, start + transfer_ns(bytes), flags);
		log_p2p_gpu(c, id, start, start + transfer_ns(bytes));
		return ncclSuccess;
	}
	/* Async: the receive kernel waits for the data on the GPU, not the host. */
	if (async_on())
		return enqueue_async(c, stream, api, AOP_RECV, peer, bytes, SENDRECV_KERNEL, flags, id, id);
	/* Receive: wait until the peer has posted one more send to us. */
	r = wait_p2p_posted(c, peer, api);
	if (r != ncclSuccess)
		return r;
	/* The receive kernel starts the rank's receive delay after the GPU is ready
	 * (a pipeline stage waiting for its input) and lasts the transfer. */
	const long long start = gpu_ready_at() + (gpu_on() ? g_recv_delay_ns : 0);
	gpu_kernel(stream, SENDRECV_KERNEL, start, start + transfer_ns(bytes), flags);
	log_p2p_gpu(c, id, start, start + transfer_ns(bytes));
	return ncclSuccess;
}

/* Waits until `peer` has posted one more eager send to this rank, and takes it. */
ncclResult_t wait_p2p_posted(struct ncclComm *c, int peer, const char *api)
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

/* ======================= exported API ======================= */

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

/* One communicator's part of a group. Sends and receives alone are matched
 * pairwise with the peers' (p2p_group_run), as NCCL does; a part with a
 * collective completes as one barrier over the communicator (and one kernel). */
static ncclResult_t group_end_one(const struct group_entry *e)
{
	struct ncclComm *c = comm_get(e->comm);
	if (!c)
		return ncclSuccess; /* destroyed meanwhile */
	const int p2p_only = e->kernel[0] == '\0';
	ncclResult_t r = async_error(c);
	if (r != ncclSuccess)
		return r;
	if (p2p_only && !c->local && e->nops > 0) {
		const unsigned flags = ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P | p2p_group_flags(e->ops, e->nops);
		if (async_on())
			return enqueue_p2p_group(c, e->stream, e->ops, e->nops, flags);
		long long start = 0, end = 0;
		r = p2p_group_run(c, e->ops, e->nops, gpu_ready_at(), &start, &end);
		if (r == ncclSuccess)
			gpu_kernel(e->stream, SENDRECV_KERNEL, start, end, flags);
		return r;
	}
	const char *kname = p2p_only ? SENDRECV_KERNEL : e->kernel;
	const unsigned flags = ARGUS_GPU_F_NCCL | (p2p_only ? ARGUS_GPU_F_P2P : 0u);
	if (async_on() && !c->local)
		return enqueue_async(c, e->stream, "ncclGroupEnd", AOP_COLL, -1, e->bytes, kname, flags,
				     e->seq_first, e->seq_last);
	const long long ready = gpu_ready_at();
	long long all_ready = ready;
	r = comm_barrier(c, "ncclGroupEnd", ready, &all_ready);
	if (r == ncclSuccess) {
		const long long end = all_ready + transfer_ns(e->bytes);
		gpu_kernel(e->stream, kname, ready, end, flags);
		log_gpu(c, e->seq_first, e->seq_last, ready, end);
		for (int k = 0; k < e->nops; k++)
			log_p2p_gpu(c, e->ops[k].id, ready, end);
	}
	return r;
}

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
	/* Outermost group end: the recorded operations are launched, one kernel per
	 * communicator touched (group_end_one). */
	ncclResult_t result = ncclSuccess;
	int n = g_group_ncomms;
	struct group_entry entries[MAX_GROUP_COMMS];
	memcpy(entries, g_group, (size_t)n * sizeof entries[0]);
	g_group_ncomms = 0;
	for (int i = 0; i < n; i++) {
		ncclResult_t r = group_end_one(&entries[i]);
		free(entries[i].ops);
		if (r != ncclSuccess && result == ncclSuccess)
			result = r;
	}
	return result;
}
NCCL_ALIAS(ncclGroupEnd)
