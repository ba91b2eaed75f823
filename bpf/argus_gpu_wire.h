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

#define ARGUS_GPU_WIRE_VERSION 1
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

#ifdef __cplusplus
static_assert(sizeof(struct argus_gpu_rec) == 40, "argus_gpu_rec layout");
#else
_Static_assert(sizeof(struct argus_gpu_rec) == 40, "argus_gpu_rec layout");
#endif

#endif /* ARGUS_GPU_WIRE_H */
