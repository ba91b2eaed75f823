/* ncclCommInitRank, ncclCommInitRankConfig, ncclCommInitRankScalable: the rank,
 * the world size, the first bytes of the ncclUniqueId (the same on every rank
 * of a communicator, so it names the communicator job-wide) and, at return, the
 * ncclComm_t written through the out-pointer. ncclCommInitAll(comms, ndev,
 * devlist): the ndev handles written into the array (one process's clique). */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_nccl_init_enter)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_NCCL))
		return 0;

	__u32 api = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx));
	struct argus_inflight st = {};
	st.start_ns = bpf_ktime_get_ns();
	st.ptr = PT_REGS_PARM1(ctx);
	st.id = api;
	st.nranks = (__s32)PT_REGS_PARM2(ctx);
	if (api == ARGUS_NCCL_COMM_INIT_ALL) {
		/* (comms, ndev, devlist): the array is read at return. */
	} else if (api == ARGUS_NCCL_INIT_RANK_SCALABLE) {
		/* (newcomm, nranks, myrank, nId, ncclUniqueId* commIds, config) */
		st.rank = (__s32)PT_REGS_PARM3(ctx);
		if (bpf_probe_read_user(st.uid, sizeof(st.uid), (void *)PT_REGS_PARM5(ctx)))
			argus_count_error(ARGUS_ERR_READ_USER);
	} else {
		/* (newcomm, nranks, ncclUniqueId commId /128 bytes by value: on the stack/, rank, ...):
		 * the struct goes to memory, so rank takes the third integer register. */
		st.rank = (__s32)PT_REGS_PARM3(ctx);
		if (bpf_probe_read_user(st.uid, sizeof(st.uid), (void *)(PT_REGS_SP(ctx) + 8)))
			argus_count_error(ARGUS_ERR_READ_USER);
	}
	argus_inflight_begin(ARGUS_CLS_NCCL, &st);
	return 0;
}

/* ncclCommInitAll returned: its handles, at most ARGUS_NCCL_INIT_ALL_MAX. */
static __always_inline void send_init_all(const struct argus_inflight *st, int ret)
{
	struct argus_nccl_init_all_event *ev =
		argus_reserve(sizeof(*ev), ARGUS_EV_NCCL_INIT_ALL, ARGUS_SRC_NCCL);
	if (!ev)
		return;
	ev->result = ret;
	ev->ndev = st->nranks;
	__builtin_memset(ev->comms, 0, sizeof(ev->comms));
	__u32 n = st->nranks > 0 ? (__u32)st->nranks : 0;
	if (n > ARGUS_NCCL_INIT_ALL_MAX)
		n = ARGUS_NCCL_INIT_ALL_MAX;
	if (ret == 0 && n && bpf_probe_read_user(ev->comms, (n & 0x1f) * sizeof(__u64), (void *)st->ptr))
		argus_count_error(ARGUS_ERR_READ_USER);
	bpf_ringbuf_submit(ev, 0);
}

SEC("uretprobe")
int BPF_KRETPROBE(argus_nccl_init_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	struct argus_inflight st;
	if (!argus_inflight_end(ARGUS_CLS_NCCL, pid_tgid, &st))
		return 0;
	if (ret != 0 && ret != ARGUS_NCCL_IN_PROGRESS)
		argus_stat_add(tgid, ARGUS_STAT_NCCL_ERROR, ARGUS_OP_MAX + st.id, ret, 1, 0);
	if (st.id == ARGUS_NCCL_COMM_INIT_ALL) {
		send_init_all(&st, ret);
		return 0;
	}

	struct argus_nccl_init_event *ev =
		argus_reserve(sizeof(*ev), ARGUS_EV_NCCL_INIT, ARGUS_SRC_NCCL);
	if (ev) {
		__u64 comm = 0;
		/* A non-blocking init (ncclInProgress) has written the handle already. */
		if ((ret == 0 || ret == ARGUS_NCCL_IN_PROGRESS) &&
		    bpf_probe_read_user(&comm, sizeof(comm), (void *)st.ptr))
			argus_count_error(ARGUS_ERR_READ_USER);
		ev->comm = comm;
		ev->rank = st.rank;
		ev->nranks = st.nranks;
		ev->result = ret;
		ev->api = st.id;
		__builtin_memcpy(ev->uid, st.uid, sizeof(ev->uid));
		bpf_ringbuf_submit(ev, 0);
	}
	return 0;
}
