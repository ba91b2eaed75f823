/* Send/Recv inside a group, for the libnccl.so.2 shim (nccl_shim.c): matched
 * pairwise as NCCL matches them. At ncclGroupEnd (blocking mode) or when the
 * emulated GPU reaches the group's kernel (async mode), every operation is
 * posted to its peer's mailbox in the communicator's segment (sim_shm.h gp_*),
 * then each waits for the peer's matching one: the n-th send from a to b
 * matches the n-th receive b posts from a. Posting everything before waiting is
 * what lets a pipeline stage's send_forward_recv_backward meet its neighbour's
 * send_backward_recv_forward without either going first.
 *
 * Emulated GPU times: every post carries the poster's GPU-ready time (a receive
 * also its ARGUS_SIM_PP_RECV_DELAY_US), so an operation ends at the later of the
 * two sides plus the transfer, and the group's kernel runs from this GPU's ready
 * time (plus the receive delay when it receives) to its last operation's end. */
#define _GNU_SOURCE
#include "nccl_shim_internal.h"

#include <argus_gpu_wire.h>
#include <stdlib.h>

/* Whether the group only receives or only sends (the agent reads a receive-only
 * kernel as a pipeline stage waiting for its input). */
unsigned p2p_group_flags(const struct p2p_op *ops, int nops)
{
	int sends = 0;
	for (int i = 0; i < nops; i++)
		sends += ops[i].is_send ? 1 : 0;
	if (sends == 0)
		return ARGUS_GPU_F_RECV;
	if (sends == nops)
		return ARGUS_GPU_F_SEND;
	return 0;
}

static size_t pair(int a, int b)
{
	return (size_t)a * ARGUS_SIM_MAX_RANKS + (size_t)b;
}

/* Posts one operation; returns its message number on the pair (from 1). */
static uint32_t post(struct ncclComm *c, const struct p2p_op *op, long long ready)
{
	struct argus_sim_shm *s = c->shm;
	const size_t idx = pair(op->peer, c->rank);
	uint32_t n;
	if (op->is_send) {
		n = ++c->gp_sent[op->peer];
		__atomic_store_n(&s->gp_send_ready[n % ARGUS_SIM_P2P_SLOTS][idx], (int64_t)ready, __ATOMIC_RELEASE);
		__atomic_add_fetch(&s->gp_send[idx], 1u, __ATOMIC_ACQ_REL);
	} else {
		n = ++c->gp_recvd[op->peer];
		__atomic_store_n(&s->gp_recv_ready[n % ARGUS_SIM_P2P_SLOTS][idx], (int64_t)ready, __ATOMIC_RELEASE);
		__atomic_add_fetch(&s->gp_recv[idx], 1u, __ATOMIC_ACQ_REL);
	}
	__atomic_add_fetch(&s->p2p_bell[op->peer], 1u, __ATOMIC_ACQ_REL);
	argus_sim_futex_wake(&s->p2p_bell[op->peer]);
	return n;
}

/* Waits until the peer has posted the operation matching message `n`; its
 * poster's ready time in *peer_ready. */
static ncclResult_t wait_match(struct ncclComm *c, const struct p2p_op *op, uint32_t n, long long deadline,
			       long long *peer_ready)
{
	struct argus_sim_shm *s = c->shm;
	const size_t idx = pair(c->rank, op->peer);
	uint32_t *count = op->is_send ? &s->gp_recv[idx] : &s->gp_send[idx];
	uint32_t *bell = &s->p2p_bell[c->rank];
	for (;;) {
		uint32_t ring = argus_sim_load(bell);
		if ((int32_t)(argus_sim_load(count) - n) >= 0)
			break;
		ncclResult_t r = wait_slice(c, bell, ring, deadline, "ncclGroupEnd");
		if (r != ncclSuccess)
			return r;
	}
	const int64_t *slot = op->is_send ? &s->gp_recv_ready[n % ARGUS_SIM_P2P_SLOTS][idx]
					  : &s->gp_send_ready[n % ARGUS_SIM_P2P_SLOTS][idx];
	*peer_ready = (long long)__atomic_load_n(slot, __ATOMIC_ACQUIRE);
	return ncclSuccess;
}

ncclResult_t p2p_group_run(struct ncclComm *c, const struct p2p_op *ops, int nops, long long ready,
			   long long *start, long long *end)
{
	ncclResult_t r = aborted_error(c);
	if (r != ncclSuccess)
		return r;
	uint32_t *nums = calloc((size_t)(nops > 0 ? nops : 1), sizeof *nums);
	if (!nums) {
		set_error("ncclGroupEnd: out of host memory");
		return ncclSystemError;
	}
	int receives = 0;
	for (int i = 0; i < nops; i++)
		receives += ops[i].is_send ? 0 : 1;
	const long long recv_ready = ready + (gpu_on() ? g_recv_delay_ns : 0);
	for (int i = 0; i < nops; i++)
		nums[i] = post(c, &ops[i], ops[i].is_send ? ready : recv_ready);
	*start = receives ? recv_ready : ready;
	*end = *start;
	const long long deadline = now_ns() + c->timeout_ns;
	for (int i = 0; i < nops && r == ncclSuccess; i++) {
		long long peer_ready = 0;
		r = wait_match(c, &ops[i], nums[i], deadline, &peer_ready);
		if (r != ncclSuccess)
			break;
		const long long mine = ops[i].is_send ? ready : recv_ready;
		const long long op_end = (peer_ready > mine ? peer_ready : mine) + transfer_ns(ops[i].bytes);
		log_p2p_gpu(c, ops[i].id, mine, op_end);
		if (op_end > *end)
			*end = op_end;
	}
	free(nums);
	if (r == ncclSuccess)
		__atomic_add_fetch(&c->shm->rank_colls[c->rank], 1u, __ATOMIC_RELAXED);
	return r;
}
