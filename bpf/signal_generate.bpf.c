/* A fatal-by-default signal generated for a tracked process: remember the
 * newest one and its sender, for the exit event (bpf/proc_exit.bpf.c). */
#include "exit_info.bpf.h"

#define ARGUS_SI_KERNEL_PRIV ((struct kernel_siginfo *)1) /* SEND_SIG_PRIV */

/* Signals whose default action is not to end the process: CHLD, CONT, STOP,
 * TSTP, TTIN, TTOU, URG, WINCH. */
#define ARGUS_NONFATAL_SIGNALS \
	((1ull << 17) | (1ull << 18) | (1ull << 19) | (1ull << 20) | (1ull << 21) | (1ull << 22) | \
	 (1ull << 23) | (1ull << 28))

#define ARGUS_TRACE_SIGNAL_IGNORED 1    /* enum trace_signal_result */
#define ARGUS_TRACE_SIGNAL_OVERFLOW_FAIL 3

static __always_inline int remember_signal(int sig, struct kernel_siginfo *info, struct task_struct *task,
					   int result)
{
	if (sig <= 0 || sig > 64 || (sig < 64 && (ARGUS_NONFATAL_SIGNALS & (1ull << sig))))
		return 0;
	if (result == ARGUS_TRACE_SIGNAL_IGNORED || result == ARGUS_TRACE_SIGNAL_OVERFLOW_FAIL)
		return 0;
	__u32 tgid = BPF_CORE_READ(task, tgid);
	if (!argus_tgid_traced(tgid))
		return 0;
	/* SEND_SIG_NOINFO (NULL): kill() from current; SEND_SIG_PRIV (1): the kernel;
	 * else si_code > 0 says the kernel made it (a fault, SI_KERNEL). */
	bool kernel = false;
	if (info == ARGUS_SI_KERNEL_PRIV) {
		kernel = true;
	} else if (info) {
		int code = BPF_CORE_READ(info, si_code);
		kernel = code > 0;
	}
	struct argus_exit_info *e = argus_exit_info_of(tgid);
	if (!e)
		return 0;
	e->signal = sig;
	e->flags = (e->flags & ARGUS_EXIT_F_OOM) | ARGUS_EXIT_F_SIGNAL | (kernel ? ARGUS_EXIT_F_KERNEL : 0);
	if (kernel) {
		e->sender_tgid = 0;
		__builtin_memcpy(e->sender_comm, "kernel\0\0\0\0\0\0\0\0\0", ARGUS_EXIT_COMM_LEN);
	} else {
		e->sender_tgid = bpf_get_current_pid_tgid() >> 32;
		bpf_get_current_comm(e->sender_comm, sizeof(e->sender_comm));
	}
	return 0;
}

SEC("tp_btf/signal_generate")
int BPF_PROG(argus_signal_btf, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	     int result)
{
	return remember_signal(sig, info, task, result);
}

SEC("raw_tp/signal_generate")
int BPF_PROG(argus_signal_raw, int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
	     int result)
{
	return remember_signal(sig, info, task, result);
}
