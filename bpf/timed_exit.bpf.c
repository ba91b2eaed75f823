/* The return half of every call timed entry->return (NCCL collectives, CUDA
 * synchronize): adds the time spent inside to the entry's aggregate, counts a
 * non-zero return code as an error of that op/api, and sends the call's span
 * when it failed or was long (argus_span_min_ns: the ring buffer is the costly
 * part of this probe).
 * Cookie: id = library class (ARGUS_CLS_*), flags = error stat kind. */
#include "helpers.bpf.h"

/* Set by the loader before load (LoaderOptions::span_min_ns). */
const volatile __u64 argus_span_min_ns = ARGUS_SPAN_MIN_NS;

SEC("uretprobe")
int BPF_KRETPROBE(argus_timed_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 cls = ARGUS_COOKIE_ID(cookie);
	struct argus_inflight st;
	if (!argus_inflight_end(cls, pid_tgid, &st))
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 dt = now - st.start_ns;

	argus_stat_add(tgid, st.kind, st.id, 0, 1, dt);
	if (ret != 0)
		argus_stat_add(tgid, ARGUS_COOKIE_FLAGS(cookie), st.id, ret, 1, 0);
	if (ret == 0 && dt < argus_span_min_ns)
		return 0;

	__u32 source = cls == ARGUS_CLS_NCCL ? ARGUS_SRC_NCCL : ARGUS_SRC_CUDA;
	struct argus_call_done_event *ev =
		argus_reserve_at(sizeof(*ev), ARGUS_EV_CALL_DONE, source, pid_tgid, now);
	if (ev) {
		ev->start_ns = st.start_ns;
		ev->cls = cls;
		ev->kind = st.kind;
		ev->id = st.id;
		ev->ret = ret;
		ev->ptr = st.ptr;
		argus_submit_hot(ev);
	}
	return 0;
}
