/* Return codes of rarely called CUDA APIs (allocation, init): a non-zero
 * CUresult is counted per (api, code). */
#include "helpers.bpf.h"

SEC("uretprobe")
int BPF_KRETPROBE(argus_cuda_ret, int ret)
{
	if (ret == 0)
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_CUDA))
		return 0;
	argus_stat_add(tgid, ARGUS_STAT_CUDA_ERROR, ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx)), ret, 1, 0);
	return 0;
}
