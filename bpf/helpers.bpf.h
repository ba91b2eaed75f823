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

/* Reserves an event and fills its header; a full ring buffer is counted, per
 * source, as lost events. */
static __always_inline void *argus_reserve(__u64 size, __u32 type, __u32 source)
{
	struct argus_event_header *hdr = bpf_ringbuf_reserve(&events, size, 0);
	if (!hdr) {
		argus_count_error(argus_ringbuf_error(source));
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	hdr->type = type;
	hdr->tgid = id >> 32;
	hdr->tid = (__u32)id;
	hdr->pad = 0;
	hdr->ts_ns = bpf_ktime_get_ns();
	return hdr;
}

/* Submits an event of a hot path (collectives, call spans) without
 * waking the agent, until an eighth of the ring buffer waits: the agent drains
 * the ring on every poll interval anyway (50 ms). A wakeup costs the traced
 * thread an irq_work and often an IPI, more than the rest of the probe; rare
 * events (exec, exit, a new tgid) still wake the agent at once. Past the
 * eighth the wakeup is forced: the default (adaptive) one is sent only when the
 * agent has read everything before this record, which the unannounced records
 * ahead of it prevent, so it never came, and a small ring filled up between
 * two polls (64 KiB lost 76% of 10^5 events/s: bench/event_rate.py). Forced
 * wakeups queued before the agent runs coalesce into one. */
static __always_inline void argus_submit_hot(void *ev)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);
	bpf_ringbuf_submit(ev, avail >= size / 8 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
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

static __always_inline void argus_stat_add(__u32 tgid, __u16 kind, __u16 sub, __s32 code,
					   __u64 count, __u64 sum)
{
	struct argus_stat_key key = {
		.tgid = tgid, .kind = kind, .sub = sub, .code = code, .pad = 0,
	};
	struct argus_stat_val *val = bpf_map_lookup_elem(&stats, &key);
	if (val) {
		val->count += count;
		val->sum += sum;
		return;
	}
	struct argus_stat_val init = { .count = count, .sum = sum };
	long err = bpf_map_update_elem(&stats, &key, &init, BPF_NOEXIST);
	if (err == -17) { /* EEXIST: created by this tgid on another CPU meanwhile */
		val = bpf_map_lookup_elem(&stats, &key);
		if (val) {
			val->count += count;
			val->sum += sum;
			return;
		}
	}
	if (err)
		argus_count_error(ARGUS_ERR_STATS_FULL);
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

static __always_inline void argus_inflight_begin(__u32 cls, struct argus_inflight *st)
{
	struct argus_inflight_key key = { .pid_tgid = bpf_get_current_pid_tgid(), .cls = cls };
	if (bpf_map_update_elem(&inflight, &key, st, BPF_ANY))
		argus_count_error(ARGUS_ERR_INFLIGHT_FULL);
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
