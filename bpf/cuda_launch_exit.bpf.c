/* The return half of a kernel launch (--probes deep only): the host time spent
 * inside cuLaunchKernel* is added to the launch's aggregate and to a log2
 * histogram (never an event per launch), and a non-zero CUresult is counted as
 * an error of that api. Cookie: id = api. */
#include "helpers.bpf.h"

SEC("uretprobe")
int BPF_KRETPROBE(argus_cuda_launch_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	__u32 api = ARGUS_COOKIE_ID(bpf_get_attach_cookie(ctx));
	struct argus_inflight_key key = { .pid_tgid = pid_tgid, .cls = ARGUS_CLS_LAUNCH };

	struct argus_inflight *st = bpf_map_lookup_elem(&inflight, &key);
	if (!st) {
		/* Not traced, or the agent attached while this launch was running. */
		__u32 *state = bpf_map_lookup_elem(&tracked, &tgid);
		if (!state || *state == ARGUS_TGID_IGNORED)
			return 0;
		argus_count_error(ARGUS_ERR_RETURN_UNMATCHED);
		if (ret != 0)
			argus_stat_add(tgid, ARGUS_STAT_CUDA_ERROR, api, ret, 1, 0);
		return 0;
	}
	__u64 dt = bpf_ktime_get_ns() - st->start_ns;
	bpf_map_delete_elem(&inflight, &key);

	argus_stat_add(tgid, ARGUS_STAT_CUDA_LAUNCH_TIME, api, 0, 1, dt);
	argus_stat_add(tgid, ARGUS_STAT_CUDA_LAUNCH_HIST, argus_log2_bucket(dt), 0, 1, dt);
	if (ret != 0)
		argus_stat_add(tgid, ARGUS_STAT_CUDA_ERROR, api, ret, 1, 0);
	return 0;
}
