/* Python GC pauses, exact per generation. The collector is probed at entry and
 * return (gc_collect_main, a uprobe + uretprobe; or the python:gc__start /
 * gc__done USDT pair). Which generation ran is read from the interpreter's own
 * counters (generation_stats[g].collections at py_procs[tgid].gc_stats_addr):
 * the one that moved between entry and return. The argument is not trusted:
 * on 3.13 it is -1 for automatic collections, and the function may return
 * without collecting (then nothing moved and nothing is counted).
 *
 * Aggregated in the stats map (ARGUS_STAT_PY_GC per generation, a log2 pause
 * histogram) and the latest absolute counters in py_gc_snap: nothing goes to
 * the ring buffer. Only tgids the agent configured in py_procs are looked at. */
#include "helpers.bpf.h"
#include <bpf/usdt.bpf.h>

struct argus_py_gc_entry {
	__u64 start_ns;
	__s64 collections[3];
	__s32 gen_arg; /* the generation argument (USDT only; -1 otherwise) */
	__u32 pad;
};

/* Entry state per thread. LRU: a thread that dies inside a collection must not
 * fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct argus_py_gc_entry);
} py_gc_inflight SEC(".maps");

/* tgid -> the newest absolute counters seen at a return. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARGUS_MAX_TRACKED);
	__type(key, __u32);
	__type(value, struct argus_py_gc_snap);
} py_gc_snap SEC(".maps");

/* The three `collections` counters; false (and counted) when unreadable. */
static __always_inline bool argus_py_read_counters(__u64 addr, __s64 out[3])
{
	for (int g = 0; g < 3; g++) {
		if (bpf_probe_read_user(&out[g], sizeof(out[g]),
					(void *)(addr + (__u64)g * ARGUS_PY_GC_STATS_STRIDE))) {
			argus_count_error(ARGUS_ERR_READ_USER);
			return false;
		}
	}
	return true;
}

static __always_inline int argus_py_gc_begin(__s32 gen_arg)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct argus_py_proc *proc = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!proc || !proc->gc_stats_addr)
		return 0; /* not a configured rank, or its interpreter is not up yet */
	struct argus_py_gc_entry e = { .gen_arg = gen_arg };
	if (!argus_py_read_counters(proc->gc_stats_addr, e.collections))
		return 0;
	e.start_ns = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&py_gc_inflight, &id, &e, BPF_ANY))
		argus_count_error(ARGUS_ERR_INFLIGHT_FULL);
	return 0;
}

static __always_inline int argus_py_gc_end(void)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct argus_py_gc_entry *e = bpf_map_lookup_elem(&py_gc_inflight, &id);
	if (!e)
		return 0; /* not configured at entry, or attached mid-collection */
	struct argus_py_proc *proc = bpf_map_lookup_elem(&py_procs, &tgid);
	__s64 now_c[3] = {};
	if (!proc || !proc->gc_stats_addr || !argus_py_read_counters(proc->gc_stats_addr, now_c)) {
		bpf_map_delete_elem(&py_gc_inflight, &id);
		return 0;
	}
	/* The generation that ran is the one whose counter moved (the highest,
	 * should a nested collection ever move two). */
	int gen = -1;
	for (int g = 0; g < 3; g++)
		if (now_c[g] > e->collections[g])
			gen = g;
	/* A build whose gc__done fired before the stats update would show no move:
	 * there (USDT only) the start argument names the generation. CPython 3.11
	 * and 3.12 update the stats first (Modules/gcmodule.c), so this is a guard. */
	if (gen < 0 && e->gen_arg >= 0 && e->gen_arg <= 2 && proc->flags & ARGUS_PY_F_GC_BY_USDT)
		gen = e->gen_arg;
	__u64 dt = now - e->start_ns;
	bpf_map_delete_elem(&py_gc_inflight, &id);
	if (gen < 0)
		return 0; /* entered and returned without collecting */

	argus_stat_add(tgid, ARGUS_STAT_PY_GC, (__u16)gen, 0, 1, dt);
	argus_stat_add(tgid, ARGUS_STAT_PY_GC_HIST, (__u16)argus_log2_bucket(dt), 0, 1, dt);

	struct argus_py_gc_snap snap = { .updated_ns = now };
	for (int g = 0; g < 3; g++)
		snap.collections[g] = now_c[g];
	/* Collections run under the GIL: one writer per process at a time. */
	bpf_map_update_elem(&py_gc_snap, &tgid, &snap, BPF_ANY);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(argus_py_gc_enter)
{
	return argus_py_gc_begin(-1);
}

SEC("uretprobe")
int BPF_KRETPROBE(argus_py_gc_exit)
{
	return argus_py_gc_end();
}

SEC("usdt")
int BPF_USDT(argus_py_gc_usdt_start, int generation)
{
	return argus_py_gc_begin(generation);
}

SEC("usdt")
int BPF_USDT(argus_py_gc_usdt_done, long collected)
{
	return argus_py_gc_end();
}

char LICENSE[] SEC("license") = "GPL";
