/* cuMemcpyHtoD / DtoH / DtoD and their Async variants (default set: a few calls
 * per step): calls and bytes per direction, counted in the per-CPU stats map.
 * Cookie: id = api, count arg = position of ByteCount, flags = direction and
 * ARGUS_COOKIE_COPY_U32. Errors are counted by argus_cuda_ret on the return. */
#include "helpers.bpf.h"

SEC("uprobe")
int BPF_KPROBE(argus_cuda_memcpy)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_CUDA))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 flags = ARGUS_COOKIE_FLAGS(cookie);
	__u64 bytes = argus_arg(ctx, ARGUS_COOKIE_COUNT_ARG(cookie));
	if (flags & ARGUS_COOKIE_COPY_U32)
		bytes &= 0xffffffffull;
	argus_stat_add(tgid, ARGUS_STAT_CUDA_MEMCPY, ARGUS_COOKIE_COPY_DIR(flags), 0, 1, bytes);
	return 0;
}
