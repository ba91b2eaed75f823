/* Why a tracked process ended: the fatal signal that was generated for it and
 * who sent it (signal_generate), and whether the OOM killer chose it
 * (mark_victim). Kept per tgid in the exit_info map until its exit event
 * carries it. Sizes asserted on both sides. */
#ifndef ARGUS_BPF_ARGUS_EXIT_H
#define ARGUS_BPF_ARGUS_EXIT_H

#ifndef __BPF__
#include <linux/types.h>
#endif

#define ARGUS_EXIT_F_SIGNAL 1 /* a fatal-by-default signal was generated for it */
#define ARGUS_EXIT_F_KERNEL 2 /* ... by the kernel (si_code > 0: a fault, the OOM killer, ...) */
#define ARGUS_EXIT_F_OOM 4    /* the OOM killer chose it */

#define ARGUS_EXIT_COMM_LEN 16

struct argus_exit_info {
	__s32 signal;      /* the newest fatal-by-default signal generated for the process */
	__u32 sender_tgid; /* current's tgid when it was generated; 0 when the kernel sent it */
	__u32 flags;       /* ARGUS_EXIT_F_* */
	__u32 pad;
	char sender_comm[ARGUS_EXIT_COMM_LEN]; /* "kernel" when the kernel sent it */
};

#ifdef __cplusplus
static_assert(sizeof(struct argus_exit_info) == 32, "argus_exit_info layout");
#else
_Static_assert(sizeof(struct argus_exit_info) == 32, "argus_exit_info layout");
#endif

#endif /* ARGUS_BPF_ARGUS_EXIT_H */
