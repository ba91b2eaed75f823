/* Private to the libnccl.so.2 shim (sim/nccl_shim*.c): the NCCL types it
 * implements and what its files share. Everything declared here is hidden
 * (-fvisibility=hidden, and the declarations say so too, so that calls across
 * the files bind locally): only the NCCL_API names and their aliases are
 * exported. */
#ifndef ARGUS_SIM_NCCL_SHIM_INTERNAL_H
#define ARGUS_SIM_NCCL_SHIM_INTERNAL_H

#include "sim_shm.h"
#include "sim_gpu.h"

#include <stddef.h>
#include <stdint.h>

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

#define NCCL_API __attribute__((visibility("default")))
/* The weak public name, an alias of the strong p-name (same address). */
#define NCCL_ALIAS(fn) \
	extern __typeof(p##fn) fn __attribute__((weak, alias("p" #fn), visibility("default")));

/* A communicator (its handle, ncclComm_t, is checked by comm_get before use). */
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
	uint64_t p2p_seq;  /* send/recv calls so far (the truth's p2p log) */
	unsigned char id[16]; /* the first bytes of its unique id (children derive theirs) */
	uint32_t derived;  /* ncclCommSplit/ncclCommShrink calls on it so far */
	uint32_t *gp_sent; /* [peer]: grouped sends posted to peer so far */
	uint32_t *gp_recvd; /* [peer]: grouped receives posted from peer so far */
};

/* What an operation queued on the emulated GPU in async mode is (enqueue_async). */
enum { AOP_COLL = 0, AOP_SEND = 1, AOP_RECV = 2, AOP_P2P_GROUP = 3 };

/* One send or receive recorded inside a group (matched at ncclGroupEnd). */
struct p2p_op {
	int is_send;
	int peer;
	unsigned long long bytes;
	uint64_t id; /* its number in the truth's p2p log */
};

#pragma GCC visibility push(hidden)

/* nccl_shim_comm.c: communicators, their segment, barrier and errors. */
void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
struct ncclComm *comm_get(ncclComm_t h);
long long now_ns(void);
ncclResult_t aborted_error(struct ncclComm *c);
ncclResult_t wait_slice(struct ncclComm *c, uint32_t *word, uint32_t seen, long long deadline,
			const char *what);
ncclResult_t comm_barrier(struct ncclComm *c, const char *what, long long ready,
			  long long *all_ready);
ncclResult_t comm_barrier_uncounted(struct ncclComm *c, const char *what);
ncclResult_t init_rank(const char *api, ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank);
void wait_inflight(struct ncclComm *c);

/* nccl_shim_gpu.c: the emulated GPU of the simulator's libcuda.so.1. */
extern long long g_recv_delay_ns;
int gpu_on(void);
int async_on(void);
long long gpu_ready_at(void);
long long transfer_ns(unsigned long long bytes);
void gpu_kernel(cudaStream_t stream, const char *name, long long start, long long end,
		unsigned flags);
uint64_t log_call(struct ncclComm *c, long long call_ns);
void log_gpu(struct ncclComm *c, uint64_t first, uint64_t last, long long start, long long end);
ncclResult_t enqueue_async(struct ncclComm *c, cudaStream_t stream, const char *api, int kind,
			   int peer, unsigned long long bytes, const char *kname, unsigned flags,
			   uint64_t seq_first, uint64_t seq_last);
ncclResult_t enqueue_p2p_group(struct ncclComm *c, cudaStream_t stream, const struct p2p_op *ops,
			       int nops, unsigned flags);
ncclResult_t async_error(struct ncclComm *c);
uint64_t log_p2p(struct ncclComm *c, int is_send, int peer, unsigned long long bytes, long long call_ns);
void log_p2p_gpu(struct ncclComm *c, uint64_t id, long long start, long long end);

/* nccl_shim_p2p.c: send/recv inside a group, matched pairwise. */
ncclResult_t p2p_group_run(struct ncclComm *c, const struct p2p_op *ops, int nops, long long ready,
			   long long *start, long long *end);
unsigned p2p_group_flags(const struct p2p_op *ops, int nops);

/* nccl_shim.c: collectives, point-to-point and groups. */
ncclResult_t wait_p2p_posted(struct ncclComm *c, int peer, const char *api);
void group_forget(struct ncclComm *c);

#pragma GCC visibility pop

#endif /* ARGUS_SIM_NCCL_SHIM_INTERNAL_H */
