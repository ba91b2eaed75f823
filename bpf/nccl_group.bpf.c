/* ncclGroupStart / ncclGroupEnd: p2p ops are issued between them. */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_nccl_group)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_NCCL))
		return 0;
	struct argus_nccl_group_event *ev =
		argus_reserve(sizeof(*ev), ARGUS_EV_NCCL_GROUP, ARGUS_SRC_NCCL);
	if (ev) {
		ev->is_end = ARGUS_COOKIE_FLAGS(bpf_get_attach_cookie(ctx)) & ARGUS_COOKIE_GROUP_END;
		ev->pad = 0;
		argus_submit_hot(ev);
	}
	return 0;
}
