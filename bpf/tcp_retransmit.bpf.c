/* TCP retransmits, per socket and remote address. The tracepoint fires mostly
 * in softirq or timer context, so `current` is not the socket's owner: the key
 * is the socket's inode, which the agent maps to a rank through the ranks'
 * /proc/PID/fd links. Counted in segments (tcp_skb_pcount), as the kernel's
 * RetransSegs; only retransmits that left TCP (err == 0). No ring buffer. */
#include "helpers.bpf.h"
#include "argus_netblk.h"

#define ARGUS_AF_INET 2
#define ARGUS_AF_INET6 10

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARGUS_MAX_TCP_RETRANS);
	__type(key, struct argus_tcp_key);
	__type(value, __u64);
} tcp_retrans SEC(".maps");

/* Since 6.17 the tracepoint also fires for retransmits that were not sent,
 * with their err; before, it fired only for sent ones and had no err. Its
 * event record gained `err` then: that tells the two apart (clang 14 has no
 * type-match relocation for the prototype itself). */
struct trace_event_raw_tcp_retransmit_skb___err {
	int err;
} __attribute__((preserve_access_index));

static __always_inline __u64 argus_socket_ino(const struct sock *sk)
{
	struct socket *sock = BPF_CORE_READ(sk, sk_socket);
	if (!sock)
		return 0; /* orphaned: closed by its owner (FIN_WAIT, ...) */
	struct socket_alloc *sa = container_of(sock, struct socket_alloc, socket);
	return BPF_CORE_READ(sa, vfs_inode.i_ino);
}

static __always_inline int argus_tcp_retrans(const struct sock *sk, const struct sk_buff *skb)
{
	struct argus_tcp_key key = {};
	key.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (key.family == ARGUS_AF_INET) {
		__u32 daddr = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(key.addr, &daddr, 4);
	} else if (key.family == ARGUS_AF_INET6) {
		BPF_CORE_READ_INTO(&key.addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	} else {
		return 0;
	}
	key.ino = argus_socket_ino(sk);
	/* tcp_skb_pcount: the segments this skb carries, from its control block. */
	__u16 segs = 1;
	const struct tcp_skb_cb *cb = (const void *)skb + bpf_core_field_offset(struct sk_buff, cb);
	if (bpf_probe_read_kernel(&segs, sizeof(segs), &cb->tcp_gso_segs) || segs == 0)
		segs = 1;
	__u64 *v = bpf_map_lookup_elem(&tcp_retrans, &key);
	if (v) {
		__sync_fetch_and_add(v, segs);
		return 0;
	}
	__u64 init = segs;
	long err = bpf_map_update_elem(&tcp_retrans, &key, &init, BPF_NOEXIST);
	if (err == -17) { /* EEXIST: created on another CPU meanwhile */
		v = bpf_map_lookup_elem(&tcp_retrans, &key);
		if (v)
			__sync_fetch_and_add(v, segs);
	} else if (err) {
		argus_count_error(ARGUS_ERR_TCP_MAP_FULL);
	}
	return 0;
}

/* ctx: sk, skb and (6.17+) err. Read by index so that one object loads on
 * kernels with and without err. */
static __always_inline int argus_tcp_retrans_ctx(__u64 *ctx)
{
	if (bpf_core_field_exists(struct trace_event_raw_tcp_retransmit_skb___err, err)) {
		if ((int)ctx[2] != 0)
			return 0; /* not sent (busy, no memory, no route, dropped on output) */
	}
	return argus_tcp_retrans((const struct sock *)ctx[0], (const struct sk_buff *)ctx[1]);
}

SEC("tp_btf/tcp_retransmit_skb")
int argus_tcp_retrans_btf(__u64 *ctx)
{
	return argus_tcp_retrans_ctx(ctx);
}

SEC("raw_tp/tcp_retransmit_skb")
int argus_tcp_retrans_raw(struct bpf_raw_tracepoint_args *ctx)
{
	return argus_tcp_retrans_ctx(ctx->args);
}
