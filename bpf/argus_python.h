/* Plain C structs shared between the Python-layer BPF programs (GC probes,
 * the stack sampler) and the agent. Sizes asserted on both sides. */
#ifndef ARGUS_BPF_ARGUS_PYTHON_H
#define ARGUS_BPF_ARGUS_PYTHON_H

#ifndef __BPF__
#include <linux/types.h>
#endif

#define ARGUS_PY_NO_OFFSET 0xffff /* an optional field this version lacks */

/* Value of the py_procs map (key: tgid), written by the agent once it has
 * located a tracked rank's interpreter. Addresses are in the process; offsets
 * come from userspace/python/py_runtime.h's PyLayout. */
struct argus_py_proc {
	__u64 runtime_addr;   /* _PyRuntime */
	__u64 gc_stats_addr;  /* &generation_stats[0] of the main interpreter; 0: not yet known */
	__u64 code_type_addr; /* PyCode_Type: validates a frame's code object */
	__u32 version;        /* 0x030b for 3.11 */
	__u32 flags;          /* ARGUS_PY_F_* */
	__u16 runtime_interpreters_head;
	__u16 interp_threads_head;
	__u16 tstate_next;
	__u16 tstate_thread_id;       /* pthread_t, equal to the thread's fsbase on x86-64 */
	__u16 tstate_frame;
	__u16 cframe_current_frame;   /* ARGUS_PY_NO_OFFSET: tstate_frame points at the frame itself */
	__u16 frame_code;
	__u16 frame_previous;
	__u16 frame_instr;
	__u16 frame_owner;            /* ARGUS_PY_NO_OFFSET on 3.10 */
	__u16 code_firstlineno;
	__u16 code_name;
	__u16 code_bytecode;          /* 0 on 3.10 */
	__u8 owner_to_skip;           /* 0xff: none (3.12+: 3, frames owned by the C stack) */
	__u8 instr_is_lasti;          /* 3.10: frame_instr is f_lasti (int, code units) */
	__u32 pad;
};

/* The newest absolute GC counters BPF saw per tgid (py_gc_snap map): each
 * generation's `collections`, read at a collection's return. */
struct argus_py_gc_snap {
	__s64 collections[3];
	__u64 updated_ns; /* bpf_ktime_get_ns of the read; 0: never */
};
#define ARGUS_PY_GC_STATS_STRIDE 24 /* sizeof(struct gc_generation_stats): collections first */

#define ARGUS_PY_F_GC_BY_USDT 1 /* GC timed by python:gc__start/gc__done */

/* A sampled frame's validation tag: the code object's co_firstlineno in the
 * high half, the low 32 bits of its co_name pointer in the low half. Userspace
 * re-reads the code object and trusts its cache only when the tag matches. */
#define ARGUS_PY_CODE_TAG(firstlineno, name_ptr) \
	((((__u64)(__u32)(firstlineno)) << 32) | (__u64)(__u32)(name_ptr))

#ifdef __cplusplus
static_assert(sizeof(struct argus_py_proc) == 64, "argus_py_proc layout");
static_assert(sizeof(struct argus_py_gc_snap) == 32, "argus_py_gc_snap layout");
#else
_Static_assert(sizeof(struct argus_py_proc) == 64, "argus_py_proc layout");
_Static_assert(sizeof(struct argus_py_gc_snap) == 32, "argus_py_gc_snap layout");
#endif

#endif
