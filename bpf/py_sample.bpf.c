/* The Python stack sampler: a perf event (CPU clock, a low frequency, every
 * CPU) fires in whatever runs; for a thread of a Python rank (py_procs) it
 * finds the thread's state (tstate->thread_id equals the thread's fsbase on
 * x86-64), walks the frame chain and sends code objects, validation tags and
 * instruction values on the py_samples ring buffer. Userspace names them. */
#include "helpers.bpf.h"
#include "argus_py_sample.h"

/* Beyond the kept frames, this many skipped (C-stack owned) or invalid ones. */
#define ARGUS_PY_WALK_EXTRA 32

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, ARGUS_PY_SAMPLE_RINGBUF_BYTES);
} py_samples SEC(".maps");

/* The walk's state, per CPU (a sample is too large for the BPF stack; bpf_loop
 * callbacks reach it by lookup, which keeps the verifier's work per frame). */
struct py_walk {
	struct argus_py_proc proc;
	__u64 fsbase;
	__u64 tstate; /* the thread search: the next candidate, then the match */
	__u64 frame;  /* the frame walk: the next frame */
	__u32 found;
	__u32 pad;
	struct argus_py_sample s;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_walk);
} py_walk_scratch SEC(".maps");

static __always_inline __u64 py_read_u64(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr))
		return 0;
	return v;
}

static __always_inline __u32 py_read_u32(__u64 addr)
{
	__u32 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr))
		return 0;
	return v;
}

static __always_inline struct py_walk *py_walk_state(void)
{
	__u32 zero = 0;
	return bpf_map_lookup_elem(&py_walk_scratch, &zero);
}

/* One thread state of the interpreter's list: is it the running thread's? */
static long py_thread_step(__u32 index, void *unused)
{
	struct py_walk *w = py_walk_state();
	if (!w || !w->tstate)
		return 1;
	if (py_read_u64(w->tstate + w->proc.tstate_thread_id) == w->fsbase) {
		w->found = 1;
		return 1;
	}
	w->tstate = py_read_u64(w->tstate + w->proc.tstate_next);
	return 0;
}

/* One frame of the chain, innermost first. */
static long py_frame_step(__u32 index, void *unused)
{
	struct py_walk *w = py_walk_state();
	if (!w || !w->frame)
		return 1;
	__u32 n = w->s.nframes;
	if (n >= ARGUS_PY_SAMPLE_MAX_FRAMES) {
		w->s.flags |= ARGUS_PY_SAMPLE_TRUNCATED;
		return 1;
	}
	const struct argus_py_proc *p = &w->proc;
	__u64 frame = w->frame;
	__u64 code = py_read_u64(frame + p->frame_code);
	w->frame = py_read_u64(frame + p->frame_previous);
	if (p->frame_owner != ARGUS_PY_NO_OFFSET) {
		__u8 owner = 0xff;
		bpf_probe_read_user(&owner, 1, (const void *)(frame + p->frame_owner));
		if (owner == p->owner_to_skip)
			return 0; /* a shim frame of the C stack */
	}
	if (!code || py_read_u64(code + 8) != p->code_type_addr) {
		w->s.flags |= ARGUS_PY_SAMPLE_BAD_FRAME; /* torn, or not a code object */
		return 0;
	}
	struct argus_py_sample_frame *f = &w->s.frames[n];
	__u32 firstlineno = py_read_u32(code + p->code_firstlineno);
	__u64 name = py_read_u64(code + p->code_name);
	f->code = code;
	f->tag = ARGUS_PY_CODE_TAG(firstlineno, name);
	f->instr = p->instr_is_lasti ? py_read_u32(frame + p->frame_instr) : py_read_u64(frame + p->frame_instr);
	w->s.nframes = n + 1;
	return 0;
}

/* Walks the current thread's Python stack, if it is a Python rank's thread
 * that runs Python code, and sends it flagged `flags`. */
static __always_inline int py_sample_current(__u16 flags)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	const struct argus_py_proc *p = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!p)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase);
	if (!fsbase)
		return 0;
	struct py_walk *w = py_walk_state();
	if (!w)
		return 0;
	w->proc = *p;
	w->fsbase = fsbase;
	w->found = 0;
	/* The newest interpreter (the only one without subinterpreters). */
	__u64 interp = py_read_u64(p->runtime_addr + p->runtime_interpreters_head);
	if (!interp)
		return 0; /* not initialised yet */
	w->tstate = py_read_u64(interp + p->interp_threads_head);
	bpf_loop(ARGUS_PY_SAMPLE_MAX_THREADS, py_thread_step, 0, 0);
	if (!w->found)
		return 0; /* a thread Python does not know (a native worker) */
	__u64 frame = py_read_u64(w->tstate + p->tstate_frame);
	if (frame && p->cframe_current_frame != ARGUS_PY_NO_OFFSET)
		frame = py_read_u64(frame + p->cframe_current_frame);
	if (!frame)
		return 0; /* no Python code running on this thread */

	w->frame = frame;
	w->s.tgid = tgid;
	w->s.tid = (__u32)id;
	w->s.ts_ns = bpf_ktime_get_ns();
	w->s.nframes = 0;
	w->s.flags = flags;
	w->s.pad = 0;
	bpf_loop(ARGUS_PY_SAMPLE_MAX_FRAMES + ARGUS_PY_WALK_EXTRA, py_frame_step, 0, 0);
	if (w->frame && w->s.nframes >= ARGUS_PY_SAMPLE_MAX_FRAMES)
		w->s.flags |= ARGUS_PY_SAMPLE_TRUNCATED;
	if (bpf_ringbuf_output(&py_samples, &w->s, sizeof(w->s), 0))
		argus_count_error(ARGUS_ERR_PY_SAMPLES_LOST);
	return 0;
}

SEC("perf_event")
int argus_py_sample(struct bpf_perf_event_data *ctx)
{
	return py_sample_current(0);
}

/* The return of a device memory allocation (bpf/cuda_mem.bpf.c's calls): one
 * that failed with CUDA_ERROR_OUT_OF_MEMORY takes the thread's Python stack
 * there and then, before the framework unwinds it into an exception (the
 * agent pairs it with the oom event by thread and time). */
SEC("uretprobe")
int BPF_KRETPROBE(argus_py_stack_at_oom, int ret)
{
	if (ret != 2 /* CUDA_ERROR_OUT_OF_MEMORY */)
		return 0;
	return py_sample_current(ARGUS_PY_SAMPLE_AT_OOM);
}
