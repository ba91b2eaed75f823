/* The simulator's private interface to the emulated GPU of the libcuda.so.1
 * shim (sim/cuda_shim.c), used by the libnccl.so.2 shim (C) and by the ranks
 * (sim/worker.cpp, C++). None of these names exists in a real libcuda: callers
 * find them with dlsym and do without them when they are absent.
 *
 * The emulated GPU hands its activity to the agent as `struct argus_gpu_rec`
 * batches through the USDT probes of bpf/argus_gpu_wire.h (argus:gpu_batch,
 * argus:gpu_name). ARGUS_SIM_GPU_ACTIVITY=0 in the environment turns that off.
 *
 *   unsigned argus_gpu_wire_version(void)
 *       ARGUS_GPU_WIRE_VERSION: how the agent recognises a producer (public).
 *   void argus_sim_gpu_flush_all(void)
 *       sleeps until the emulated device is idle, then emits every pending record.
 *   int argus_sim_gpu_totals(struct argus_sim_gpu_totals *out, size_t size)
 *       exact totals of what crossed argus:gpu_batch so far; copies
 *       min(size, sizeof *out) bytes; returns 0 (-1 on a NULL out).
 *   long long argus_sim_gpu_ready_ns(void)
 *       CLOCK_MONOTONIC ns when every live stream is idle, or now if later.
 *   int argus_sim_gpu_kernel(void *stream, const char *name, long long start_ns,
 *                            long long end_ns, unsigned flags)
 *       enqueues a kernel record [start_ns, end_ns] (flags: ARGUS_GPU_F_*) on
 *       `stream` and makes every live stream busy until at least end_ns (the
 *       compute stream waits for a collective's result). 0, or -1 (not
 *       initialised, bad stream or times).
 *   int argus_sim_gpu_external(void *stream, const char *name, unsigned flags,
 *                              argus_sim_gpu_resolve_fn resolve, void *ctx)
 *       queues a kernel whose times are not known at issue (an asynchronous
 *       NCCL collective: it ends when every rank's GPU has reached it). The
 *       call never waits for the peers (only for room in the bounded queue):
 *       the emulated GPU's own thread calls resolve(ctx, ready, &start, &end)
 *       in issue order, with `ready` the time the device could start it;
 *       resolve may block on the peers and returns 0 to record [start, end]
 *       (every stream then waits for `end`), non-zero to record nothing. It
 *       owns ctx. Work issued after it is timed once it is resolved, and
 *       synchronising calls wait until everything issued before them is. */
#ifndef ARGUS_SIM_GPU_H
#define ARGUS_SIM_GPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct argus_sim_gpu_totals {
	uint64_t batches;        /* gpu_batch fires */
	uint64_t records;        /* records in them */
	uint64_t kernels;        /* kind ARGUS_GPU_KERNEL (compute and NCCL) */
	uint64_t kernel_ns;      /* sum of end - start of those */
	uint64_t nccl_kernels;   /* kernels with ARGUS_GPU_F_NCCL */
	uint64_t nccl_kernel_ns;
	uint64_t recv_kernels;   /* kernels with ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV */
	uint64_t memcpy;         /* kind ARGUS_GPU_MEMCPY */
	uint64_t memcpy_bytes_htod;
	uint64_t memcpy_bytes_dtoh;
	uint64_t dropped;        /* sum of the `dropped` argument of gpu_batch */
	uint64_t names;          /* gpu_name fires */
	uint64_t memcpy_bytes_dtod; /* appended: callers built before it copy less */
	uint64_t unheard_records;   /* records produced while no agent listened (not in `records`) */
	uint64_t dropped_unheard;   /* drops of that time (reported later, then in `dropped`) */
};

#define ARGUS_SIM_GPU_ACTIVITY_ENV "ARGUS_SIM_GPU_ACTIVITY"
/* "1": records are folded (gpu/gpu_fold.h) before they cross argus:gpu_batch;
 * the totals still count every kernel, `records` what crossed. */
#define ARGUS_SIM_GPU_FOLD_ENV "ARGUS_SIM_GPU_FOLD"
/* "1": folding ends every span at each emulated buffer, as producers did before
 * spans went on across buffers (bench/gpu_fold.py compares the two). */
#define ARGUS_SIM_GPU_FOLD_PER_BUFFER_ENV "ARGUS_SIM_GPU_FOLD_PER_BUFFER"
/* "N" (1..50): each launch runs its function's duration +-N% (a fixed
 * pseudo-random sequence); unset or 0: exactly that duration. */
#define ARGUS_SIM_GPU_JITTER_ENV "ARGUS_SIM_GPU_JITTER_PCT"
/* "1": behave as if an agent listened (fire every batch; the USDT semaphores are
 * not read). For the unit tests, which run the sim without an agent. */
#define ARGUS_SIM_GPU_ASSUME_LISTENING_ENV "ARGUS_SIM_GPU_ASSUME_LISTENING"
/* Per-rank extra delay before an eager ncclRecv's kernel starts (--pp/--bubble). */
#define ARGUS_SIM_PP_RECV_DELAY_ENV "ARGUS_SIM_PP_RECV_DELAY_US"
/* The emulated GPU's memory capacity in MiB (--gpu-mem-mb); unset: 81920 (an 80 GB GPU). */
#define ARGUS_SIM_GPU_MEM_MB_ENV "ARGUS_SIM_GPU_MEM_MB"
#define ARGUS_SIM_GPU_MEM_MB_DEFAULT 81920

typedef unsigned (*argus_gpu_wire_version_fn)(void);
typedef void (*argus_sim_gpu_flush_all_fn)(void);
typedef int (*argus_sim_gpu_totals_fn)(struct argus_sim_gpu_totals *out, size_t size);
typedef long long (*argus_sim_gpu_ready_ns_fn)(void);
typedef int (*argus_sim_gpu_kernel_fn)(void *stream, const char *name, long long start_ns,
				       long long end_ns, unsigned flags);
typedef int (*argus_sim_gpu_resolve_fn)(void *ctx, long long ready_ns, long long *start_ns,
					long long *end_ns);
typedef int (*argus_sim_gpu_external_fn)(void *stream, const char *name, unsigned flags,
					 argus_sim_gpu_resolve_fn resolve, void *ctx);

/* NCCL mode of the simulator's libnccl.so.2 (--nccl-mode): "async" (default,
 * as real NCCL: a collective only enqueues its kernel) or "blocking" (the call
 * returns once every rank has called it, as Gloo). Async needs the emulated GPU;
 * without it the shim blocks. */
#define ARGUS_SIM_NCCL_MODE_ENV "ARGUS_SIM_NCCL_MODE"

/* One collective as the NCCL shim saw it (the truth's "collectives"): seq
 * counts collective calls (not send/recv) per communicator from 1, as the
 * agent's BPF does; CLOCK_MONOTONIC ns; GPU times 0 until resolved. Kept by the
 * libcuda shim, which the worker reads:
 *   void argus_sim_coll_note(uint64_t comm, uint64_t seq, long long call_ns,
 *                            long long gpu_start_ns, long long gpu_end_ns)
 *       records a call (call_ns != 0: a new entry) or the GPU times of one
 *       already recorded (call_ns == 0).
 *   int argus_sim_coll_log(struct argus_sim_coll_rec *out, int max)
 *       copies the newest min(max, kept) entries, oldest first; returns how many. */
struct argus_sim_coll_rec {
	uint64_t comm;
	uint64_t seq;
	int64_t call_ns;
	int64_t gpu_start_ns;
	int64_t gpu_end_ns;
};
typedef void (*argus_sim_coll_note_fn)(uint64_t comm, uint64_t seq, long long call_ns,
				       long long gpu_start_ns, long long gpu_end_ns);
typedef int (*argus_sim_coll_log_fn)(struct argus_sim_coll_rec *out, int max);
#define ARGUS_SIM_COLL_LOG_MAX 16384

/* One point-to-point operation (ncclSend/ncclRecv, eager or grouped) as the
 * NCCL shim saw it (the truth's "p2p"): id counts them per communicator from 1;
 * peer is the rank in that communicator; CLOCK_MONOTONIC ns, GPU times 0 until
 * resolved. Kept by the libcuda shim like the collective log:
 *   void argus_sim_p2p_note(const struct argus_sim_p2p_rec *rec)
 *       a new entry (rec->call_ns != 0), or the GPU times of the entry with the
 *       same (comm, id) (call_ns == 0).
 *   int argus_sim_p2p_log(struct argus_sim_p2p_rec *out, int max)
 *       copies the newest min(max, kept) entries, oldest first; returns how many. */
struct argus_sim_p2p_rec {
	uint64_t comm;
	uint64_t id;
	int32_t is_send;
	int32_t peer;
	uint64_t bytes;
	int64_t call_ns;
	int64_t gpu_start_ns;
	int64_t gpu_end_ns;
};
typedef void (*argus_sim_p2p_note_fn)(const struct argus_sim_p2p_rec *rec);
typedef int (*argus_sim_p2p_log_fn)(struct argus_sim_p2p_rec *out, int max);
#define ARGUS_SIM_P2P_LOG_MAX 16384

#ifdef __cplusplus
}
#endif

#endif /* ARGUS_SIM_GPU_H */
