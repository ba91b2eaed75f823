/* PyTorch's c10d process groups, from libtorch_cpu's and libtorch_cuda's
 * exported methods: a Gloo or NCCL backend made (its rank and size in its
 * group), a process group named or described (the std::string argument), and every collective or point-to-point
 * call made on a backend. Every training script's collectives pass through
 * these, whatever the Python API above them.
 *
 * The collective methods return c10::intrusive_ptr<Work> by value, a class
 * with a non-trivial destructor: the Itanium C++ ABI passes the return slot as
 * the first argument and `this` as the second. The cookie says where `this`
 * (the comm arg) and a send/recv's peer are, as for NCCL, and its flags whose
 * backend the method is (ProcessGroupNCCL's constructor has Gloo's shape). */
#include "helpers.bpf.h"

/* ProcessGroupGloo / ProcessGroupNCCL(this, intrusive_ptr<Store>, int rank, int size,
 * intrusive_ptr<Options>): the intrusive_ptr arguments travel by reference. */
SEC("uprobe")
int BPF_KPROBE(argus_c10d_backend_init)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_NCCL))
		return 0;
	struct argus_c10d_backend_event *ev =
		argus_reserve(sizeof(*ev), ARGUS_EV_C10D_BACKEND, ARGUS_SRC_NCCL);
	if (!ev)
		return 0;
	ev->backend = PT_REGS_PARM1(ctx);
	ev->rank = (__s32)PT_REGS_PARM3(ctx);
	ev->size = (__s32)PT_REGS_PARM4(ctx);
	ev->kind = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx));
	ev->pad = 0;
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

/* libstdc++'s std::string (the C++11 ABI): its data pointer, then its length;
 * the data is always NUL-terminated. */
struct argus_cxx_string {
	__u64 data;
	__u64 len;
};

/* ProcessGroup::setGroupName / setGroupDesc(this, const std::string&). */
SEC("uprobe")
int BPF_KPROBE(argus_c10d_group_text)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_NCCL))
		return 0;
	struct argus_cxx_string str;
	if (bpf_probe_read_user(&str, sizeof(str), (void *)PT_REGS_PARM2(ctx))) {
		argus_count_error(ARGUS_ERR_READ_USER);
		return 0;
	}
	struct argus_c10d_group_event *ev =
		argus_reserve(sizeof(*ev), ARGUS_EV_C10D_GROUP, ARGUS_SRC_NCCL);
	if (!ev)
		return 0;
	ev->group = PT_REGS_PARM1(ctx);
	ev->what = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx));
	ev->len = str.len > 0xffffffffull ? 0xffffffffu : (__u32)str.len;
	__builtin_memset(ev->text, 0, sizeof(ev->text));
	if (bpf_probe_read_user_str(ev->text, sizeof(ev->text), (void *)str.data) < 0)
		argus_count_error(ARGUS_ERR_READ_USER);
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

/* A thread's last call on a c10d backend: the work a Work::wait on that
 * thread waits for is, nearly always, the one that call made (a synchronous
 * dist.all_reduce, a barrier). LRU: threads come and go. */
struct argus_c10d_last_call {
	__u64 backend;
	__u32 op;
	__u32 pad;
};
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct argus_c10d_last_call);
} c10d_last_call SEC(".maps");

SEC("uprobe")
int BPF_KPROBE(argus_c10d_coll_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_NCCL))
		return 0;

	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 op = ARGUS_COOKIE_ID(cookie);
	__u32 kind = ARGUS_COOKIE_FLAGS(cookie);
	__u64 backend = argus_arg(ctx, ARGUS_COOKIE_COMM_ARG(cookie));
	__u32 peer_arg = ARGUS_COOKIE_PEER_ARG(cookie);
	__s32 peer = peer_arg ? (__s32)argus_arg(ctx, peer_arg) : -1;

	/* Counted per (process, backend, op) in BPF, so that a lost event loses no
	 * count: the key's code and pad hold the backend's address, its sub the op
	 * and the backend's kind (a backend made before the agent attached). */
	struct argus_stat_key key = {
		.tgid = tgid,
		.kind = ARGUS_STAT_C10D_CALLS,
		.sub = (__u16)(op | (kind << 8)),
		.code = (__s32)(__u32)backend,
		.pad = (__u32)(backend >> 32),
	};
	argus_stat_add_key(&key, 1, 0);
	/* ProcessGroupNCCL's call is only joined with the NCCL call it makes (the
	 * NCCL probes number it, and its waits are not the host's): no number, no
	 * last call kept. */
	__u64 seq = 0;
	if (kind != ARGUS_C10D_NCCL) {
		struct argus_c10d_last_call last = { .backend = backend, .op = op };
		bpf_map_update_elem(&c10d_last_call, &pid_tgid, &last, BPF_ANY);
		/* Collectives are numbered per backend: a group's n-th collective is the
		 * same call on every member (c10d's own rule). p2p pairs by order. */
		if (op != ARGUS_OP_SEND && op != ARGUS_OP_RECV)
			seq = argus_next_count(tgid, ARGUS_SEQ_COLL, backend);
	}

	struct argus_c10d_coll_event *ev =
		argus_reserve_at(sizeof(*ev), ARGUS_EV_C10D_COLL, ARGUS_SRC_NCCL, pid_tgid, bpf_ktime_get_ns());
	if (ev) {
		ev->backend = backend;
		ev->seq = seq;
		ev->op = op;
		ev->peer = peer;
		ev->kind = kind;
		ev->pad = 0;
		argus_submit_hot(ev);
	}
	return 0;
}

/* Work::wait(timeout) entry (Gloo's works, and SendWork/RecvWork's own):
 * the caller blocks until its collective is done. Timed as a collective call
 * is (argus_c10d_wait_exit), charged to the backend of the thread's last c10d
 * call: a host blocked here is inside a collective, for the hang detector and
 * COLL%. A wait with no c10d call seen on its thread is timed, uncharged. */
SEC("uprobe")
int BPF_KPROBE(argus_c10d_wait_enter)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	if (!argus_should_trace(pid_tgid >> 32, ARGUS_SRC_NCCL))
		return 0;
	struct argus_c10d_last_call *last = bpf_map_lookup_elem(&c10d_last_call, &pid_tgid);
	struct argus_inflight st = {
		.start_ns = bpf_ktime_get_ns(),
		.ptr = last ? last->backend : 0,
		.id = last ? last->op : ARGUS_C10D_OP_MAX,
		.kind = ARGUS_STAT_C10D_WAIT,
	};
	argus_inflight_begin(ARGUS_CLS_NCCL, &st);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
