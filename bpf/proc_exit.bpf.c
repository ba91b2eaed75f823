/* A tracked process's last thread exits: the agent reads its final aggregates,
 * with why it ended (the exit_info map), then forgets the tgid (so a reused
 * pid starts clean). */
#include "exit_info.bpf.h"

static __always_inline int emit_exit(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	__u32 *state = bpf_map_lookup_elem(&tracked, &tgid);
	if (!state || *state == ARGUS_TGID_IGNORED)
		return 0;
	/* Only the last thread of the group: signal->live is already decremented. */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return 0;
	struct argus_exit_event *ev = argus_reserve(sizeof(*ev), ARGUS_EV_EXIT, ARGUS_SRC_PROC);
	if (!ev) {
		bpf_map_delete_elem(&exit_info, &tgid); /* the event is lost (counted) */
		return 0;
	}
	ev->hdr.tgid = tgid; /* the exiting task, not necessarily current in raw contexts */
	ev->exit_code = BPF_CORE_READ(task, exit_code);
	ev->pad = 0;
	/* What signal_generate and mark_victim remembered, then forgotten. */
	struct argus_exit_info *cause = bpf_map_lookup_elem(&exit_info, &tgid);
	if (cause) {
		ev->cause = *cause;
		bpf_map_delete_elem(&exit_info, &tgid);
	} else {
		__builtin_memset(&ev->cause, 0, sizeof(ev->cause));
	}
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(argus_exit_btf, struct task_struct *p)
{
	return emit_exit(p);
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(argus_exit_raw, struct task_struct *p)
{
	return emit_exit(p);
}
