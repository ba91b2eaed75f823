/* Block I/O latency of the ranks' requests, issue to completion. At issue the
 * request is remembered when `current` is a tracked process (the rank issued it
 * itself: direct and synchronous writes, fsync's data, reads); completion runs
 * in interrupt context and takes the tgid remembered. Requests that kernel
 * threads issue for a rank (writeback by kworkers, the journal by jbd2) are
 * not attributed. Aggregated in the stats map: per op, and a log2 histogram. */
#include "helpers.bpf.h"
#include "argus_netblk.h"

#define ARGUS_REQ_OP_MASK 0xff /* (1 << REQ_OP_BITS) - 1 */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARGUS_MAX_BLOCK_INFLIGHT);
	__type(key, __u64); /* struct request * (request structs are preallocated per tag and reused) */
	__type(value, struct argus_block_start);
} block_inflight SEC(".maps");

static __always_inline __u32 argus_block_op_of(__u32 cmd_flags)
{
	switch (cmd_flags & ARGUS_REQ_OP_MASK) {
	case 0: return ARGUS_BLOCK_READ;    /* REQ_OP_READ */
	case 1: return ARGUS_BLOCK_WRITE;   /* REQ_OP_WRITE */
	case 2: return ARGUS_BLOCK_FLUSH;   /* REQ_OP_FLUSH */
	case 3: return ARGUS_BLOCK_DISCARD; /* REQ_OP_DISCARD */
	default: return ARGUS_BLOCK_OTHER;  /* secure erase, write zeroes, zone ops, driver private */
	}
}

static __always_inline int argus_block_issue(struct request *rq)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 *state = bpf_map_lookup_elem(&tracked, &tgid);
	if (!state || *state == ARGUS_TGID_IGNORED)
		return 0;
	__u64 key = (__u64)rq;
	struct argus_block_start st = {
		.start_ns = bpf_ktime_get_ns(),
		.tgid = tgid,
		.op = argus_block_op_of(BPF_CORE_READ(rq, cmd_flags)),
	};
	if (bpf_map_update_elem(&block_inflight, &key, &st, BPF_ANY))
		argus_count_error(ARGUS_ERR_BLOCK_MAP_FULL);
	return 0;
}

/* The first completion ends the timing (a partial completion fires again). */
static __always_inline int argus_block_complete(struct request *rq)
{
	__u64 key = (__u64)rq;
	struct argus_block_start *st = bpf_map_lookup_elem(&block_inflight, &key);
	if (!st)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u64 ns = now > st->start_ns ? now - st->start_ns : 0;
	__u32 tgid = st->tgid;
	__u32 op = st->op;
	bpf_map_delete_elem(&block_inflight, &key);
	argus_stat_add(tgid, ARGUS_STAT_BLOCK_IO, op, 0, 1, ns);
	argus_stat_add(tgid, ARGUS_STAT_BLOCK_IO_HIST, argus_log2_bucket(ns), op, 1, ns);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(argus_block_issue_btf, struct request *rq)
{
	return argus_block_issue(rq);
}

SEC("raw_tp/block_rq_issue")
int BPF_PROG(argus_block_issue_raw, struct request *rq)
{
	return argus_block_issue(rq);
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(argus_block_complete_btf, struct request *rq)
{
	return argus_block_complete(rq);
}

SEC("raw_tp/block_rq_complete")
int BPF_PROG(argus_block_complete_raw, struct request *rq)
{
	return argus_block_complete(rq);
}
