/* Communicators made from a parent, for the libnccl.so.2 shim: ncclCommSplit
 * (how PyTorch makes a group when the default one is bound to a device, and
 * how Megatron-style jobs may carve TP/EP groups out of the world) and
 * ncclCommShrink (NCCL 2.27+: the parent without some, failed, ranks).
 *
 * As in NCCL, ncclCommSplit is collective over the parent: every parent rank
 * calls it, in the same order. Each one writes its (color, key) into the
 * parent's segment and meets the others in a barrier; a rank's child rank is the
 * order of (key, parent rank) among the ranks of its color, and the child has as
 * many ranks as share that color. NCCL_SPLIT_NOCOLOR gives no child. The child's
 * unique id, hence its segment, comes from the parent's id, how many children
 * the parent made before (the same on every member) and the color
 * (sim_comm_ids.h), so all members open the same segment without a store. */
#define _GNU_SOURCE
#include "nccl_shim_internal.h"
#include "sim_comm_ids.h"

#include <stdlib.h>

#define NCCL_SPLIT_NOCOLOR (-1)
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01

/* The child's (rank, nranks) from every parent rank's (color, key). */
static void child_place(const struct argus_sim_shm *s, int nranks, int me, int *rank, int *n)
{
	const int32_t color = __atomic_load_n(&s->split_color[me], __ATOMIC_ACQUIRE);
	const int32_t key = __atomic_load_n(&s->split_key[me], __ATOMIC_ACQUIRE);
	*rank = 0;
	*n = 0;
	for (int i = 0; i < nranks; i++) {
		if (__atomic_load_n(&s->split_color[i], __ATOMIC_ACQUIRE) != color)
			continue;
		(*n)++;
		const int32_t k = __atomic_load_n(&s->split_key[i], __ATOMIC_ACQUIRE);
		if (k < key || (k == key && i < me))
			(*rank)++;
	}
}

NCCL_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
				     ncclConfig_t *config)
{
	(void)config;
	struct ncclComm *c = comm_get(comm);
	if (!c || !newcomm) {
		set_error("ncclCommSplit: invalid communicator %p or NULL newcomm", (void *)comm);
		return ncclInvalidArgument;
	}
	*newcomm = NULL;
	if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
		set_error("ncclCommSplit: invalid color %d (>= 0, or NCCL_SPLIT_NOCOLOR)", color);
		return ncclInvalidArgument;
	}
	if (c->local) {
		set_error("ncclCommSplit: not supported on ncclCommInitAll communicators here");
		return ncclInvalidUsage;
	}
	/* The parent's queued operations use its barrier: they go first. */
	wait_inflight(c);
	struct argus_sim_shm *s = c->shm;
	__atomic_store_n(&s->split_color[c->rank], (int32_t)color, __ATOMIC_RELEASE);
	__atomic_store_n(&s->split_key[c->rank], (int32_t)key, __ATOMIC_RELEASE);
	ncclResult_t r = comm_barrier_uncounted(c, "ncclCommSplit");
	if (r != ncclSuccess)
		return r;
	int crank = 0, cn = 0;
	child_place(s, c->nranks, c->rank, &crank, &cn);
	/* Nobody writes the next split's (color, key) before everyone has read these. */
	r = comm_barrier_uncounted(c, "ncclCommSplit");
	const uint32_t count = c->derived++;
	if (r != ncclSuccess || color == NCCL_SPLIT_NOCOLOR)
		return r;
	ncclUniqueId id;
	argus_sim_derive_id(c->id, ARGUS_SIM_ID_SPLIT, count, (uint64_t)(uint32_t)color,
			    (unsigned char *)id.internal);
	return init_rank("ncclCommSplit", newcomm, cn, &id, crank);
}
NCCL_ALIAS(ncclCommSplit)

static int cmp_int(const void *a, const void *b)
{
	const int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

/* The parent without the excluded ranks; the survivors call it (in the same
 * order), the excluded do not: no barrier over the parent, the child's init
 * waits for the survivors. Ranks keep their order. */
NCCL_API ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
				      ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags)
{
	(void)config;
	struct ncclComm *c = comm_get(comm);
	if (!c || !newcomm || excludeRanksCount < 0 || (excludeRanksCount > 0 && !excludeRanksList)) {
		set_error("ncclCommShrink: invalid arguments");
		return ncclInvalidArgument;
	}
	*newcomm = NULL;
	if (c->local) {
		set_error("ncclCommShrink: not supported on ncclCommInitAll communicators here");
		return ncclInvalidUsage;
	}
	int *ex = calloc((size_t)(excludeRanksCount > 0 ? excludeRanksCount : 1), sizeof *ex);
	if (!ex) {
		set_error("ncclCommShrink: out of host memory");
		return ncclSystemError;
	}
	for (int i = 0; i < excludeRanksCount; i++)
		ex[i] = excludeRanksList[i];
	qsort(ex, (size_t)excludeRanksCount, sizeof *ex, cmp_int);
	int distinct = 0, below = 0;
	for (int i = 0; i < excludeRanksCount; i++) {
		if (ex[i] < 0 || ex[i] >= c->nranks || ex[i] == c->rank || (i > 0 && ex[i] == ex[i - 1])) {
			free(ex);
			set_error("ncclCommShrink: bad excluded rank list (out of range, repeated, or this rank)");
			return ncclInvalidArgument;
		}
		distinct++;
		below += ex[i] < c->rank ? 1 : 0;
	}
	const uint64_t h = argus_sim_fnv1a(ex, (size_t)distinct * sizeof *ex, 0xcbf29ce484222325ull);
	free(ex);
	/* NCCL_SHRINK_ABORT: the parent's operations are abandoned, not waited for. */
	if (!(shrinkFlags & NCCL_SHRINK_ABORT))
		wait_inflight(c);
	const uint32_t count = c->derived++;
	ncclUniqueId id;
	argus_sim_derive_id(c->id, ARGUS_SIM_ID_SHRINK, count, h, (unsigned char *)id.internal);
	return init_rank("ncclCommShrink", newcomm, c->nranks - distinct, &id, c->rank - below);
}
NCCL_ALIAS(ncclCommShrink)
