/* Folding GPU activity in the producer (bpf/argus_gpu_wire.h, "Folding").
 *
 * The producer (libargus-cupti.so, the sim's emulated GPU) hands its completed
 * records to a folder instead of the USDT probe. The folder keeps NCCL/P2P
 * kernels, long kernels, copies and memsets as they are, turns runs of compute
 * kernels into one span record plus sketch records (per kernel name and
 * duration bucket), and sends idle gaps of at least ARGUS_GPU_GAP_MIN_NS and
 * those that end at a kept kernel as gap records. A span ends at a gap record,
 * at the first kept kernel after ARGUS_GPU_STEP_QUIET_NS without one (where a
 * step likely starts), after ARGUS_GPU_SPAN_MAX_NS, at ARGUS_GPU_SPAN_MAX_ENTRIES
 * sketch records, and at a producer buffer's end only once it began
 * ARGUS_GPU_SPAN_MAX_NS before (argus_fold_end_buffer): a span goes on across
 * small buffers, so what crosses is per span, not per buffer. It computes busy and idle
 * time exactly as the agent would for records in start order, so the agent's
 * busy, idle and bubble figures are the same while its work is per span.
 *
 * Plain C, no allocation, no clock, no I/O: the producer calls it under its own
 * lock and unit tests drive it with hand-built records. */
#ifndef ARGUS_GPU_FOLD_H
#define ARGUS_GPU_FOLD_H

#include <stddef.h>
#include <stdint.h>

#include "bpf/argus_gpu_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ARGUS_FOLD_SLOTS 4096 /* hash slots for a span's (name, bucket) pairs; at most ARGUS_GPU_SPAN_MAX_ENTRIES used */

/* Where folded batches go: at most ARGUS_GPU_BATCH_MAX records, `dropped` as
 * in argus:gpu_batch. A span's sketch records come right after it, possibly in
 * the next batch. */
typedef void (*argus_fold_emit_fn)(void *ctx, const struct argus_gpu_rec *recs, uint32_t n, uint64_t dropped);

struct argus_fold_slot {
	uint64_t sum_ns;
	uint32_t name_id;
	int32_t bucket;
	uint32_t count; /* 0: free */
};

struct argus_fold_stats {
	uint64_t kernels_in; /* kernel records folded or kept */
	uint64_t folded;     /* ... folded into spans */
	uint64_t spans;
	uint64_t sketch_recs;    /* wire records (ARGUS_GPU_SKETCH_PAIR, or ARGUS_GPU_SKETCH for a large sum) */
	uint64_t sketch_entries; /* (name, bucket) entries in them */
	uint64_t gaps;
	uint64_t batches;    /* emit calls */
	uint64_t records_out;
	uint64_t carried;    /* buffer ends that kept a span open into the next buffer */
};

struct argus_gpu_folder {
	argus_fold_emit_fn emit;
	void *ctx;
	uint64_t frontier_ns;       /* latest end of any kernel seen */
	uint64_t last_alone_ns;     /* latest start of a kernel sent on its own */
	int open;                   /* a span is open */
	struct argus_gpu_span span; /* ... this one */
	uint32_t nused;             /* slots in use */
	uint16_t used[ARGUS_GPU_SPAN_MAX_ENTRIES]; /* their indices, in first-use order */
	struct argus_fold_slot slots[ARGUS_FOLD_SLOTS];
	struct argus_gpu_rec out[ARGUS_GPU_BATCH_MAX];
	uint32_t nout;
	uint32_t after_span; /* out[after_span..nout): sent after the open span began; they wait for it */
	uint64_t dropped; /* reported with the next batch */
	struct argus_fold_stats stats;
};

void argus_fold_init(struct argus_gpu_folder *f, argus_fold_emit_fn emit, void *ctx);
/* Folds `n` records (sorted by start here, in place). `dropped`: records the
 * producer lost before them. Emits whenever a batch fills. */
void argus_fold_add(struct argus_gpu_folder *f, struct argus_gpu_rec *recs, size_t n, uint64_t dropped);
/* The end of a producer buffer at `now_ns` (CLOCK_MONOTONIC, the records'
 * clock). A span that began ARGUS_GPU_SPAN_MAX_NS or more before now_ns (or
 * after it by as much: clocks that disagree) is closed and everything pending
 * emitted, as argus_fold_flush does. A younger span stays open for the next
 * buffer, and with it the records that came after it, so the agent gets them
 * in the same order as from one long buffer; what came before it is emitted.
 * Producers also call it with no buffer (n = 0 to add) on their periodic flush,
 * so a span waits at most ARGUS_GPU_SPAN_MAX_NS plus one flush period. */
void argus_fold_end_buffer(struct argus_gpu_folder *f, uint64_t now_ns);
/* Closes the open span and emits everything pending (a batch with n = 0 when
 * only drops are left to report): at exit, and where no clock is at hand. */
void argus_fold_flush(struct argus_gpu_folder *f);
/* The sketch bucket of a duration: the agent's StepSketch::bucket_of. */
int32_t argus_fold_bucket(uint64_t duration_ns);

/* What a producer fired while no agent listened (bpf/argus_gpu_wire.h, "Listening"). */
struct argus_unheard {
	uint64_t records, kernels, dropped;
	uint32_t nccl_kernels;
	int names_stale; /* names announced to nobody (or to an agent that left): announce all again */
};
/* A batch fired to nobody. */
void argus_unheard_add(struct argus_unheard *u, const struct argus_gpu_rec *recs, uint32_t n, uint64_t dropped);
/* Once someone listens: 1 and the ARGUS_GPU_UNHEARD record (and its batch's
 * `dropped`) when anything was counted, reset; 0 when nothing was. */
int argus_unheard_take(struct argus_unheard *u, struct argus_gpu_rec *out, uint64_t *dropped);

#ifdef __cplusplus
}
#endif

#endif /* ARGUS_GPU_FOLD_H */
