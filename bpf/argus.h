/* Plain C structs and enums shared between the BPF programs and the agent.
 * Every struct here has its size asserted on both sides (see argus_layout.h). */
#ifndef ARGUS_BPF_ARGUS_H
#define ARGUS_BPF_ARGUS_H

#ifdef __BPF__
/* vmlinux.h provides the fixed-width types in BPF builds. */
#else
#include <linux/types.h> /* the same __u64 that libbpf's headers use */
#endif
#include "argus_gpu_wire.h"
#include "argus_exit.h"

#define ARGUS_CLS_NCCL 1 /* in-flight slot classes: one per library */
#define ARGUS_CLS_CUDA 2
#define ARGUS_CLS_LAUNCH 3 /* --probes deep: a kernel launch timed entry->return */
#define ARGUS_CLS_MEM 4    /* a device memory call: its arguments kept for its return */

/* Values of the tracked-tgid map. A tgid absent from the map that calls into a
 * probed library is auto-tracked (ARGUS_TGID_AUTO) and reported once. */
enum argus_tgid_state {
	ARGUS_TGID_IGNORED = 0,
	ARGUS_TGID_TRACKED = 1,
	ARGUS_TGID_AUTO = 2,
};

/* Ring-buffer event types. */
enum argus_event_type {
	ARGUS_EV_EXEC = 1,       /* any exec (or dlopen) on the node: a discovery hint */
	ARGUS_EV_EXIT = 2,       /* a tracked process ended (last thread) */
	ARGUS_EV_TGID_SEEN = 3,  /* first call from an untracked tgid into a probed library */
	ARGUS_EV_NCCL_COLL = 4,  /* a collective or p2p call entered */
	ARGUS_EV_NCCL_INIT = 5,  /* ncclCommInitRank* returned */
	ARGUS_EV_NCCL_CHILD = 10, /* ncclCommSplit or ncclCommShrink returned */
	ARGUS_EV_NCCL_INIT_ALL = 11, /* ncclCommInitAll returned: one process's whole clique */
	/* 6: retired (ncclGroupStart / ncclGroupEnd events: no detector used them) */
	ARGUS_EV_GPU_BATCH = 7,  /* argus:gpu_batch USDT: completed GPU activity records */
	ARGUS_EV_GPU_NAME = 8,   /* argus:gpu_name USDT: a kernel-name id announced */
	ARGUS_EV_CALL_DONE = 9,  /* a timed call (collective, synchronize) returned */
	ARGUS_EV_C10D_BACKEND = 12, /* a PyTorch c10d backend (ProcessGroupGloo) was made */
	ARGUS_EV_C10D_GROUP = 13,   /* a c10d process group was named or described */
	ARGUS_EV_C10D_COLL = 14,    /* a collective or p2p call entered on a c10d backend */
	ARGUS_EV_GPU_OOM = 15,      /* a device memory allocation failed with CUDA_ERROR_OUT_OF_MEMORY */
};

/* Event sources, for argus_agent_events_total{source} and ..._lost_total{source}. */
enum argus_source {
	ARGUS_SRC_PROC = 0,
	ARGUS_SRC_NCCL = 1,
	ARGUS_SRC_CUDA = 2,
	ARGUS_SRC_GPU = 3, /* GPU activity from the USDT producers (CUPTI, sim) */
	ARGUS_SRC_MAX = 4,
};

/* NCCL operations: the contract's `op` label values, in this order. */
enum argus_nccl_op {
	ARGUS_OP_ALL_REDUCE = 0,
	ARGUS_OP_ALL_GATHER = 1,
	ARGUS_OP_REDUCE_SCATTER = 2,
	ARGUS_OP_BROADCAST = 3,
	ARGUS_OP_REDUCE = 4,
	ARGUS_OP_ALL_TO_ALL = 5,
	ARGUS_OP_SEND = 6,
	ARGUS_OP_RECV = 7,
	ARGUS_OP_GATHER = 8,
	ARGUS_OP_SCATTER = 9,
	ARGUS_OP_MAX = 10,
};

/* c10d's operations are NCCL's, and one more: a backend's barrier (PyTorch's
 * process groups have one; NCCL has none). */
#define ARGUS_C10D_OP_BARRIER ARGUS_OP_MAX
#define ARGUS_C10D_OP_MAX (ARGUS_OP_MAX + 1)

/* Kinds of aggregated statistics kept per tgid in the `stats` map. */
enum argus_stat_kind {
	ARGUS_STAT_NCCL_CALLS = 1,    /* sub = op: count = calls, sum = bytes */
	ARGUS_STAT_NCCL_WAIT = 2,     /* sub = op: count = returns, sum = ns inside the call */
	ARGUS_STAT_CUDA_SYNC = 3,     /* sub = api: count = calls, sum = ns blocked */
	ARGUS_STAT_CUDA_LAUNCH = 4,   /* sub = api: count = launches (deep only) */
	ARGUS_STAT_CUDA_ERROR = 5,    /* sub = api, code = CUresult: count = calls that failed */
	ARGUS_STAT_NCCL_ERROR = 6,    /* sub = op or init api, code = ncclResult_t */
	ARGUS_STAT_CUDA_MEMCPY = 7,   /* sub = enum argus_gpu_copy_dir: count = calls, sum = bytes */
	ARGUS_STAT_CUDA_LAUNCH_TIME = 8, /* marks a launch's in-flight slot; retired as a stat: the histogram holds its sums */
	ARGUS_STAT_CUDA_LAUNCH_HIST = 9, /* sub = log2 bucket (ARGUS_LOG2_BUCKET): timed launches, sum = ns inside (deep only) */
	ARGUS_STAT_PY_GC = 10,        /* sub = generation: count = timed collections, sum = ns inside */
	ARGUS_STAT_PY_GC_HIST = 11,   /* sub = log2 bucket of one collection's pause: count, sum = ns */
	ARGUS_STAT_OFFCPU = 12,       /* sub = enum argus_offcpu_reason: count = off-CPU intervals, sum = ns off CPU */
	ARGUS_STAT_ONCPU = 13,        /* sub 0: count = slices on CPU, sum = ns on CPU (sched_switch) */
	ARGUS_STAT_BLOCK_IO = 14,     /* sub = enum argus_block_op: count = requests completed, sum = ns issue->complete */
	ARGUS_STAT_BLOCK_IO_HIST = 15, /* sub = log2 bucket of one request's latency, code = enum argus_block_op */
	ARGUS_STAT_NCCL_GROUP = 16,   /* sub 0: count = outermost ncclGroupEnd calls, sum = operations grouped in them */
	ARGUS_STAT_NCCL_GROUP_WAIT = 17, /* sub 0: count = outermost ncclGroupEnd calls timed (with operations), sum = ns inside */
	ARGUS_STAT_C10D_CALLS = 18,   /* sub = op | backend kind << 8, code|pad = the c10d backend's address (low|high 32 bits): count = calls */
	ARGUS_STAT_C10D_WAIT = 19,    /* sub = the thread's last c10d op (ARGUS_C10D_OP_MAX: none): count = Work::wait returns, sum = ns inside */
	ARGUS_STAT_GPU_ALLOC = 20,    /* sub = api: count = device allocations that succeeded, sum = bytes; also marks a memory call's in-flight slot */
	ARGUS_STAT_GPU_FREE = 21,     /* sub = api: count = frees paired with an allocation seen, sum = its bytes */
	ARGUS_STAT_GPU_FREE_UNPAIRED = 22, /* sub = api: count = frees of memory whose allocation was not seen */
	ARGUS_STAT_GPU_MAP = 23,      /* sub = api (cuMemMap, cuMemUnmap): count = calls that succeeded, sum = bytes */
};

/* Why a rank's thread was off CPU (ARGUS_STAT_OFFCPU's sub): the contract's
 * `reason` label values of argus_offcpu_seconds_total, in this order. */
enum argus_offcpu_reason {
	ARGUS_OFFCPU_RUNQUEUE = 0, /* runnable, waiting for a CPU (preempted, or woken and not yet running) */
	ARGUS_OFFCPU_IO = 1,       /* blocked in block I/O (task->in_iowait) */
	ARGUS_OFFCPU_LOCK = 2,     /* blocked in futex */
	ARGUS_OFFCPU_SLEEP = 3,    /* any other interruptible wait (sleep, poll, read on a socket, ...) */
	ARGUS_OFFCPU_OTHER = 4,    /* uninterruptible and not I/O, stopped, ... */
	ARGUS_OFFCPU_MAX = 5,
};

/* Block request operations (ARGUS_STAT_BLOCK_IO's sub): the `op` label values. */
enum argus_block_op {
	ARGUS_BLOCK_READ = 0,
	ARGUS_BLOCK_WRITE = 1,
	ARGUS_BLOCK_FLUSH = 2,
	ARGUS_BLOCK_DISCARD = 3,
	ARGUS_BLOCK_OTHER = 4,
	ARGUS_BLOCK_OP_MAX = 5,
};

/* Bucket of a duration in the log2 histograms: its bit length, so that bucket
 * b holds durations in [2^(b-1), 2^b) ns (bucket 0: 0 ns). */
#define ARGUS_LOG2_BUCKETS 65

/* Named BPF error counters (an array map indexed by this enum). Every failure
 * path in BPF increments one; the agent exports them. */
enum argus_bpf_error {
	ARGUS_ERR_RINGBUF_PROC = 0,   /* ring buffer full: proc events lost */
	ARGUS_ERR_RINGBUF_NCCL = 1,   /* ring buffer full: NCCL events lost */
	ARGUS_ERR_RINGBUF_CUDA = 2,   /* ring buffer full: CUDA events lost */
	ARGUS_ERR_STATS_FULL = 3,     /* stats map full: an aggregate was not counted */
	ARGUS_ERR_INFLIGHT_FULL = 4,  /* in-flight (entry->return) map full: a duration lost */
	ARGUS_ERR_TRACKED_FULL = 5,   /* tracked-tgid map full: a process not auto-tracked */
	ARGUS_ERR_READ_USER = 6,      /* bpf_probe_read_user failed */
	ARGUS_ERR_RETURN_UNMATCHED = 7, /* a return probe without its entry (attached mid-call) */
	ARGUS_ERR_RINGBUF_GPU = 8,    /* ring buffer full: GPU activity batches lost */
	ARGUS_ERR_GPU_BATCH_TRUNCATED = 9, /* a producer sent more than ARGUS_GPU_BATCH_MAX records */
	ARGUS_ERR_GPU_READ = 10,      /* a GPU batch or name could not be read from the producer */
	ARGUS_ERR_PY_SAMPLES_LOST = 11, /* sample ring buffer full: a Python stack sample lost */
	ARGUS_ERR_SCHED_MAP_FULL = 12,  /* per-thread scheduling state map full: an off-CPU interval not timed */
	ARGUS_ERR_STEALER_MAP_FULL = 13, /* CPU stealer map full: a runqueue wait not attributed */
	ARGUS_ERR_EXIT_INFO_FULL = 14,  /* exit cause map full: a fatal signal or OOM kill not remembered */
	ARGUS_ERR_TCP_MAP_FULL = 15,    /* TCP retransmit map full: a retransmit not counted */
	ARGUS_ERR_BLOCK_MAP_FULL = 16,  /* block request map full: a request's latency not timed */
	ARGUS_ERR_GPU_ALLOC_MAP_FULL = 17, /* device allocation map full: an allocation counted, not held (its free will be unpaired) */
	ARGUS_ERR_MAX = 18,
};

/* CUDA driver APIs the agent probes. Variants (_v2, _ptsz, _ptds) share the id of
 * their base API, so that the `api` label stays stable across toolkits. */
enum argus_cuda_api {
	ARGUS_CU_STREAM_SYNCHRONIZE = 0,
	ARGUS_CU_EVENT_SYNCHRONIZE = 1,
	ARGUS_CU_CTX_SYNCHRONIZE = 2,
	ARGUS_CU_LAUNCH_KERNEL = 3,
	ARGUS_CU_LAUNCH_KERNEL_EX = 4,
	ARGUS_CU_LAUNCH_COOPERATIVE_KERNEL = 5,
	ARGUS_CU_MEM_ALLOC = 6,
	ARGUS_CU_MEM_ALLOC_ASYNC = 7,
	ARGUS_CU_MEM_ALLOC_MANAGED = 8,
	ARGUS_CU_MEM_ALLOC_HOST = 9,
	ARGUS_CU_INIT = 10,
	ARGUS_CU_CTX_CREATE = 11,
	ARGUS_CU_MEM_ALLOC_PITCH = 12,
	ARGUS_CU_MEMCPY_HTOD = 13,
	ARGUS_CU_MEMCPY_DTOH = 14,
	ARGUS_CU_MEMCPY_DTOD = 15,
	ARGUS_CU_MEMCPY_HTOD_ASYNC = 16,
	ARGUS_CU_MEMCPY_DTOH_ASYNC = 17,
	ARGUS_CU_MEMCPY_DTOD_ASYNC = 18,
	ARGUS_CU_MEM_CREATE = 19,      /* physical memory of the virtual memory API (expandable segments) */
	ARGUS_CU_MEM_FREE = 20,
	ARGUS_CU_MEM_FREE_ASYNC = 21,
	ARGUS_CU_MEM_RELEASE = 22,
	ARGUS_CU_MEM_MAP = 23,
	ARGUS_CU_MEM_UNMAP = 24,
	ARGUS_CU_MEM_GET_INFO = 25,    /* read for the GPU's total memory */
	ARGUS_CU_DEVICE_TOTAL_MEM = 26, /* ... likewise */
	ARGUS_CU_API_MAX = 27,
};

/* How a communicator was made: the NCCL API that returned it (sub of
 * ARGUS_STAT_NCCL_ERROR beyond ARGUS_OP_MAX). */
enum argus_nccl_init_api {
	ARGUS_NCCL_INIT_RANK = 0,
	ARGUS_NCCL_INIT_RANK_CONFIG = 1,
	ARGUS_NCCL_INIT_RANK_SCALABLE = 2,
	ARGUS_NCCL_COMM_SPLIT = 3,    /* from a parent: ranks of one color */
	ARGUS_NCCL_COMM_SHRINK = 4,   /* from a parent: its ranks less an excluded list */
	ARGUS_NCCL_COMM_INIT_ALL = 5, /* one process, one communicator per device */
	ARGUS_NCCL_INIT_API_MAX = 6,
};

/* ncclGroupEnd's errors (ARGUS_STAT_NCCL_ERROR's sub, past the init APIs):
 * where grouped operations fail, and where asynchronous errors surface. */
#define ARGUS_NCCL_ERR_GROUP_END ((int)ARGUS_OP_MAX + (int)ARGUS_NCCL_INIT_API_MAX)

/* ncclInProgress: a non-blocking communicator's init (or split) goes on after
 * the call returns; not a failure. */
#define ARGUS_NCCL_IN_PROGRESS 7

/* ncclCommSplit's color of a rank that joins no child (nccl.h's NCCL_SPLIT_NOCOLOR). */
#define ARGUS_NCCL_SPLIT_NOCOLOR (-1)

/* A uprobe's bpf_cookie packs what the generic program needs to know about the
 * probed function: which op/api it is and where its arguments live.
 * bits 0-7: op or api id; 8-11: count arg; 12-15: datatype arg; 16-19: comm arg;
 * 20-23: flags; 24-27: peer arg (ncclSend/ncclRecv; 0: none). Arg indices are
 * 1-based SysV positions (7 = first stack slot). */
#define ARGUS_COOKIE(id, count_arg, dtype_arg, comm_arg, flags) \
	((__u64)(id) | ((__u64)(count_arg) << 8) | ((__u64)(dtype_arg) << 12) | \
	 ((__u64)(comm_arg) << 16) | ((__u64)(flags) << 20))
#define ARGUS_COOKIE_P2P(id, count_arg, dtype_arg, comm_arg, peer_arg) \
	(ARGUS_COOKIE(id, count_arg, dtype_arg, comm_arg, 0) | ((__u64)(peer_arg) << 24))
#define ARGUS_COOKIE_ID(c) ((__u32)((c) & 0xff))
#define ARGUS_COOKIE_COUNT_ARG(c) ((__u32)(((c) >> 8) & 0xf))
#define ARGUS_COOKIE_DTYPE_ARG(c) ((__u32)(((c) >> 12) & 0xf))
#define ARGUS_COOKIE_COMM_ARG(c) ((__u32)(((c) >> 16) & 0xf))
#define ARGUS_COOKIE_FLAGS(c) ((__u32)(((c) >> 20) & 0xf))
#define ARGUS_COOKIE_PEER_ARG(c) ((__u32)(((c) >> 24) & 0xf))
/* Flags of the memcpy program: bits 0-2 the direction (enum argus_gpu_copy_dir),
 * bit 3 set when the byte count is a 32-bit `unsigned int` (the unversioned
 * legacy ABI: the register's upper half is garbage). */
#define ARGUS_COOKIE_COPY_DIR(flags) ((flags) & 0x7)
#define ARGUS_COOKIE_COPY_U32 8

/* Flags of the device memory programs (bpf/cuda_mem.bpf.c): where the call
 * keeps what it hands out, frees or reports. */
enum argus_mem_shape {
	ARGUS_MEM_ALLOC = 1,       /* (CUdeviceptr *out, size_t bytes, ...) */
	ARGUS_MEM_ALLOC_U32 = 2,   /* the legacy 32-bit ABI: (unsigned *out, unsigned bytes) */
	ARGUS_MEM_ALLOC_PITCH = 3, /* (CUdeviceptr *out, size_t *pitch, width, height, ...): pitch x height */
	ARGUS_MEM_CREATE = 4,      /* (CUmemGenericAllocationHandle *out, size_t bytes, ...) */
	ARGUS_MEM_FREE = 5,        /* (CUdeviceptr, ...) */
	ARGUS_MEM_FREE_U32 = 6,    /* (unsigned) */
	ARGUS_MEM_RELEASE = 7,     /* (CUmemGenericAllocationHandle) */
	ARGUS_MEM_MAP = 8,         /* cuMemMap / cuMemUnmap: (CUdeviceptr, size_t bytes, ...) */
	ARGUS_MEM_INFO = 9,        /* cuMemGetInfo: (size_t *free, size_t *total) */
	ARGUS_MEM_TOTAL = 10,      /* cuDeviceTotalMem: (size_t *bytes, CUdevice) */
};

/* What an allocation's key names: device addresses and the virtual memory
 * API's handles are apart, so neither pairs with the other. */
enum argus_mem_family {
	ARGUS_MEM_FAMILY_ADDRESS = 0,
	ARGUS_MEM_FAMILY_HANDLE = 1,
};

#define ARGUS_NCCL_UID_PREFIX 16 /* bytes of ncclUniqueId copied: identifies a communicator job-wide */

struct argus_stat_key {
	__u32 tgid;
	__u16 kind; /* enum argus_stat_kind */
	__u16 sub;  /* op or api id */
	__s32 code; /* return code for error kinds, else 0 */
	__u32 pad;
};

struct argus_stat_val {
	__u64 count;
	__u64 sum; /* bytes or nanoseconds, per kind */
};

struct argus_inflight_key {
	__u64 pid_tgid;
	__u32 cls; /* one slot per library class, so a CUDA call inside NCCL init keeps both */
	__u32 pad;
};

/* In-flight call: entry state kept per thread until the return probe. */
struct argus_inflight {
	__u64 start_ns;
	__u64 ptr;    /* ncclCommInitRank*, split, shrink: the out-pointer to read at return;
	               * ncclCommInitAll: the array; collectives: the comm */
	__u32 id;     /* op or api id */
	__u32 kind;   /* enum argus_stat_kind for the duration */
	__s32 rank;   /* ncclCommInitRank*: rank argument; split: color; shrink: excluded count */
	__s32 nranks; /* ncclCommInitRank*: nranks argument; InitAll: ndev; split: key */
	union {
		__u8 uid[ARGUS_NCCL_UID_PREFIX]; /* ncclCommInitRank* */
		struct {
			__u64 parent; /* split, shrink: the parent communicator */
			__u64 list;   /* shrink: excludeRanksList (NCCL sorts it in place: read at return) */
		} child;
	};
};

struct argus_event_header {
	__u32 type; /* enum argus_event_type */
	__u32 tgid;
	__u32 tid;
	__u32 pad;
	__u64 ts_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
};

/* flags of an exec event: which hint it is */
#define ARGUS_EXEC_F_LINK_MAP 1 /* not an exec: the loader changed the link map (dlopen, dlclose) */

struct argus_exec_event {
	struct argus_event_header hdr;
	__u32 ppid;  /* 0 for a link-map change */
	__u32 flags; /* ARGUS_EXEC_F_* */
	char comm[16];
};

struct argus_exit_event {
	struct argus_event_header hdr;
	__s32 exit_code; /* task->exit_code: (status << 8) | signal */
	__u32 pad;
	struct argus_exit_info cause; /* from the exit_info map; zero when nothing was remembered */
};

struct argus_tgid_seen_event {
	struct argus_event_header hdr;
	__u32 source; /* enum argus_source of the first probe that saw it */
	__u32 pad;
};

/* What the detectors need of a collective: when (hdr.ts_ns), on which
 * communicator, and its number there. Calls and bytes are aggregated in BPF
 * (ARGUS_STAT_NCCL_CALLS), never counted from events (`bytes` here only
 * numbers a late-attached rank's calls: userspace/comms/seq_aligner.h). */
struct argus_nccl_coll_event {
	struct argus_event_header hdr;
	__u64 comm; /* ncclComm_t handle (a pointer in the rank's address space) */
	__u64 seq;  /* collectives on this communicator by this process, from 1; 0 for p2p.
	             * Counted in BPF so that a lost event does not shift later numbers. */
	__u32 op;   /* enum argus_nccl_op */
	__s32 peer; /* ncclSend/ncclRecv: the other side's rank in comm; -1 for collectives */
	__u64 bytes; /* count x datatype size: with op, the same on every rank at the same
	              * number (NCCL's rule), so late-attached ranks can be numbered alike */
	__u64 group; /* the calling thread's outermost ncclGroupStart..ncclGroupEnd it was
	              * made in, numbered from 1 per thread (NCCL launches the group's
	              * operations together at its end); 0 outside a group */
};

/* Kinds of per-(process, communicator) counters in the coll_seq map. */
enum argus_seq_kind {
	ARGUS_SEQ_COLL = 0,   /* collectives made on the communicator */
	ARGUS_SEQ_SPLIT = 1,  /* ncclCommSplit calls with it as the parent */
	ARGUS_SEQ_SHRINK = 2, /* ncclCommShrink calls with it as the parent */
};

/* Key of a per-(process, communicator) counter. */
struct argus_seq_key {
	__u32 tgid;
	__u32 kind; /* enum argus_seq_kind */
	__u64 comm;
};

/* A thread's NCCL group state (the nccl_group map, per thread): ncclGroupStart
 * nests, and only the outermost ncclGroupEnd launches. */
struct argus_group_state {
	__u32 depth;  /* ncclGroupStart calls not yet ended */
	__u32 ops;    /* collectives and p2p calls recorded in the open group */
	__u64 number; /* the thread's outermost groups so far: the open one's number */
	__u64 comm;   /* the communicator of the open group's first operation: its wait is named by it */
};

struct argus_nccl_init_event {
	struct argus_event_header hdr;
	__u64 comm; /* the ncclComm_t written through the out-pointer */
	__s32 rank;
	__s32 nranks;
	__s32 result; /* ncclResult_t */
	__u32 api;    /* enum argus_nccl_init_api */
	__u8 uid[ARGUS_NCCL_UID_PREFIX];
};

/* Most excluded ranks a shrink event carries (the name hashes them, so a
 * longer list is named by its count and these first ones). */
#define ARGUS_NCCL_EXCLUDE_MAX 32

/* ncclCommSplit / ncclCommShrink returned. A child's name is derived from its
 * parent's name, the n-th split (or shrink) of that parent in this process and
 * the color (or excluded ranks): NCCL requires every rank of the parent to
 * call them in the same order, so every member derives the same name alone. */
struct argus_nccl_child_event {
	struct argus_event_header hdr;
	__u64 comm;        /* *newcomm at return; 0 for NOCOLOR, on failure, or when NCCL fills it
	                    * later (inside a group, or non-blocking) */
	__u64 parent;      /* the parent ncclComm_t */
	__u64 newcomm_ptr; /* where NCCL writes the child's handle */
	__u64 nth;         /* this process's splits (or shrinks) of the parent so far, this one
	                    * included (counted in BPF: a lost event does not shift the next) */
	__s32 result;      /* ncclResult_t */
	__u32 api;         /* ARGUS_NCCL_COMM_SPLIT or ARGUS_NCCL_COMM_SHRINK */
	__s32 color;       /* split: the color (ARGUS_NCCL_SPLIT_NOCOLOR: no child); shrink: 0 */
	__s32 key;         /* split: the key that orders the child's ranks */
	__s32 n_excluded;  /* shrink: excludeRanksCount as passed */
	__u32 pad;
	__s32 excluded[ARGUS_NCCL_EXCLUDE_MAX]; /* shrink: the first min(n_excluded, MAX), as NCCL left
	                                         * them (it sorts the list; the agent sorts again) */
};

/* Most communicators an ncclCommInitAll event carries. */
#define ARGUS_NCCL_INIT_ALL_MAX 16

/* ncclCommInitAll returned: ndev communicators of one clique, all in this
 * process, comms[i] being rank i. */
struct argus_nccl_init_all_event {
	struct argus_event_header hdr;
	__s32 result; /* ncclResult_t */
	__s32 ndev;   /* as passed; comms holds the first min(ndev, MAX) */
	__u64 comms[ARGUS_NCCL_INIT_ALL_MAX];
};

/* argus:gpu_batch, copied whole: the header, then `n` wire records. Only
 * offsetof(recs) + n * sizeof(rec) bytes are sent. */
struct argus_gpu_batch_event {
	struct argus_event_header hdr;
	__u32 n;         /* records that follow */
	__u32 sent;      /* records the producer passed (> n when truncated) */
	__u64 dropped;   /* records the producer lost before this batch */
	struct argus_gpu_rec recs[ARGUS_GPU_BATCH_MAX];
};

struct argus_gpu_name_event {
	struct argus_event_header hdr;
	__u32 name_id;
	__u32 pad;
	char name[ARGUS_GPU_NAME_MAX]; /* NUL-terminated, truncated */
};

/* A timed call returned: its span, for the trace and the straggler's
 * synchronize share (collectives and synchronize waits, never launches). Sent
 * only for a call that failed or lasted argus_span_min_ns or more (rodata set
 * by the loader from --span-min-us, ARGUS_SPAN_MIN_NS by default): a real collective returns once
 * enqueued, in microseconds (REAL-SEMANTICS.md), and a span that short shows
 * nothing at a step's scale. Shorter calls still add to their aggregates (count
 * and time) in BPF, and the trace draws a collective's call from its entry
 * event. */
#define ARGUS_SPAN_MIN_NS 50000ULL
/* A hot record wakes the agent once the ring buffer holds more than
 * 1/argus_ring_wake_divisor of its size (rodata, this by default): see
 * argus_submit_hot in helpers.bpf.h. */
#define ARGUS_RING_WAKE_DIVISOR 8
struct argus_call_done_event {
	struct argus_event_header hdr; /* ts_ns = return time */
	__u64 start_ns;
	__u32 cls;  /* ARGUS_CLS_NCCL or ARGUS_CLS_CUDA */
	__u32 kind; /* enum argus_stat_kind of the duration */
	__u32 id;   /* op or api id */
	__s32 ret;  /* return code */
	__u64 ptr;  /* collectives: the communicator */
};

/* PyTorch's c10d layer (libtorch_cpu, libtorch_cuda): process groups seen
 * from outside. */
enum argus_c10d_backend_kind {
	ARGUS_C10D_GLOO = 1,
	ARGUS_C10D_NCCL = 2, /* ProcessGroupNCCL: its calls are NCCL's calls, on its thread */
};

/* A backend constructed: its rank and size in its group. The group's name
 * comes after (ProcessGroup::setGroupName, on the same thread), so the agent
 * names the backends made since a thread's last naming after it. */
struct argus_c10d_backend_event {
	struct argus_event_header hdr;
	__u64 backend; /* `this`: the address every collective on it is called with */
	__s32 rank;
	__s32 size;
	__u32 kind; /* enum argus_c10d_backend_kind */
	__u32 pad;
};

enum argus_c10d_text {
	ARGUS_C10D_GROUP_NAME = 0, /* ProcessGroup::setGroupName: the same on every member */
	ARGUS_C10D_GROUP_DESC = 1, /* ProcessGroup::setGroupDesc: what the framework calls it */
};
#define ARGUS_C10D_TEXT_MAX 64

struct argus_c10d_group_event {
	struct argus_event_header hdr;
	__u64 group; /* the ProcessGroup's address */
	__u32 what;  /* enum argus_c10d_text */
	__u32 len;   /* the string's length (text holds at most ARGUS_C10D_TEXT_MAX - 1 of it) */
	char text[ARGUS_C10D_TEXT_MAX];
};

struct argus_c10d_coll_event {
	struct argus_event_header hdr;
	__u64 backend;
	__u64 seq;  /* collectives on this backend by this process, from 1; 0 for p2p and NCCL's backend */
	__u32 op;   /* enum argus_nccl_op, or ARGUS_C10D_OP_BARRIER */
	__s32 peer; /* send/recv: the other side's rank in the group; -1 otherwise */
	__u32 kind; /* enum argus_c10d_backend_kind: whose method was called */
	__u32 pad;
};

/* One live device allocation (the gpu_allocs map): paired with its free by
 * (process, family, address or handle). */
struct argus_gpu_alloc_key {
	__u32 tgid;
	__u32 family; /* enum argus_mem_family */
	__u64 addr;   /* the device address, or the cuMemCreate handle */
};

struct argus_gpu_alloc {
	__u64 bytes;
	__u32 api; /* enum argus_cuda_api that made it */
	__u32 pad;
};

/* Per process (the gpu_mem map): device memory held through the driver. */
struct argus_gpu_mem {
	__s64 held;  /* allocations seen less their frees (bytes) */
	__u64 peak;  /* the most held */
	__u64 total; /* the GPU's total memory, as the process's own cuMemGetInfo / cuDeviceTotalMem returned it; 0 unknown */
	__u64 pad;
};

/* An allocation failed with CUDA_ERROR_OUT_OF_MEMORY: what it asked for and
 * what the process held then. */
struct argus_gpu_oom_event {
	struct argus_event_header hdr;
	__u64 asked;  /* bytes requested */
	__s64 held;   /* held before the call */
	__u64 peak;
	__u64 total;  /* 0 unknown */
	__u32 api;    /* enum argus_cuda_api */
	__s32 result; /* CUresult */
};

/* Both compilers check the layout: BPF (clang -target bpf) and the agent (g++). */
#ifdef __cplusplus
#define ARGUS_ASSERT_SIZE(type, size) static_assert(sizeof(struct type) == (size), #type " layout")
#else
#define ARGUS_ASSERT_SIZE(type, size) _Static_assert(sizeof(struct type) == (size), #type " layout")
#endif
ARGUS_ASSERT_SIZE(argus_stat_key, 16);
ARGUS_ASSERT_SIZE(argus_stat_val, 16);
ARGUS_ASSERT_SIZE(argus_inflight, 48);
ARGUS_ASSERT_SIZE(argus_inflight_key, 16);
ARGUS_ASSERT_SIZE(argus_event_header, 24);
ARGUS_ASSERT_SIZE(argus_exec_event, 48);
ARGUS_ASSERT_SIZE(argus_exit_event, 64);
ARGUS_ASSERT_SIZE(argus_tgid_seen_event, 32);
ARGUS_ASSERT_SIZE(argus_nccl_coll_event, 64);
ARGUS_ASSERT_SIZE(argus_seq_key, 16);
ARGUS_ASSERT_SIZE(argus_group_state, 24);
ARGUS_ASSERT_SIZE(argus_nccl_child_event, 80 + 4 * ARGUS_NCCL_EXCLUDE_MAX);
ARGUS_ASSERT_SIZE(argus_nccl_init_all_event, 32 + 8 * ARGUS_NCCL_INIT_ALL_MAX);
ARGUS_ASSERT_SIZE(argus_nccl_init_event, 64);
ARGUS_ASSERT_SIZE(argus_gpu_batch_event, 40 + 40 * ARGUS_GPU_BATCH_MAX);
ARGUS_ASSERT_SIZE(argus_gpu_name_event, 32 + ARGUS_GPU_NAME_MAX);
ARGUS_ASSERT_SIZE(argus_call_done_event, 56);
ARGUS_ASSERT_SIZE(argus_c10d_backend_event, 48);
ARGUS_ASSERT_SIZE(argus_c10d_group_event, 104);
ARGUS_ASSERT_SIZE(argus_c10d_coll_event, 56);
ARGUS_ASSERT_SIZE(argus_gpu_alloc_key, 16);
ARGUS_ASSERT_SIZE(argus_gpu_alloc, 16);
ARGUS_ASSERT_SIZE(argus_gpu_mem, 32);
ARGUS_ASSERT_SIZE(argus_gpu_oom_event, 64);

#endif /* ARGUS_BPF_ARGUS_H */
