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

/* The thread state whose thread_id is `fsbase`, in the newest interpreter
 * (the only one in a process without subinterpreters); 0 when none. */
static __always_inline __u64 py_find_tstate(const struct argus_py_proc *p, __u64 fsbase)
{
	__u64 interp = py_read_u64(p->runtime_addr + p->runtime_interpreters_head);
	if (!interp)
		return 0;
	__u64 ts = py_read_u64(interp + p->interp_threads_head);
	for (int i = 0; i < ARGUS_PY_SAMPLE_MAX_THREADS; i++) {
		if (!ts)
			return 0;
		if (py_read_u64(ts + p->tstate_thread_id) == fsbase)
			return ts;
		ts = py_read_u64(ts + p->tstate_next);
	}
	return 0;
}

SEC("perf_event")
int argus_py_sample(struct bpf_perf_event_data *ctx)
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
	__u64 ts = py_find_tstate(p, fsbase);
	if (!ts)
		return 0; /* a thread Python does not know (a native worker) */
	__u64 frame = py_read_u64(ts + p->tstate_frame);
	if (frame && p->cframe_current_frame != ARGUS_PY_NO_OFFSET)
		frame = py_read_u64(frame + p->cframe_current_frame);
	if (!frame)
		return 0; /* no Python code running on this thread */

	struct argus_py_sample *s = bpf_ringbuf_reserve(&py_samples, sizeof(*s), 0);
	if (!s) {
		argus_count_error(ARGUS_ERR_PY_SAMPLES_LOST);
		return 0;
	}
	s->tgid = tgid;
	s->tid = (__u32)id;
	s->ts_ns = bpf_ktime_get_ns();
	s->pad = 0;
	__u32 n = 0;
	__u16 flags = 0;
	for (int i = 0; i < ARGUS_PY_SAMPLE_MAX_FRAMES + ARGUS_PY_WALK_EXTRA; i++) {
		if (!frame)
			break;
		if (n >= ARGUS_PY_SAMPLE_MAX_FRAMES) {
			flags |= ARGUS_PY_SAMPLE_TRUNCATED;
			break;
		}
		__u64 code = py_read_u64(frame + p->frame_code);
		__u64 previous = py_read_u64(frame + p->frame_previous);
		if (p->frame_owner != ARGUS_PY_NO_OFFSET) {
			__u8 owner = 0xff;
			bpf_probe_read_user(&owner, 1, (const void *)(frame + p->frame_owner));
			if (owner == p->owner_to_skip) { /* a shim frame of the C stack */
				frame = previous;
				continue;
			}
		}
		if (!code || py_read_u64(code + 8) != p->code_type_addr) {
			flags |= ARGUS_PY_SAMPLE_BAD_FRAME; /* torn, or not a code object */
			frame = previous;
			continue;
		}
		struct argus_py_sample_frame *f = &s->frames[n];
		__u32 firstlineno = py_read_u32(code + p->code_firstlineno);
		__u64 name = py_read_u64(code + p->code_name);
		f->code = code;
		f->tag = ARGUS_PY_CODE_TAG(firstlineno, name);
		f->instr = p->instr_is_lasti ? py_read_u32(frame + p->frame_instr)
					     : py_read_u64(frame + p->frame_instr);
		n++;
		frame = previous;
	}
	if (frame && n >= ARGUS_PY_SAMPLE_MAX_FRAMES)
		flags |= ARGUS_PY_SAMPLE_TRUNCATED;
	s->nframes = n;
	s->flags = flags;
	bpf_ringbuf_submit(s, 0);
	return 0;
}
