/* The dynamic loader calls _dl_debug_state (the debugger's breakpoint of the
 * r_debug protocol) before and after every change to a process's link map:
 * each dlopen and dlclose. A discovery hint, like an exec: the agent looks at
 * the process's mappings within milliseconds, instead of at its next recheck,
 * so a library dlopened long after exec (NCCL under a framework) is probed
 * before its first calls. One trap per dlopen, in any process on the node:
 * dlopen itself costs far more (file lookup, mmap, relocation). */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_dl_debug_state)
{
	struct argus_exec_event *ev = argus_reserve(sizeof(*ev), ARGUS_EV_EXEC, ARGUS_SRC_PROC);
	if (!ev)
		return 0;
	ev->ppid = 0;
	ev->flags = ARGUS_EXEC_F_LINK_MAP;
	bpf_get_current_comm(ev->comm, sizeof(ev->comm));
	bpf_ringbuf_submit(ev, 0);
	return 0;
}
