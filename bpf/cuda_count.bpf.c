/* Kernel launches (--probes deep only): counted in the per-CPU stats map, never
 * sent one by one. */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_cuda_count)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_CUDA))
		return 0;
	argus_stat_add(tgid, ARGUS_STAT_CUDA_LAUNCH, ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx)), 0, 1, 0);
	return 0;
}
