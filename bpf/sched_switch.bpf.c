/* Off-CPU and on-CPU time of the ranks' threads, and who took their CPU.
 *
 * sched_switch times each thread of a tracked tgid: the slice it ran (ONCPU)
 * and the interval it was off CPU (OFFCPU, by reason). A blocked interval ends
 * at its wakeup; from the wakeup to the switch-in the thread is runnable and
 * waits in the runqueue. Each CPU remembers the rank (tgid) whose thread waits
 * for it (preempted there, or woken onto it) and when the running slice began:
 * every slice that ends while a rank waits is charged to the task that ran it,
 * for the part of it the rank waited (the stealers map).
 *
 * Other tasks cost two hash lookups (prev's and next's tgid) and one array
 * slot per switch, one hash lookup per wakeup. Aggregated in the stats map; nothing goes to the ring buffer. */
#include "helpers.bpf.h"
#include "argus_sched.h"

#define ARGUS_TASK_INTERRUPTIBLE 0x1
#define ARGUS_TASK_DEAD 0x80
/* x86-64 syscall numbers of the futex waits. */
#define ARGUS_NR_FUTEX 202
#define ARGUS_NR_FUTEX_WAITV 449
#define ARGUS_NR_FUTEX_WAIT 455

/* Per-thread scheduling state. */
struct argus_sched_thread {
	__u64 ts;      /* last switch (in or out) */
	__u64 wake_ts; /* wakeup of the current blocked interval, 0 if none yet */
	__u32 wait_cpu; /* the CPU it waits for while runnable */
	__u8 on;        /* on CPU now */
	__u8 reason;    /* enum argus_offcpu_reason of the current off-CPU interval */
	__u8 pad[2];
};

/* Per CPU: when the running slice began, and the rank waiting for the CPU. */
struct argus_cpu_slot {
	__u64 slice_ts;
	__u64 waiter_since;
	__u32 waiter_tgid; /* 0: no followed thread waits here */
	__u32 pad;
};

#define ARGUS_MAX_CPUS 1024

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, ARGUS_MAX_CPUS);
	__type(key, __u32);
	__type(value, struct argus_cpu_slot);
} sched_cpu_slots SEC(".maps");

/* tid -> state. LRU: threads that die (or that the agent forgets) age out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ARGUS_MAX_SCHED_THREADS);
	__type(key, __u32);
	__type(value, struct argus_sched_thread);
} sched_threads SEC(".maps");

/* (victim tgid, stealer tgid) -> the runqueue time charged to the stealer. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ARGUS_MAX_STEALERS);
	__type(key, struct argus_stealer_key);
	__type(value, struct argus_stealer_val);
} cpu_stealers SEC(".maps");

static __always_inline bool argus_sched_followed(__u32 tgid)
{
	__u32 *state = bpf_map_lookup_elem(&tracked, &tgid);
	return state && *state != ARGUS_TGID_IGNORED;
}

/* Whether the task switched out (current: prev is current in sched_switch)
 * sleeps in a futex wait. The BTF task pointer makes bpf_task_pt_regs usable
 * from both flavours. */
static __always_inline bool argus_is_futex_wait(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (!regs)
		return false;
	long nr = (long)BPF_CORE_READ(regs, orig_ax);
	return nr == ARGUS_NR_FUTEX || nr == ARGUS_NR_FUTEX_WAITV || nr == ARGUS_NR_FUTEX_WAIT;
}

static __always_inline __u8 argus_offcpu_reason_of(bool preempt, struct task_struct *prev,
						   unsigned int prev_state)
{
	/* Preempted (or woken before it could block): still runnable. */
	if (preempt || prev_state == 0)
		return ARGUS_OFFCPU_RUNQUEUE;
	if (BPF_CORE_READ_BITFIELD_PROBED(prev, in_iowait))
		return ARGUS_OFFCPU_IO;
	if (argus_is_futex_wait())
		return ARGUS_OFFCPU_LOCK;
	if (prev_state & ARGUS_TASK_INTERRUPTIBLE)
		return ARGUS_OFFCPU_SLEEP;
	return ARGUS_OFFCPU_OTHER;
}

/* The slice `prev` (current) ran while a rank waited for this CPU: charged to
 * prev's process, unless the CPU was idle or prev belongs to the rank. */
static __always_inline void argus_charge_stealer(__u32 victim, struct task_struct *prev, __u64 wait)
{
	__u32 stealer = BPF_CORE_READ(prev, tgid);
	if (BPF_CORE_READ(prev, pid) == 0 || stealer == victim)
		return;
	struct argus_stealer_key key = { .victim_tgid = victim, .stealer_tgid = stealer };
	struct argus_stealer_val *v = bpf_map_lookup_elem(&cpu_stealers, &key);
	if (!v) {
		struct argus_stealer_val init = { .cgroup_id = bpf_get_current_cgroup_id() };
		BPF_CORE_READ_STR_INTO(&init.comm, prev, group_leader, comm);
		long err = bpf_map_update_elem(&cpu_stealers, &key, &init, BPF_NOEXIST);
		if (err && err != -17 /* EEXIST: added on another CPU meanwhile */) {
			argus_count_error(ARGUS_ERR_STEALER_MAP_FULL);
			return;
		}
		v = bpf_map_lookup_elem(&cpu_stealers, &key);
		if (!v) {
			argus_count_error(ARGUS_ERR_STEALER_MAP_FULL);
			return;
		}
	}
	__sync_fetch_and_add(&v->ns, wait);
	__sync_fetch_and_add(&v->count, 1);
}

/* A followed thread of `tgid` is runnable on `cpu` from `now`. */
static __always_inline void argus_wait_on(__u32 cpu, __u32 tgid, __u64 now)
{
	struct argus_cpu_slot *slot = bpf_map_lookup_elem(&sched_cpu_slots, &cpu);
	if (!slot)
		return;
	slot->waiter_tgid = tgid;
	slot->waiter_since = now;
}

static __always_inline void argus_switch_out(__u64 now, bool preempt, struct task_struct *prev,
					     unsigned int prev_state, __u32 tgid, __u32 cpu, struct argus_cpu_slot *slot)
{
	__u32 tid = BPF_CORE_READ(prev, pid);
	if (prev_state & ARGUS_TASK_DEAD) {
		bpf_map_delete_elem(&sched_threads, &tid); /* it never comes back */
		return;
	}
	struct argus_sched_thread *st = bpf_map_lookup_elem(&sched_threads, &tid);
	__u8 reason = argus_offcpu_reason_of(preempt, prev, prev_state);
	if (reason == ARGUS_OFFCPU_RUNQUEUE && slot) { /* it waits for this CPU from now */
		slot->waiter_tgid = tgid;
		slot->waiter_since = now;
	}
	if (st) {
		if (st->on && now > st->ts)
			argus_stat_add(tgid, ARGUS_STAT_ONCPU, 0, 0, 1, now - st->ts);
		st->ts = now;
		st->wake_ts = 0;
		st->wait_cpu = cpu;
		st->on = 0;
		st->reason = reason;
		return;
	}
	/* First seen going off: its slice began before we looked, not timed. */
	struct argus_sched_thread init = { .ts = now, .wait_cpu = cpu, .reason = reason };
	if (bpf_map_update_elem(&sched_threads, &tid, &init, BPF_ANY))
		argus_count_error(ARGUS_ERR_SCHED_MAP_FULL);
}

static __always_inline void argus_switch_in(__u64 now, struct task_struct *next, __u32 tgid, __u32 cpu)
{
	__u32 tid = BPF_CORE_READ(next, pid);
	struct argus_sched_thread *st = bpf_map_lookup_elem(&sched_threads, &tid);
	if (!st) {
		struct argus_sched_thread init = { .ts = now, .wait_cpu = cpu, .on = 1 };
		if (bpf_map_update_elem(&sched_threads, &tid, &init, BPF_ANY))
			argus_count_error(ARGUS_ERR_SCHED_MAP_FULL);
		return;
	}
	if (!st->on && now >= st->ts) {
		__u64 runq_from = st->ts;
		__u8 reason = st->reason;
		if (reason != ARGUS_OFFCPU_RUNQUEUE) {
			/* Blocked until its wakeup (or until now, when none was seen). */
			__u64 woke = st->wake_ts >= st->ts && st->wake_ts <= now ? st->wake_ts : 0;
			__u64 blocked_end = woke ? woke : now;
			if (reason < ARGUS_OFFCPU_MAX)
				argus_stat_add(tgid, ARGUS_STAT_OFFCPU, reason, 0, 1, blocked_end - st->ts);
			runq_from = blocked_end;
		}
		__u64 wait = now - runq_from;
		if (wait > 0) {
			argus_stat_add(tgid, ARGUS_STAT_OFFCPU, ARGUS_OFFCPU_RUNQUEUE, 0, 1, wait);
		}
	}
	if (st->wait_cpu != cpu) { /* it waited on another CPU and was moved here */
		__u32 wc = st->wait_cpu;
		struct argus_cpu_slot *old = bpf_map_lookup_elem(&sched_cpu_slots, &wc);
		if (old && old->waiter_tgid == tgid)
			old->waiter_tgid = 0;
	}
	st->ts = now;
	st->wake_ts = 0;
	st->wait_cpu = cpu;
	st->on = 1;
}

static __always_inline int argus_on_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
					   unsigned int prev_state)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct argus_cpu_slot *slot = bpf_map_lookup_elem(&sched_cpu_slots, &cpu);
	__u32 victim = slot ? slot->waiter_tgid : 0;
	__u32 prev_tgid = BPF_CORE_READ(prev, tgid);
	__u32 next_tgid = BPF_CORE_READ(next, tgid);
	bool prev_f = prev_tgid != 0 && argus_sched_followed(prev_tgid);
	bool next_f = next_tgid != 0 && argus_sched_followed(next_tgid);
	/* The common case on a node: no rank involved and none waiting here. A
	 * slice start is needed only while a rank waits (the charge starts at the
	 * later of the slice start and the wait), so nothing is written. */
	if (!victim && !prev_f && !next_f)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (victim && slot) {
		/* prev's slice ends: charged to it for the part the rank waited. */
		__u64 from = slot->slice_ts > slot->waiter_since ? slot->slice_ts : slot->waiter_since;
		if (now > from)
			argus_charge_stealer(victim, prev, now - from);
		slot->slice_ts = now;
	}
	if (prev_f)
		argus_switch_out(now, preempt, prev, prev_state, prev_tgid, cpu, slot);
	if (next_f) {
		argus_switch_in(now, next, next_tgid, cpu);
		if (slot && slot->waiter_tgid == next_tgid)
			slot->waiter_tgid = 0; /* its wait here is over */
	}
	return 0;
}

/* A blocked thread is runnable from here on. */
static __always_inline int argus_on_wakeup(struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	if (!argus_sched_followed(tgid))
		return 0;
	__u32 tid = BPF_CORE_READ(p, pid);
	struct argus_sched_thread *st = bpf_map_lookup_elem(&sched_threads, &tid);
	if (st && !st->on && st->reason != ARGUS_OFFCPU_RUNQUEUE && st->wake_ts == 0) {
		st->wake_ts = bpf_ktime_get_ns();
		st->wait_cpu = BPF_CORE_READ(p, thread_info.cpu);
		argus_wait_on(st->wait_cpu, tgid, st->wake_ts);
	}
	return 0;
}

/* A new thread of a followed process: runnable from its first wakeup. */
static __always_inline int argus_on_wakeup_new(struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	if (!argus_sched_followed(tgid))
		return 0;
	__u32 tid = BPF_CORE_READ(p, pid);
	struct argus_sched_thread init = {
		.ts = bpf_ktime_get_ns(), .wait_cpu = BPF_CORE_READ(p, thread_info.cpu), .reason = ARGUS_OFFCPU_RUNQUEUE,
	};
	if (bpf_map_update_elem(&sched_threads, &tid, &init, BPF_ANY))
		argus_count_error(ARGUS_ERR_SCHED_MAP_FULL);
	argus_wait_on(init.wait_cpu, tgid, init.ts);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(argus_sched_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return argus_on_switch(preempt, prev, next, prev_state);
}

SEC("raw_tp/sched_switch")
int BPF_PROG(argus_sched_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	return argus_on_switch(preempt, prev, next, prev_state);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(argus_sched_wakeup_btf, struct task_struct *p)
{
	return argus_on_wakeup(p);
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(argus_sched_wakeup_raw, struct task_struct *p)
{
	return argus_on_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(argus_sched_wakeup_new_btf, struct task_struct *p)
{
	return argus_on_wakeup_new(p);
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(argus_sched_wakeup_new_raw, struct task_struct *p)
{
	return argus_on_wakeup_new(p);
}
