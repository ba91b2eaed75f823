/* The OOM killer chose a tracked process: remembered for its exit event. */
#include "exit_info.bpf.h"

static __always_inline int remember_oom(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	if (!argus_tgid_traced(tgid))
		return 0;
	struct argus_exit_info *e = argus_exit_info_of(tgid);
	if (e)
		e->flags |= ARGUS_EXIT_F_OOM;
	return 0;
}

SEC("tp_btf/mark_victim")
int BPF_PROG(argus_oom_victim_btf, struct task_struct *task, uid_t uid)
{
	return remember_oom(task);
}

SEC("raw_tp/mark_victim")
int BPF_PROG(argus_oom_victim_raw, struct task_struct *task, uid_t uid)
{
	return remember_oom(task);
}
