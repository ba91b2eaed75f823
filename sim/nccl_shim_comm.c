/* Communicators of the libnccl.so.2 shim (nccl_shim.c): the registry of live
 * handles, the shared-memory segment each rank attaches to (sim_shm.h), joining
 * it, the barrier collectives and groups complete by, aborts and timeouts, and
 * the API calls that create, destroy and name them. */
#define _GNU_SOURCE
#include "nccl_shim_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

#define SIM_NCCL_VERSION_CODE 22809 /* 2.28.9 */

/* ---- communicator objects ---- */

#define COMM_MAGIC 0x4e43434cu /* "NCCL" */
#define WAIT_SLICE_NS 100000000L /* 100 ms */

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm **g_live;
static size_t g_nlive, g_caplive;

static __thread char g_last_error[256];

void set_error(const char *fmt, ...)
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
struct ncclComm *comm_get(ncclComm_t h)
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

long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
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

ncclResult_t aborted_error(struct ncclComm *c)
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
ncclResult_t wait_slice(struct ncclComm *c, uint32_t *word, uint32_t seen,
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
static ncclResult_t barrier_core(struct ncclComm *c, const char *what, long long ready,
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
	return ncclSuccess;
}

/* A collective's or a group's barrier: it counts in rank_colls (the launcher's
 * InfiniBand fixture turns those into link traffic). */
ncclResult_t comm_barrier(struct ncclComm *c, const char *what, long long ready,
			  long long *all_ready)
{
	ncclResult_t r = barrier_core(c, what, ready, all_ready);
	if (r == ncclSuccess && !c->local && c->nranks > 1)
		__atomic_add_fetch(&c->shm->rank_colls[c->rank], 1u, __ATOMIC_RELAXED);
	return r;
}

/* A barrier that moves no data (ncclCommSplit's exchange): not counted. */
ncclResult_t comm_barrier_uncounted(struct ncclComm *c, const char *what)
{
	long long ignored = 0;
	return barrier_core(c, what, 0, &ignored);
}

/* ncclCommDestroy waits for the communicator's queued operations (an abort
 * releases them first); bounded by the communicator's timeout. */
void wait_inflight(struct ncclComm *c)
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
	free(c->gp_sent);
	free(c->gp_recvd);
	c->gp_sent = c->gp_recvd = NULL;
	c->magic = 0;
	free(c);
}

/* ---- init / destroy ---- */

ncclResult_t init_rank(const char *api, ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank)
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
	uint32_t *sent = calloc((size_t)nranks, sizeof *sent);
	uint32_t *recvd = calloc((size_t)nranks, sizeof *recvd);
	if (!c || !rec || !sent || !recvd) {
		free(c);
		free(rec);
		free(sent);
		free(recvd);
		set_error("%s: out of host memory", api);
		return ncclSystemError;
	}
	c->magic = COMM_MAGIC;
	c->rank = rank;
	c->nranks = nranks;
	c->cu_device = env_local_rank();
	c->timeout_ns = env_timeout_ns();
	c->p2p_received = rec;
	c->gp_sent = sent;
	c->gp_recvd = recvd;
	memcpy(c->id, id->internal, sizeof c->id);
	argus_sim_shm_name(id->internal, c->shm_name);

	int created = 0;
	struct argus_sim_shm *s =
		argus_sim_shm_open(c->shm_name, (uint32_t)nranks, 0, &created, (long)c->timeout_ns);
	if (!s) {
		set_error("%s: cannot open shared memory %s: %s", api, c->shm_name, strerror(errno));
		free(rec);
		free(sent);
		free(recvd);
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
	group_forget(c);
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
