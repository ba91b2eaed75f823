/* ncclGroupStart / ncclGroupEnd: per thread, how deep in groups it is and the
 * number of its open outermost group, which every collective and p2p call made
 * inside carries (nccl_coll.bpf.c): NCCL only records those calls and launches
 * them together at the outermost ncclGroupEnd, so a grouped exchange (a
 * pipeline stage's sends and receives, an all-to-all made of them) is one
 * operation. No event: a map update each, and the ended groups counted
 * (ARGUS_STAT_NCCL_GROUP). NCCL's own internal grouping (init, split) calls
 * its internal functions, not these exported ones.
 *
 * The outermost ncclGroupEnd of a group with operations is timed like a
 * collective (its return: argus_nccl_group_exit in timed_exit.bpf.c): that is
 * where a grouped exchange can hold the host. NCCL connects a point-to-point
 * pair there the first time it is used, so a receive whose sender never comes
 * waits in it; a blocking backend waits there for every grouped operation.
 * A rank held there is in a call, as one held in a collective is. */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_nccl_group_start)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!argus_should_trace(pid_tgid >> 32, ARGUS_SRC_NCCL))
		return 0;
	struct argus_group_state *g = bpf_map_lookup_elem(&nccl_group, &pid_tgid);
	if (!g) {
		struct argus_group_state first = { .depth = 1, .ops = 0, .number = 1 };
		if (bpf_map_update_elem(&nccl_group, &pid_tgid, &first, BPF_ANY))
			argus_count_error(ARGUS_ERR_INFLIGHT_FULL);
		return 0;
	}
	if (g->depth == 0) { /* a new outermost group */
		g->number += 1;
		g->ops = 0;
	}
	g->depth += 1; /* the thread's own slot: no other writer */
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(argus_nccl_group_end)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!argus_tgid_traced(tgid))
		return 0;
	struct argus_group_state *g = bpf_map_lookup_elem(&nccl_group, &pid_tgid);
	/* No state or depth 0: the group began before the probes went live. */
	if (!g || g->depth == 0)
		return 0;
	g->depth -= 1;
	if (g->depth != 0)
		return 0;
	argus_stat_add(tgid, ARGUS_STAT_NCCL_GROUP, 0, 0, 1, g->ops);
	if (g->ops == 0)
		return 0; /* an empty group launches nothing: not timed */
	struct argus_inflight st = {
		.start_ns = bpf_ktime_get_ns(), .ptr = g->comm, .id = 0, .kind = ARGUS_STAT_NCCL_GROUP_WAIT,
	};
	argus_inflight_begin(ARGUS_CLS_NCCL, &st);
	return 0;
}
