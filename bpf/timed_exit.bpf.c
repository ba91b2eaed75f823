/* The return half of every call timed entry->return (NCCL collectives, CUDA
 * synchronize): adds the time spent inside to the entry's aggregate, counts a
 * non-zero return code as an error of that op/api, and sends the call's span
 * (for the trace: these calls come a few times per step, never per launch).
 * Cookie: id = library class (ARGUS_CLS_*), flags = error stat kind. */
#include "helpers.bpf.h"

SEC("uretprobe")
int BPF_KRETPROBE(argus_timed_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct argus_inflight_key key = { .pid_tgid = pid_tgid, .cls = ARGUS_COOKIE_ID(cookie) };

	struct argus_inflight *st = bpf_map_lookup_elem(&inflight, &key);
	if (!st) {
		/* Not traced, or the agent attached while this call was running. */
		__u32 *state = bpf_map_lookup_elem(&tracked, &tgid);
		if (state && *state != ARGUS_TGID_IGNORED)
			argus_count_error(ARGUS_ERR_RETURN_UNMATCHED);
		return 0;
	}
	__u64 start = st->start_ns;
	__u64 dt = bpf_ktime_get_ns() - start;
	__u32 kind = st->kind;
	__u32 id = st->id;
	__u64 ptr = st->ptr;
	bpf_map_delete_elem(&inflight, &key);

	__u32 source = key.cls == ARGUS_CLS_NCCL ? ARGUS_SRC_NCCL : ARGUS_SRC_CUDA;
	struct argus_call_done_event *ev = argus_reserve(sizeof(*ev), ARGUS_EV_CALL_DONE, source);
	if (ev) {
		ev->start_ns = start;
		ev->cls = key.cls;
		ev->kind = kind;
		ev->id = id;
		ev->ret = ret;
		ev->ptr = ptr;
		argus_submit_hot(ev);
	}

	argus_stat_add(tgid, kind, id, 0, 1, dt);
	if (ret != 0)
		argus_stat_add(tgid, ARGUS_COOKIE_FLAGS(cookie), id, ret, 1, 0);
	return 0;
}
