/* Every exec on the node is a discovery hint: the agent looks at the new
 * process's mappings at once instead of waiting for its next /proc scan.
 * tp_btf needs no tracefs; raw_tp is the fallback where BTF tracing is refused. */
#include "helpers.bpf.h"

static __always_inline int emit_exec(struct task_struct *task)
{
	struct argus_exec_event *ev = argus_reserve(sizeof(*ev), ARGUS_EV_EXEC, ARGUS_SRC_PROC);
	if (!ev)
		return 0;
	ev->ppid = BPF_CORE_READ(task, real_parent, tgid);
	ev->flags = 0;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(argus_exec_btf, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	return emit_exec(p);
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(argus_exec_raw, struct task_struct *p)
{
	return emit_exec(p);
}
