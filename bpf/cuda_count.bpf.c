/* Kernel launches (--probes deep only): counted in the per-CPU stats map, never
 * sent one by one. The entry time is kept per thread (class ARGUS_CLS_LAUNCH)
 * for argus_cuda_launch_exit, which adds the time spent inside the call. */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_cuda_count)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_CUDA))
		return 0;
	__u32 id = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx));
	argus_stat_add(tgid, ARGUS_STAT_CUDA_LAUNCH, id, 0, 1, 0);
	struct argus_inflight st = {
		.start_ns = bpf_ktime_get_ns(),
		.id = id,
		.kind = ARGUS_STAT_CUDA_LAUNCH_TIME,
	};
	argus_inflight_begin(ARGUS_CLS_LAUNCH, &st);
	return 0;
}
