/* The one wire format of GPU activity (see ARCHITECTURE.md, "One wire format").
 *
 * Producers: the CUPTI injection library (gpu/libargus-cupti.so) and the
 * simulator's emulated libcuda (sim/cuda_shim.c). Both hand completed batches
 * to the agent through the same USDT probes, provider `argus`:
 *
 *   argus:gpu_batch(const struct argus_gpu_rec *recs, __u32 n, __u64 dropped)
 *       n <= ARGUS_GPU_BATCH_MAX completed records; `dropped` = records the
 *       producer lost since its previous batch (CUPTI buffer overflow, ...).
 *   argus:gpu_name(__u32 name_id, const char *name)
 *       fired once per kernel-name id, before the first batch that uses it.
 *
 * A producer exports the function `argus_gpu_wire_version` (returns
 * ARGUS_GPU_WIRE_VERSION): the agent finds producers by that symbol, then
 * attaches to their USDT notes. Nothing crosses a socket or a volume.
 *
 * Times are CLOCK_MONOTONIC nanoseconds, the clock of bpf_ktime_get_ns, so the
 * GPU timeline lines up with the host calls the uprobes see. */
#ifndef ARGUS_GPU_WIRE_H
#define ARGUS_GPU_WIRE_H

#ifndef __BPF__
#include <linux/types.h>
#endif

#define ARGUS_GPU_WIRE_VERSION 2 /* 2: sketch entries come in pairs (ARGUS_GPU_SKETCH_PAIR) */
#define ARGUS_GPU_BATCH_MAX 256     /* records per USDT fire; producers split larger batches */
#define ARGUS_GPU_NAME_MAX 256      /* bytes of a kernel name the agent keeps (with NUL) */
#define ARGUS_GPU_USDT_PROVIDER "argus"
#define ARGUS_GPU_USDT_BATCH "gpu_batch"
#define ARGUS_GPU_USDT_NAME "gpu_name"

enum argus_gpu_kind {
	ARGUS_GPU_KERNEL = 1,
	ARGUS_GPU_MEMCPY = 2,
	ARGUS_GPU_MEMSET = 3,
};

/* flags, bits 0-3 */
#define ARGUS_GPU_F_NCCL 0x1 /* an NCCL kernel (name starts with "nccl") */
#define ARGUS_GPU_F_P2P 0x2  /* an NCCL point-to-point kernel (send/recv) */
#define ARGUS_GPU_F_RECV 0x4 /* ... that only receives (when the producer can tell) */
#define ARGUS_GPU_F_SEND 0x8 /* ... that only sends (when the producer can tell) */
/* bits 4-7 of flags: memcpy direction (enum argus_gpu_copy_dir) */
#define ARGUS_GPU_COPY_SHIFT 4

enum argus_gpu_copy_dir {
	ARGUS_GPU_COPY_OTHER = 0,
	ARGUS_GPU_COPY_HTOD = 1,
	ARGUS_GPU_COPY_DTOH = 2,
	ARGUS_GPU_COPY_DTOD = 3,
	ARGUS_GPU_COPY_HTOH = 4,
	ARGUS_GPU_COPY_PTOP = 5,
};

/* One completed GPU activity. 40 bytes. */
struct argus_gpu_rec {
	__u64 start_ns;       /* CLOCK_MONOTONIC */
	__u64 end_ns;
	__u64 bytes;          /* memcpy/memset bytes; 0 for kernels */
	__u32 correlation_id; /* links to the launching API call */
	__u32 name_id;        /* kernels: id announced by argus:gpu_name; 0 = unnamed */
	__u32 stream_id;
	__u16 device_id;
	__u8 kind;            /* enum argus_gpu_kind */
	__u8 flags;           /* ARGUS_GPU_F_* | copy dir << ARGUS_GPU_COPY_SHIFT */
};

/* Folding (gpu/gpu_fold.h). A producer may fold its compute kernels instead of
 * sending one record each: per span of back-to-back compute kernels it sends
 * one ARGUS_GPU_SPAN record (busy and idle time, kernel count) followed right
 * after it (possibly in the next batch) by its sketch entries (per kernel name and log bucket, a
 * count and a sum), two a record (ARGUS_GPU_SKETCH_PAIR) or one
 * (ARGUS_GPU_SKETCH). It still sends, one record each: NCCL and P2P kernels,
 * compute kernels longer than ARGUS_GPU_FOLD_LONG_NS, memcpys and memsets,
 * and as ARGUS_GPU_GAP records the idle gaps of at least ARGUS_GPU_GAP_MIN_NS
 * and every gap that ends at a kernel it sends. The agent's cost is then per
 * span, gap and collective, not per kernel. Its kernels carry ARGUS_GPU_F_FOLDED,
 * and their `bytes` field holds the busy time they add (see below). */
#define ARGUS_GPU_SPAN 4
#define ARGUS_GPU_SKETCH 5
#define ARGUS_GPU_GAP 6

/* A kernel record from a folding producer: busy time and the gap before it are
 * accounted by the producer; `bytes` = the time it covers that no kernel before
 * it (in start order) covered. Shares bit 4 with the copy direction, which only
 * memcpys use. */
#define ARGUS_GPU_F_FOLDED 0x10
/* ARGUS_GPU_GAP flags: the gap ends at a P2P kernel that receives (or may). */
#define ARGUS_GPU_GAP_F_BUBBLE 0x1

#define ARGUS_GPU_GAP_MIN_NS 1000000ull      /* 1 ms: shorter gaps stay inside a span */
#define ARGUS_GPU_SPAN_MAX_NS 50000000ull    /* 50 ms: a span starts at most this long after its first kernel */
#define ARGUS_GPU_FOLD_LONG_NS 1000000000ull /* 1 s: a longer compute kernel is sent on its own */
#define ARGUS_GPU_SPAN_MAX_ENTRIES 3072      /* sketch entries per span */
#define ARGUS_GPU_STEP_QUIET_NS 10000000ull  /* 10 ms without a collective kernel: the next one may start a step */
/* Sketch buckets: bucket i holds durations in (g^(i-1), g^i] ns, g = (1+e)/(1-e). */
#define ARGUS_GPU_SKETCH_REL_ERR 0.02

/* kind ARGUS_GPU_SPAN: compute kernels folded by the producer. Every duration
 * here is below 2^32 ns: a span's kernels start within ARGUS_GPU_SPAN_MAX_NS
 * of each other and each runs less than ARGUS_GPU_FOLD_LONG_NS. */
struct argus_gpu_span {
	__u64 start_ns;  /* its first kernel's start */
	__u64 end_ns;    /* the latest end among its kernels */
	__u64 kernel_ns; /* sum of its kernels' durations */
	__u32 busy_ns;   /* time its kernels cover that no earlier kernel covered */
	__u32 idle_ns;   /* gaps shorter than ARGUS_GPU_GAP_MIN_NS before its kernels */
	__u32 kernels;   /* how many kernels it folds (>= 1) */
	__u16 device_id;
	__u8 kind;       /* ARGUS_GPU_SPAN */
	__u8 flags;      /* 0 */
};

/* kind ARGUS_GPU_SKETCH: one kernel name and duration bucket of the span sent
 * just before it. */
struct argus_gpu_sketch_rec {
	__u64 start_ns;  /* the span's start */
	__u64 sum_ns;    /* sum of the durations */
	__u32 count;     /* kernels */
	__s32 bucket;    /* log bucket (ARGUS_GPU_SKETCH_REL_ERR) */
	__u32 reserved0;
	__u32 name_id;   /* as in argus_gpu_rec */
	__u32 reserved1;
	__u16 device_id;
	__u8 kind;       /* ARGUS_GPU_SKETCH */
	__u8 flags;      /* 0 */
};
/* kind ARGUS_GPU_SKETCH_PAIR (wire version 2): two sketch entries of the span
 * sent just before it in one record, half the records (and bytes) of one
 * ARGUS_GPU_SKETCH each. A folded kernel runs under ARGUS_GPU_FOLD_LONG_NS, so
 * its bucket fits 16 bits; an entry whose sum reaches 2^32 ns goes alone as
 * ARGUS_GPU_SKETCH. An entry with count 0 is none (the second of an odd one). */
#define ARGUS_GPU_SKETCH_PAIR 8

struct argus_gpu_sketch_pair {
	__u64 start_ns;   /* the span's start */
	__u32 sum_ns[2];  /* sum of the durations */
	__u32 count[2];   /* kernels; 0: no entry */
	__u32 name_id[2]; /* as in argus_gpu_rec */
	__s16 bucket[2];  /* log bucket (ARGUS_GPU_SKETCH_REL_ERR) */
	__u16 device_id;
	__u8 kind;        /* ARGUS_GPU_SKETCH_PAIR */
	__u8 flags;       /* 0 */
};

/* Listening (wire version 1, unchanged): a producer declares USDT semaphores
 * (argus_gpu_batch_semaphore, argus_gpu_name_semaphore). The kernel raises them
 * while an agent's probe is attached, so the producer knows whether anyone
 * listens. Batches fired to nobody are not lost silently: the producer counts
 * them and, once an agent listens, announces every kernel name again and sends
 * one ARGUS_GPU_UNHEARD record (alone in its batch, its `dropped` the drops of
 * that time) before anything else. */
#define ARGUS_GPU_UNHEARD 7

/* kind ARGUS_GPU_UNHEARD: what the producer fired while no agent listened. */
struct argus_gpu_unheard_rec {
	__u64 start_ns;     /* 0 */
	__u64 end_ns;       /* 0 */
	__u64 records;      /* wire records fired to nobody */
	__u64 kernels;      /* kernels among them (folded ones counted one each) */
	__u32 nccl_kernels; /* NCCL collective kernels (not P2P) among them, saturating */
	__u16 device_id;
	__u8 kind;          /* ARGUS_GPU_UNHEARD */
	__u8 flags;         /* 0 */
};

/* kind ARGUS_GPU_GAP uses struct argus_gpu_rec: [start_ns, end_ns) with no
 * kernel running, flags ARGUS_GPU_GAP_F_BUBBLE, the other fields 0. */

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(struct argus_gpu_unheard_rec) == 40 && offsetof(struct argus_gpu_unheard_rec, kind) == 38,
	      "argus_gpu_unheard_rec overlays argus_gpu_rec");
static_assert(sizeof(struct argus_gpu_rec) == 40, "argus_gpu_rec layout");
static_assert(sizeof(struct argus_gpu_sketch_pair) == 40 && offsetof(struct argus_gpu_sketch_pair, kind) == 38,
	      "argus_gpu_sketch_pair overlays argus_gpu_rec");
static_assert(sizeof(struct argus_gpu_span) == 40 && offsetof(struct argus_gpu_span, kind) == 38,
	      "argus_gpu_span overlays argus_gpu_rec");
static_assert(sizeof(struct argus_gpu_sketch_rec) == 40 && offsetof(struct argus_gpu_sketch_rec, kind) == 38 &&
		  offsetof(struct argus_gpu_sketch_rec, name_id) == 28,
	      "argus_gpu_sketch_rec overlays argus_gpu_rec");
#else
_Static_assert(sizeof(struct argus_gpu_unheard_rec) == 40 &&
		   __builtin_offsetof(struct argus_gpu_unheard_rec, kind) == 38,
	       "argus_gpu_unheard_rec overlays argus_gpu_rec");
_Static_assert(sizeof(struct argus_gpu_rec) == 40, "argus_gpu_rec layout");
_Static_assert(sizeof(struct argus_gpu_sketch_pair) == 40 &&
		   __builtin_offsetof(struct argus_gpu_sketch_pair, kind) == 38,
	       "argus_gpu_sketch_pair overlays argus_gpu_rec");
_Static_assert(sizeof(struct argus_gpu_span) == 40 && __builtin_offsetof(struct argus_gpu_span, kind) == 38,
	       "argus_gpu_span overlays argus_gpu_rec");
_Static_assert(sizeof(struct argus_gpu_sketch_rec) == 40 &&
		   __builtin_offsetof(struct argus_gpu_sketch_rec, kind) == 38 &&
		   __builtin_offsetof(struct argus_gpu_sketch_rec, name_id) == 28,
	       "argus_gpu_sketch_rec overlays argus_gpu_rec");
#endif

#endif /* ARGUS_GPU_WIRE_H */
