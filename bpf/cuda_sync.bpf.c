/* cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize (and variants):
 * the entry half; argus_timed_exit adds the time blocked. */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_cuda_sync_enter)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_CUDA))
		return 0;
	struct argus_inflight st = {
		.start_ns = bpf_ktime_get_ns(),
		.id = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx)),
		.kind = ARGUS_STAT_CUDA_SYNC,
	};
	argus_inflight_begin(ARGUS_CLS_CUDA, &st);
	return 0;
}
