/* The return half of every call timed entry->return (NCCL collectives, the
 * outermost ncclGroupEnd, CUDA synchronize): adds the time spent inside to the
 * entry's aggregate, counts a non-zero return code as an error of that
 * op/api, and sends the call's span when it failed or was long
 * (argus_span_min_ns: the ring buffer is the costly part of this probe). */
#include "helpers.bpf.h"

/* Set by the loader before load (LoaderOptions::span_min_ns). */
const volatile __u64 argus_span_min_ns = ARGUS_SPAN_MIN_NS;

/* A timed call returned: its time under (st->kind, wait_sub), a failure under
 * (err_kind, err_sub), and its span when it failed or was long. */
static __always_inline void timed_call_returned(__u64 pid_tgid, __u32 cls, const struct argus_inflight *st,
						__u32 wait_sub, __u32 err_kind, __u32 err_sub, int ret)
{
	__u32 tgid = pid_tgid >> 32;
	__u64 now = bpf_ktime_get_ns();
	__u64 dt = now - st->start_ns;

	argus_stat_add(tgid, st->kind, wait_sub, 0, 1, dt);
	if (ret != 0)
		argus_stat_add(tgid, err_kind, err_sub, ret, 1, 0);
	if (ret == 0 && dt < argus_span_min_ns)
		return;

	__u32 source = cls == ARGUS_CLS_NCCL ? ARGUS_SRC_NCCL : ARGUS_SRC_CUDA;
	struct argus_call_done_event *ev =
		argus_reserve_at(sizeof(*ev), ARGUS_EV_CALL_DONE, source, pid_tgid, now);
	if (ev) {
		ev->start_ns = st->start_ns;
		ev->cls = cls;
		ev->kind = st->kind;
		ev->id = st->id;
		ev->ret = ret;
		ev->ptr = st->ptr;
		argus_submit_hot(ev);
	}
}

/* Cookie: id = library class (ARGUS_CLS_*), flags = error stat kind. */
SEC("uretprobe")
int BPF_KRETPROBE(argus_timed_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 cls = ARGUS_COOKIE_ID(cookie);
	struct argus_inflight st;
	if (!argus_inflight_end(cls, pid_tgid, &st))
		return 0;
	timed_call_returned(pid_tgid, cls, &st, st.id, ARGUS_COOKIE_FLAGS(cookie), st.id, ret);
	return 0;
}

/* ncclGroupEnd's return. Only the outermost end of a group with operations
 * was timed (argus_nccl_group_end): an inner or empty one finds no call open
 * and is not an unmatched return. Its errors are where grouped operations
 * fail: counted as ncclGroupEnd's. */
SEC("uretprobe")
int BPF_KRETPROBE(argus_nccl_group_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct argus_inflight st;
	if (!argus_inflight_take(ARGUS_CLS_NCCL, pid_tgid, &st))
		return 0;
	if (st.kind != ARGUS_STAT_NCCL_GROUP_WAIT)
		return 0; /* a collective whose return was never seen: not this call's time */
	timed_call_returned(pid_tgid, ARGUS_CLS_NCCL, &st, 0, ARGUS_STAT_NCCL_ERROR, ARGUS_NCCL_ERR_GROUP_END, ret);
	return 0;
}

/* Work::wait's return (argus_c10d_wait_enter): its time; it returns a bool
 * (true when done), never an error code, so nothing is counted as one. A
 * slot of another kind was not this call's. */
SEC("uretprobe")
int BPF_KRETPROBE(argus_c10d_wait_exit)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct argus_inflight st;
	if (!argus_inflight_take(ARGUS_CLS_NCCL, pid_tgid, &st))
		return 0;
	if (st.kind != ARGUS_STAT_C10D_WAIT)
		return 0;
	timed_call_returned(pid_tgid, ARGUS_CLS_NCCL, &st, st.id, 0, 0, 0);
	return 0;
}
