/* The stack sampler's wire format (bpf/py_sample.bpf.c -> the agent), on its
 * own ring buffer (py_samples), apart from the events one. Sizes asserted on
 * both sides. */
#ifndef ARGUS_BPF_ARGUS_PY_SAMPLE_H
#define ARGUS_BPF_ARGUS_PY_SAMPLE_H

#ifndef __BPF__
#include <linux/types.h>
#endif

#define ARGUS_PY_SAMPLE_MAX_FRAMES 96 /* deeper stacks are cut (innermost kept) and flagged */
#define ARGUS_PY_SAMPLE_MAX_THREADS 64 /* thread states searched for the running one */
#define ARGUS_PY_SAMPLE_RINGBUF_BYTES (2u << 20)

/* One Python frame as sampled: userspace reads the rest (names, lines). */
struct argus_py_sample_frame {
	__u64 code;  /* PyCodeObject*, its ob_type checked against PyCode_Type */
	__u64 tag;   /* ARGUS_PY_CODE_TAG(co_firstlineno, co_name) read with it */
	__u64 instr; /* 3.10: f_lasti (code units); 3.11+: the instruction pointer */
};

#define ARGUS_PY_SAMPLE_TRUNCATED 1 /* more frames than ARGUS_PY_SAMPLE_MAX_FRAMES */
#define ARGUS_PY_SAMPLE_BAD_FRAME 2 /* the walk stopped at an unreadable or invalid frame */
#define ARGUS_PY_SAMPLE_AT_OOM 4    /* not a sample: the stack where a device allocation failed out of memory */

struct argus_py_sample {
	__u32 tgid;
	__u32 tid;
	__u64 ts_ns;   /* CLOCK_MONOTONIC */
	__u16 nframes; /* innermost first */
	__u16 flags;   /* ARGUS_PY_SAMPLE_* */
	__u32 pad;
	struct argus_py_sample_frame frames[ARGUS_PY_SAMPLE_MAX_FRAMES];
};

#ifdef __cplusplus
static_assert(sizeof(struct argus_py_sample_frame) == 24, "argus_py_sample_frame layout");
static_assert(sizeof(struct argus_py_sample) == 24 + 24 * ARGUS_PY_SAMPLE_MAX_FRAMES, "argus_py_sample layout");
#else
_Static_assert(sizeof(struct argus_py_sample_frame) == 24, "argus_py_sample_frame layout");
_Static_assert(sizeof(struct argus_py_sample) == 24 + 24 * ARGUS_PY_SAMPLE_MAX_FRAMES, "argus_py_sample layout");
#endif

#endif
