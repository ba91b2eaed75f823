/* Shared-memory layout of one simulated NCCL communicator.
 *
 * Shared by the libnccl.so.2 shim (C) and the argus-sim launcher (C++): the
 * launcher creates the segment before it starts the ranks (so that it can set
 * the abort flag and unlink it at the end); the shim creates it itself when a
 * program uses the shim without the launcher.
 *
 * Everything here is header-only and static, so nothing of it is exported from
 * the shim. All cross-process words are plain uint32_t accessed with the GCC
 * __atomic builtins (usable from C and C++ alike) and waited on with futexes
 * (FUTEX_WAIT without the private flag: the words live in shared memory). */
#ifndef ARGUS_SIM_SHM_H
#define ARGUS_SIM_SHM_H

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ARGUS_SIM_SHM_MAGIC 0x41524753u /* "ARGS" */
#define ARGUS_SIM_SHM_VERSION 3u /* 3: split exchange, grouped point-to-point mailboxes */
#define ARGUS_SIM_MAX_RANKS 1024
#define ARGUS_SIM_UNIQUE_ID_BYTES 128
#define ARGUS_SIM_SHM_PREFIX "/argus-sim-"
/* "/argus-sim-" + 16 hex digits + NUL */
#define ARGUS_SIM_SHM_NAME_MAX 32
/* The ids a job derives from its world id (sim_comm_ids.h) keep its first
 * ARGUS_SIM_JOB_ID_BYTES bytes, so every segment of a job is named
 * ARGUS_SIM_SHM_PREFIX + the hex of those bytes + 8 more hex digits: the launcher
 * finds them all by that prefix (to abort them and to unlink them at the end). */
#define ARGUS_SIM_JOB_ID_BYTES 4
/* Grouped send/recv: ready times kept per (pair, message number % this). A side
 * runs at most a group or two ahead of its peer's reading (rendezvous), so 4
 * slots keep the timestamps right; a lost one only skews an emulated time. */
#define ARGUS_SIM_P2P_SLOTS 4

/* init_state */
#define ARGUS_SIM_SHM_UNINIT 0u
#define ARGUS_SIM_SHM_INITIALIZING 1u
#define ARGUS_SIM_SHM_READY 2u

/* abort reasons (0 = not aborted) */
#define ARGUS_SIM_ABORT_NONE 0u
#define ARGUS_SIM_ABORT_SHUTDOWN 1u  /* the launcher is stopping the job */
#define ARGUS_SIM_ABORT_RANK_FAILED 2u /* the launcher saw a rank die */
#define ARGUS_SIM_ABORT_COMM_ABORT 3u  /* some rank called ncclCommAbort */

struct argus_sim_shm {
	uint32_t magic;
	uint32_t version;
	uint32_t init_state;     /* futex word: UNINIT -> INITIALIZING -> READY */
	uint32_t nranks;
	uint32_t owner_external; /* 1: the launcher owns (and unlinks) the segment */
	uint32_t abort_reason;   /* ARGUS_SIM_ABORT_*; sticky */
	int32_t abort_rank;      /* rank that called ncclCommAbort, -1 otherwise */
	uint32_t joined;         /* futex word: ranks that have joined (init barrier) */
	uint32_t attached;       /* ranks currently attached (for self-owned unlink) */
	uint32_t bar_count;      /* arrivals in the current barrier generation */
	uint32_t bar_gen;        /* futex word: barrier generation */
	uint32_t reserved[5];
	int32_t rank_pid[ARGUS_SIM_MAX_RANKS];    /* pid of each joined rank, 0 if none */
	uint32_t rank_joined[ARGUS_SIM_MAX_RANKS];
	uint64_t rank_colls[ARGUS_SIM_MAX_RANKS]; /* collectives/groups completed per rank */
	uint32_t p2p_bell[ARGUS_SIM_MAX_RANKS];   /* futex word per receiving rank */
	/* Emulated GPU (sim_gpu.h): when each rank's GPU is ready for the collective
	 * of barrier generation g, in gpu_ready[g & 1][rank], written before the
	 * rank arrives at g and read by all after g completes. Two slots suffice: a
	 * rank writes generation g+2 only after everyone has passed g+1, i.e. after
	 * everyone has finished reading g. CLOCK_MONOTONIC ns (one node's clock). */
	uint64_t gpu_ready[2][ARGUS_SIM_MAX_RANKS];
	/* Eager point-to-point mailboxes (Send/Recv outside a group):
	 * p2p_posted[dst * ARGUS_SIM_MAX_RANKS + src] counts sends posted by src to
	 * dst; dst keeps its own count of those it has received, and sleeps on
	 * p2p_bell[dst], which every sender to dst bumps. The array is sparse in the
	 * tmpfs file: only pages touched cost memory. */
	uint32_t p2p_posted[(size_t)ARGUS_SIM_MAX_RANKS * ARGUS_SIM_MAX_RANKS];
	/* ncclCommSplit: each rank's (color, key), written before a barrier and read
	 * after it; a second barrier keeps the next split from overwriting them early. */
	int32_t split_color[ARGUS_SIM_MAX_RANKS];
	int32_t split_key[ARGUS_SIM_MAX_RANKS];
	/* Send/Recv inside a group (nccl_shim_p2p.c), matched pairwise as NCCL does
	 * (a group completes once each of its operations' peers has posted the
	 * matching one): gp_send[dst * MAX + src] counts the sends src has posted to
	 * dst, gp_recv[src * MAX + dst] the receives dst has posted from src; with
	 * each message the poster's GPU-ready time (CLOCK_MONOTONIC ns) in slot
	 * message-number % ARGUS_SIM_P2P_SLOTS. Posters ring the peer's p2p_bell. */
	uint32_t gp_send[(size_t)ARGUS_SIM_MAX_RANKS * ARGUS_SIM_MAX_RANKS];
	uint32_t gp_recv[(size_t)ARGUS_SIM_MAX_RANKS * ARGUS_SIM_MAX_RANKS];
	int64_t gp_send_ready[ARGUS_SIM_P2P_SLOTS][(size_t)ARGUS_SIM_MAX_RANKS * ARGUS_SIM_MAX_RANKS];
	int64_t gp_recv_ready[ARGUS_SIM_P2P_SLOTS][(size_t)ARGUS_SIM_MAX_RANKS * ARGUS_SIM_MAX_RANKS];
};

/* Name of the segment for a unique id: prefix + hex of the first 8 bytes. */
static inline void argus_sim_shm_name(const void *unique_id, char out[ARGUS_SIM_SHM_NAME_MAX])
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *b = (const unsigned char *)unique_id;
	size_t n = strlen(ARGUS_SIM_SHM_PREFIX);
	memcpy(out, ARGUS_SIM_SHM_PREFIX, n);
	for (int i = 0; i < 8; i++) {
		out[n++] = hex[b[i] >> 4];
		out[n++] = hex[b[i] & 0xf];
	}
	out[n] = '\0';
}

static inline uint32_t argus_sim_load(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void argus_sim_store(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static inline long argus_sim_futex_wait(uint32_t *addr, uint32_t expected, long timeout_ns)
{
	struct timespec ts;
	ts.tv_sec = timeout_ns / 1000000000L;
	ts.tv_nsec = timeout_ns % 1000000000L;
	return syscall(SYS_futex, addr, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static inline long argus_sim_futex_wake(uint32_t *addr)
{
	return syscall(SYS_futex, addr, FUTEX_WAKE, 0x7fffffff, NULL, NULL, 0);
}

/* Wake every futex word a rank may sleep on (after setting abort). */
static inline void argus_sim_shm_wake_all(struct argus_sim_shm *s)
{
	argus_sim_futex_wake(&s->init_state);
	argus_sim_futex_wake(&s->joined);
	argus_sim_futex_wake(&s->bar_gen);
	uint32_t n = __atomic_load_n(&s->nranks, __ATOMIC_ACQUIRE);
	if (n > ARGUS_SIM_MAX_RANKS)
		n = ARGUS_SIM_MAX_RANKS;
	for (uint32_t d = 0; d < n; d++) {
		__atomic_fetch_add(&s->p2p_bell[d], 1u, __ATOMIC_ACQ_REL);
		argus_sim_futex_wake(&s->p2p_bell[d]);
	}
}

/* Set the abort flag (first reason wins) and wake all sleepers. */
static inline void argus_sim_shm_abort(struct argus_sim_shm *s, uint32_t reason, int32_t rank)
{
	uint32_t expected = ARGUS_SIM_ABORT_NONE;
	if (__atomic_compare_exchange_n(&s->abort_reason, &expected, reason, 0, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE))
		__atomic_store_n(&s->abort_rank, rank, __ATOMIC_RELEASE);
	argus_sim_shm_wake_all(s);
}

/* Open (creating if needed) and map the segment `name`, initialising it exactly
 * once among all openers. `nranks` is what this opener expects; the caller
 * checks it against s->nranks afterwards. `owner_external` is recorded only by
 * the opener that initialises. `*created` tells whether this call created the
 * file. Waits at most `wait_ns` for a concurrent initialiser; returns NULL with
 * errno set on failure. */
static inline struct argus_sim_shm *argus_sim_shm_open(const char *name, uint32_t nranks,
						       uint32_t owner_external, int *created,
						       long wait_ns)
{
	int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	int made = 1;
	if (fd < 0 && errno == EEXIST) {
		made = 0;
		fd = shm_open(name, O_RDWR, 0600);
	}
	if (fd < 0)
		return NULL;
	/* Every opener truncates to the same fixed size: idempotent, never shrinks. */
	if (ftruncate(fd, (off_t)sizeof(struct argus_sim_shm)) != 0) {
		int e = errno;
		close(fd);
		errno = e;
		return NULL;
	}
	void *p = mmap(NULL, sizeof(struct argus_sim_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		errno = e;
		return NULL;
	}
	struct argus_sim_shm *s = (struct argus_sim_shm *)p;
	uint32_t st = ARGUS_SIM_SHM_UNINIT;
	if (__atomic_compare_exchange_n(&s->init_state, &st, ARGUS_SIM_SHM_INITIALIZING, 0,
					__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		s->version = ARGUS_SIM_SHM_VERSION;
		s->nranks = nranks;
		s->owner_external = owner_external;
		s->abort_rank = -1;
		__atomic_store_n(&s->magic, ARGUS_SIM_SHM_MAGIC, __ATOMIC_RELEASE);
		argus_sim_store(&s->init_state, ARGUS_SIM_SHM_READY);
		argus_sim_futex_wake(&s->init_state);
	} else {
		long waited = 0;
		while ((st = argus_sim_load(&s->init_state)) != ARGUS_SIM_SHM_READY) {
			if (waited >= wait_ns) {
				munmap(p, sizeof(struct argus_sim_shm));
				errno = ETIMEDOUT;
				return NULL;
			}
			argus_sim_futex_wait(&s->init_state, st, 100000000L);
			waited += 100000000L;
		}
		if (argus_sim_load(&s->magic) != ARGUS_SIM_SHM_MAGIC ||
		    s->version != ARGUS_SIM_SHM_VERSION) {
			munmap(p, sizeof(struct argus_sim_shm));
			errno = EPROTO;
			return NULL;
		}
	}
	if (created)
		*created = made;
	return s;
}

/* Maps an existing segment without creating or initialising it (the launcher's
 * abort of a segment a rank made); NULL when absent or not a ready segment of
 * this layout. */
static inline struct argus_sim_shm *argus_sim_shm_attach(const char *name)
{
	int fd = shm_open(name, O_RDWR, 0600);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(struct argus_sim_shm)) {
		close(fd);
		return NULL;
	}
	void *p = mmap(NULL, sizeof(struct argus_sim_shm), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	struct argus_sim_shm *s = (struct argus_sim_shm *)p;
	if (argus_sim_load(&s->init_state) != ARGUS_SIM_SHM_READY ||
	    argus_sim_load(&s->magic) != ARGUS_SIM_SHM_MAGIC || s->version != ARGUS_SIM_SHM_VERSION) {
		munmap(p, sizeof(struct argus_sim_shm));
		return NULL;
	}
	return s;
}

static inline void argus_sim_shm_close(struct argus_sim_shm *s)
{
	if (s)
		munmap((void *)s, sizeof(struct argus_sim_shm));
}

#ifdef __cplusplus
}
#endif

#endif /* ARGUS_SIM_SHM_H */
