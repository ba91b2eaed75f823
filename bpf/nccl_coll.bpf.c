/* NCCL collectives and p2p: one program for every op. The attach cookie says
 * which op it is and where count, datatype, communicator and (send/recv) peer
 * are among the arguments (ncclReduce's communicator is the 7th: on the stack). */
#include "helpers.bpf.h"

static __always_inline __u64 nccl_datatype_size(__s32 dt)
{
	switch (dt) {
	case 0: /* ncclInt8 */
	case 1: /* ncclUint8 */
	case 10: /* ncclFloat8e4m3 */
	case 11: /* ncclFloat8e5m2 */
		return 1;
	case 6: /* ncclFloat16 */
	case 9: /* ncclBfloat16 */
		return 2;
	case 2: /* ncclInt32 */
	case 3: /* ncclUint32 */
	case 7: /* ncclFloat32 */
		return 4;
	case 4: /* ncclInt64 */
	case 5: /* ncclUint64 */
	case 8: /* ncclFloat64 */
		return 8;
	default:
		return 0; /* unknown type: calls still count, bytes cannot */
	}
}

/* The number of the thread's open NCCL group (0 outside one), counting the
 * call as one of its operations; the first names the group's wait. */
static __always_inline __u64 group_of_call(__u64 pid_tgid, __u64 comm)
{
	struct argus_group_state *g = bpf_map_lookup_elem(&nccl_group, &pid_tgid);
	if (!g || g->depth == 0)
		return 0;
	if (g->ops == 0)
		g->comm = comm;
	g->ops += 1; /* the thread's own slot: no other writer */
	return g->number;
}

SEC("uprobe")
int BPF_KPROBE(argus_nccl_coll_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_NCCL))
		return 0;

	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 op = ARGUS_COOKIE_ID(cookie);
	__u64 count = argus_arg(ctx, ARGUS_COOKIE_COUNT_ARG(cookie));
	__s32 dtype = (__s32)argus_arg(ctx, ARGUS_COOKIE_DTYPE_ARG(cookie));
	__u64 comm = argus_arg(ctx, ARGUS_COOKIE_COMM_ARG(cookie));
	__u32 peer_arg = ARGUS_COOKIE_PEER_ARG(cookie);
	__s32 peer = peer_arg ? (__s32)argus_arg(ctx, peer_arg) : -1;
	__u64 bytes = count * nccl_datatype_size(dtype);

	argus_stat_add(tgid, ARGUS_STAT_NCCL_CALLS, op, 0, 1, bytes);
	/* p2p has no common numbering: the tracker pairs the n-th send A->B with B's
	 * n-th receive from A. */
	__u64 seq = (op == ARGUS_OP_SEND || op == ARGUS_OP_RECV) ? 0 : argus_next_count(tgid, ARGUS_SEQ_COLL, comm);
	__u64 group = group_of_call(pid_tgid, comm);

	/* One clock read: the event's time is the call's start. */
	__u64 now = bpf_ktime_get_ns();
	struct argus_nccl_coll_event *ev =
		argus_reserve_at(sizeof(*ev), ARGUS_EV_NCCL_COLL, ARGUS_SRC_NCCL, pid_tgid, now);
	if (ev) {
		ev->comm = comm;
		ev->seq = seq;
		ev->op = op;
		ev->peer = peer;
		ev->bytes = bytes;
		ev->group = group;
		argus_submit_hot(ev);
	}

	struct argus_inflight st = {
		.start_ns = now, .ptr = comm, .id = op, .kind = ARGUS_STAT_NCCL_WAIT,
	};
	argus_inflight_begin(ARGUS_CLS_NCCL, &st);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
