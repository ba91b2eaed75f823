/* Helpers shared by the Argus BPF programs: tgid filtering, aggregation,
 * error counting, argument access and event emission. */
#ifndef ARGUS_HELPERS_BPF_H
#define ARGUS_HELPERS_BPF_H

#include "maps.bpf.h"
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>


static __always_inline void argus_count_error(__u32 err)
{
	__u64 *v = bpf_map_lookup_elem(&bpf_errors, &err);
	if (v)
		*v += 1; /* per-CPU slot: no atomics needed */
}

static __always_inline __u32 argus_ringbuf_error(__u32 source)
{
	switch (source) {
	case ARGUS_SRC_NCCL:
		return ARGUS_ERR_RINGBUF_NCCL;
	case ARGUS_SRC_CUDA:
		return ARGUS_ERR_RINGBUF_CUDA;
	case ARGUS_SRC_GPU:
		return ARGUS_ERR_RINGBUF_GPU;
	default:
		return ARGUS_ERR_RINGBUF_PROC;
	}
}

/* Reserves an event and fills its header with the caller's thread id and
 * time (a probe that has both already saves the helper calls); a full ring
 * buffer is counted, per source, as lost events. */
static __always_inline void *argus_reserve_at(__u64 size, __u32 type, __u32 source, __u64 pid_tgid,
					      __u64 ts_ns)
{
	struct argus_event_header *hdr = bpf_ringbuf_reserve(&events, size, 0);
	if (!hdr) {
		argus_count_error(argus_ringbuf_error(source));
		return 0;
	}
	hdr->type = type;
	hdr->tgid = pid_tgid >> 32;
	hdr->tid = (__u32)pid_tgid;
	hdr->pad = 0;
	hdr->ts_ns = ts_ns;
	return hdr;
}

static __always_inline void *argus_reserve(__u64 size, __u32 type, __u32 source)
{
	return argus_reserve_at(size, type, source, bpf_get_current_pid_tgid(), bpf_ktime_get_ns());
}

/* Set by the loader before load (LoaderOptions::ring_wake_divisor); __weak:
 * every program file includes this one definition. */
const volatile __u32 argus_ring_wake_divisor __weak = ARGUS_RING_WAKE_DIVISOR;

/* Submits an event of a hot path (collectives, call spans) without
 * waking the agent, until an eighth of the ring buffer waits: the agent drains
 * the ring on every poll interval anyway (50 ms). A wakeup costs the traced
 * thread an irq_work and often an IPI, more than the rest of the probe; rare
 * events (exec, exit, a new tgid) still wake the agent at once. Past the
 * eighth the wakeup is forced: the default (adaptive) one is sent only when the
 * agent has read everything before this record, which the unannounced records
 * ahead of it prevent, so it never came, and a small ring filled up between
 * two polls (64 KiB lost 76% of 10^5 events/s: bench/event_rate.py). Forced
 * wakeups queued before the agent runs coalesce into one. The eighth is
 * argus_ring_wake_divisor's default. */
static __always_inline void argus_submit_hot(void *ev)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);
	__u32 divisor = argus_ring_wake_divisor ? argus_ring_wake_divisor : ARGUS_RING_WAKE_DIVISOR;
	bpf_ringbuf_submit(ev, avail >= size / divisor ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* Whether calls from this tgid are traced. A tgid the agent has not seen yet is
 * tracked at once (anything calling into a probed NCCL/CUDA file is a rank) and
 * reported, so that no call of a rank started after the agent is lost. */
static __always_inline bool argus_should_trace(__u32 tgid, __u32 source)
{
	__u32 *state = bpf_map_lookup_elem(&tracked, &tgid);
	if (state)
		return *state != ARGUS_TGID_IGNORED;

	__u32 auto_state = ARGUS_TGID_AUTO;
	long err = bpf_map_update_elem(&tracked, &tgid, &auto_state, BPF_NOEXIST);
	if (err == 0) {
		struct argus_tgid_seen_event *ev =
			argus_reserve(sizeof(*ev), ARGUS_EV_TGID_SEEN, ARGUS_SRC_PROC);
		if (ev) {
			ev->source = source;
			ev->pad = 0;
			bpf_ringbuf_submit(ev, 0);
		}
	} else if (err != -17 /* EEXIST: another thread won the race */) {
		argus_count_error(ARGUS_ERR_TRACKED_FULL);
	}
	return true;
}

/* Whether the agent follows this tgid (tracked or auto-tracked); unlike
 * argus_should_trace, a tgid not met yet is left alone. */
static __always_inline bool argus_tgid_traced(__u32 tgid)
{
	__u32 *state = bpf_map_lookup_elem(&tracked, &tgid);
	return state && *state != ARGUS_TGID_IGNORED;
}

static __always_inline void argus_stat_add_key(const struct argus_stat_key *key, __u64 count, __u64 sum)
{
	struct argus_stat_val *val = bpf_map_lookup_elem(&stats, key);
	if (val) {
		val->count += count;
		val->sum += sum;
		return;
	}
	struct argus_stat_val init = { .count = count, .sum = sum };
	long err = bpf_map_update_elem(&stats, key, &init, BPF_NOEXIST);
	if (err == -17) { /* EEXIST: created by this tgid on another CPU meanwhile */
		val = bpf_map_lookup_elem(&stats, key);
		if (val) {
			val->count += count;
			val->sum += sum;
			return;
		}
	}
	if (err)
		argus_count_error(ARGUS_ERR_STATS_FULL);
}

static __always_inline void argus_stat_add(__u32 tgid, __u16 kind, __u16 sub, __s32 code,
					   __u64 count, __u64 sum)
{
	struct argus_stat_key key = {
		.tgid = tgid, .kind = kind, .sub = sub, .code = code, .pad = 0,
	};
	argus_stat_add_key(&key, count, sum);
}

/* The idx-th (1-based) integer argument of a SysV x86-64 call at function entry.
 * Arguments 7+ live on the stack above the return address. */
static __always_inline __u64 argus_arg(struct pt_regs *ctx, __u32 idx)
{
	switch (idx) {
	case 1: return PT_REGS_PARM1(ctx);
	case 2: return PT_REGS_PARM2(ctx);
	case 3: return PT_REGS_PARM3(ctx);
	case 4: return PT_REGS_PARM4(ctx);
	case 5: return PT_REGS_PARM5(ctx);
	case 6: return ctx->r9; /* libbpf 1.1 has no PT_REGS_PARM6 */
	case 7:
	case 8: {
		__u64 v = 0;
		__u64 sp = PT_REGS_SP(ctx);
		if (bpf_probe_read_user(&v, sizeof(v), (void *)(sp + 8 * (idx - 6))))
			argus_count_error(ARGUS_ERR_READ_USER);
		return v;
	}
	default:
		return 0;
	}
}

/* Each thread keeps one in-flight slot per library class for its life (LRU:
 * dead threads' slots are reused). A call fills it in place and its return
 * marks it free (start_ns = 0) instead of deleting it: a hash update and a
 * delete per call cost more than the rest of the probe. */
static __always_inline void argus_inflight_begin(__u32 cls, struct argus_inflight *st)
{
	struct argus_inflight_key key = { .pid_tgid = bpf_get_current_pid_tgid(), .cls = cls };
	struct argus_inflight *slot = bpf_map_lookup_elem(&inflight, &key);
	if (slot) {
		*slot = *st;
		return;
	}
	if (bpf_map_update_elem(&inflight, &key, st, BPF_ANY))
		argus_count_error(ARGUS_ERR_INFLIGHT_FULL);
}

/* Copies the thread's open call of class cls into *out and frees the slot;
 * false when it has none. */
static __always_inline bool argus_inflight_take(__u32 cls, __u64 pid_tgid, struct argus_inflight *out)
{
	struct argus_inflight_key key = { .pid_tgid = pid_tgid, .cls = cls };
	struct argus_inflight *slot = bpf_map_lookup_elem(&inflight, &key);
	if (!slot || !slot->start_ns)
		return false;
	*out = *slot;
	slot->start_ns = 0;
	return true;
}

/* The return half: argus_inflight_take, where a return without its entry
 * (the call was not traced, or began before the probes did) is counted for a
 * tracked tgid. */
static __always_inline bool argus_inflight_end(__u32 cls, __u64 pid_tgid, struct argus_inflight *out)
{
	if (argus_inflight_take(cls, pid_tgid, out))
		return true;
	if (argus_tgid_traced(pid_tgid >> 32))
		argus_count_error(ARGUS_ERR_RETURN_UNMATCHED);
	return false;
}

/* The next value of a per-(process, kind, communicator) counter (from 1): a
 * collective's number, or the n-th split or shrink of a parent. */
static __always_inline __u64 argus_next_count(__u32 tgid, __u32 kind, __u64 comm)
{
	struct argus_seq_key key = { .tgid = tgid, .kind = kind, .comm = comm };
	__u64 *v = bpf_map_lookup_elem(&coll_seq, &key);
	if (v)
		return __sync_add_and_fetch(v, 1);
	__u64 first = 1;
	if (bpf_map_update_elem(&coll_seq, &key, &first, BPF_NOEXIST) == 0)
		return 1;
	v = bpf_map_lookup_elem(&coll_seq, &key); /* another thread created it */
	return v ? __sync_add_and_fetch(v, 1) : 0;
}

/* Bit length of v: 0 for 0, b for v in [2^(b-1), 2^b). */
static __always_inline __u32 argus_log2_bucket(__u64 v)
{
	__u32 b = 0;
	if (v >> 32) { v >>= 32; b += 32; }
	if (v >> 16) { v >>= 16; b += 16; }
	if (v >> 8) { v >>= 8; b += 8; }
	if (v >> 4) { v >>= 4; b += 4; }
	if (v >> 2) { v >>= 2; b += 2; }
	if (v >> 1) { v >>= 1; b += 1; }
	return b + (__u32)v;
}

#endif
