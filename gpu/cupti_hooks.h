/* The C interface libargus-cupti.so exports besides InitializeInjection and
 * argus_gpu_wire_version: hooks for tests, benches and the agent-side
 * integration test. Resolve them with dlsym; none of them needs a GPU. */
#ifndef ARGUS_CUPTI_HOOKS_H
#define ARGUS_CUPTI_HOOKS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct argus_cupti_stats {
	uint64_t records;   /* wire records handed to argus:gpu_batch while an agent listened */
	uint64_t batches;   /* argus:gpu_batch fires */
	uint64_t names;     /* argus:gpu_name fires */
	uint64_t skipped;   /* CUPTI records of kinds we do not convert */
	uint64_t untimed;   /* records CUPTI gave without timestamps */
	uint64_t dropped;   /* sum of the `dropped` argument fired */
	uint64_t buffers;   /* activity buffers processed (CUPTI's and the hook's) */
	uint64_t buffer_denied; /* buffer requests declined (pool full / no memory) */
	int32_t active;     /* 1: CUPTI collection is on */
	int32_t disabled;   /* 1: disabled (see the one "argus-cupti:" stderr line) */
	int32_t clock_identity; /* 1: CUPTI stamps CLOCK_MONOTONIC itself (timestamp callback) */
	int32_t pad;
	int64_t clock_offset_ns; /* else: added to CUPTI timestamps */
	/* appended: callers built before these copy less */
	uint64_t kernels;   /* kernel activities converted (folded or not) */
	uint64_t folded;    /* ... of them folded into span records (gpu/gpu_fold.h) */
	uint64_t spans;     /* span records fired */
	int32_t folding;    /* 1: folding on (the default; ARGUS_CUPTI_FOLD=0 sends every kernel) */
	int32_t listening;  /* 1: an agent's probe is attached (the USDT semaphore is raised) */
	uint64_t unheard;   /* records produced while no agent listened (reported to the next one) */
};

/* Runs the buffer-completed path (walk, convert, gpu_name + gpu_batch USDT
 * fires) on `buffer`: records of CUDA 13's CUPTI structs back to back, each
 * 8-byte aligned, exactly as CUPTI fills its buffers. Works whether or not CUPTI
 * initialized; timestamps are mapped with the current clock (identity before
 * InitializeInjection succeeded). Returns the records converted, or -1.
 * Does not take ownership of the buffer. */
typedef int (*argus_cupti_process_buffer_fn)(uint8_t *buffer, size_t valid_size);

/* Copies min(size, sizeof) bytes of the counters; returns 0. */
typedef int (*argus_cupti_stats_fn)(struct argus_cupti_stats *out, size_t size);

int argus_cupti_process_buffer(uint8_t *buffer, size_t valid_size);
int argus_cupti_stats(struct argus_cupti_stats *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* ARGUS_CUPTI_HOOKS_H */
