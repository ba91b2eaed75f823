/* ncclCommSplit and ncclCommShrink: communicators made from a parent. At entry
 * the parent, the color and key (split) or the excluded ranks (shrink), and
 * the out-pointer; at return the child's handle written through it, and the
 * parent's split (or shrink) count in this process, which with the parent's
 * name and the color (or excluded list) names the child alike on every member
 * (argus.h: argus_nccl_child_event).
 *   ncclCommSplit(comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)
 *   ncclCommShrink(comm, int* excludeRanksList, int excludeRanksCount,
 *                  ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_nccl_child_enter)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_NCCL))
		return 0;

	struct argus_inflight st = {};
	st.start_ns = bpf_ktime_get_ns();
	st.id = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx));
	st.child.parent = PT_REGS_PARM1(ctx);
	st.ptr = PT_REGS_PARM4(ctx);
	if (st.id == ARGUS_NCCL_COMM_SHRINK) {
		st.child.list = PT_REGS_PARM2(ctx);
		st.rank = (__s32)PT_REGS_PARM3(ctx); /* excluded count */
	} else {
		st.rank = (__s32)PT_REGS_PARM2(ctx);   /* color */
		st.nranks = (__s32)PT_REGS_PARM3(ctx); /* key */
	}
	argus_inflight_begin(ARGUS_CLS_NCCL, &st);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(argus_nccl_child_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct argus_inflight st;
	if (!argus_inflight_end(ARGUS_CLS_NCCL, pid_tgid, &st))
		return 0;

	const bool shrink = st.id == ARGUS_NCCL_COMM_SHRINK;
	/* Counted whatever the result: every rank of the parent makes the call, so
	 * the n-th is the same call everywhere. */
	__u64 nth = argus_next_count(tgid, shrink ? ARGUS_SEQ_SHRINK : ARGUS_SEQ_SPLIT, st.child.parent);
	struct argus_nccl_child_event *ev =
		argus_reserve(sizeof(*ev), ARGUS_EV_NCCL_CHILD, ARGUS_SRC_NCCL);
	if (ev) {
		__u64 comm = 0;
		/* Written at return by a blocking call; by ncclGroupEnd inside a
		 * group, or later by a non-blocking one (then still 0 here). */
		if (st.ptr && bpf_probe_read_user(&comm, sizeof(comm), (void *)st.ptr))
			argus_count_error(ARGUS_ERR_READ_USER);
		ev->comm = comm;
		ev->parent = st.child.parent;
		ev->newcomm_ptr = st.ptr;
		ev->nth = nth;
		ev->result = ret;
		ev->api = st.id;
		ev->color = shrink ? 0 : st.rank;
		ev->key = shrink ? 0 : st.nranks;
		ev->n_excluded = shrink ? st.rank : 0;
		ev->pad = 0;
		__builtin_memset(ev->excluded, 0, sizeof(ev->excluded));
		if (shrink && st.rank > 0 && st.child.list) {
			/* NCCL sorted the list in place before it returned. */
			__u32 n = (__u32)st.rank;
			if (n > ARGUS_NCCL_EXCLUDE_MAX)
				n = ARGUS_NCCL_EXCLUDE_MAX;
			if (bpf_probe_read_user(ev->excluded, (n & 0x3f) * sizeof(__s32), (void *)st.child.list))
				argus_count_error(ARGUS_ERR_READ_USER);
		}
		bpf_ringbuf_submit(ev, 0);
	}
	if (ret != 0 && ret != ARGUS_NCCL_IN_PROGRESS)
		argus_stat_add(tgid, ARGUS_STAT_NCCL_ERROR, ARGUS_OP_MAX + st.id, ret, 1, 0);
	return 0;
}
