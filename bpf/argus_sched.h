/* Structs of the scheduler probes (bpf/sched_switch.bpf.c) that the agent reads:
 * who took a rank's CPU while its threads waited in the runqueue. */
#ifndef ARGUS_BPF_ARGUS_SCHED_H
#define ARGUS_BPF_ARGUS_SCHED_H

#include "argus.h"

#define ARGUS_MAX_SCHED_THREADS 32768 /* rank threads followed (LRU) */
#define ARGUS_MAX_STEALERS 16384      /* (victim, stealer) pairs (LRU) */

/* A rank (victim) and a process that held the CPU it waited for. */
struct argus_stealer_key {
	__u32 victim_tgid;
	__u32 stealer_tgid;
};

struct argus_stealer_val {
	__u64 ns;        /* victim thread-time spent waiting behind it */
	__u64 count;     /* waits attributed to it */
	__u64 cgroup_id; /* its v2 cgroup id when last seen (bpf_get_current_cgroup_id) */
	char comm[16];   /* its process name (the group leader's comm) */
};

ARGUS_ASSERT_SIZE(argus_stealer_key, 8);
ARGUS_ASSERT_SIZE(argus_stealer_val, 40);

#endif /* ARGUS_BPF_ARGUS_SCHED_H */
