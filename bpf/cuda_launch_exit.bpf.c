/* The return half of a kernel launch (--probes deep only): the host time spent
 * inside cuLaunchKernel* is added to a log2 histogram whose buckets also sum
 * the time (one map update per launch, never an event), and a non-zero
 * CUresult is counted as an error of that api. Cookie: id = api. */
#include "helpers.bpf.h"

SEC("uretprobe")
int BPF_KRETPROBE(argus_cuda_launch_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u32 api = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx));

	struct argus_inflight st;
	if (!argus_inflight_end(ARGUS_CLS_LAUNCH, pid_tgid, &st)) {
		/* Not traced, or the agent attached while this launch was running:
		 * a failed launch of a traced rank still counts as an error. */
		if (ret != 0 && argus_tgid_traced(tgid))
			argus_stat_add(tgid, ARGUS_STAT_CUDA_ERROR, api, ret, 1, 0);
		return 0;
	}
	__u64 dt = bpf_ktime_get_ns() - st.start_ns;

	argus_stat_add(tgid, ARGUS_STAT_CUDA_LAUNCH_HIST, argus_log2_bucket(dt), 0, 1, dt);
	if (ret != 0)
		argus_stat_add(tgid, ARGUS_STAT_CUDA_ERROR, api, ret, 1, 0);
	return 0;
}
