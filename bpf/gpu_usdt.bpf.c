/* GPU activity from the USDT producers (libargus-cupti.so, the sim's libcuda):
 * argus:gpu_batch copies a batch of completed wire records into the ring buffer
 * in one piece; argus:gpu_name forwards a kernel name once per id. The batch is
 * already aggregated in the producer (one fire per up to ARGUS_GPU_BATCH_MAX
 * records), so nothing here runs per kernel. */
#include "helpers.bpf.h"
#include <bpf/usdt.bpf.h>

/* Staging for one batch: too big for the BPF stack, one slot per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct argus_gpu_batch_event);
} gpu_scratch SEC(".maps") __weak;

SEC("usdt")
int BPF_USDT(argus_gpu_batch, void *recs, __u32 sent, __u64 dropped)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_GPU))
		return 0;
	__u32 zero = 0;
	struct argus_gpu_batch_event *ev = bpf_map_lookup_elem(&gpu_scratch, &zero);
	if (!ev)
		return 0;
	__u32 n = sent;
	if (n > ARGUS_GPU_BATCH_MAX) {
		argus_count_error(ARGUS_ERR_GPU_BATCH_TRUNCATED);
		n = ARGUS_GPU_BATCH_MAX;
	}
	__u64 bytes = (__u64)n * sizeof(struct argus_gpu_rec);
	if (bytes > sizeof(ev->recs)) /* never: keeps the verifier's bound explicit */
		return 0;
	if (bytes && bpf_probe_read_user(ev->recs, bytes, recs)) {
		argus_count_error(ARGUS_ERR_GPU_READ);
		return 0;
	}
	ev->hdr.type = ARGUS_EV_GPU_BATCH;
	ev->hdr.tgid = tgid;
	ev->hdr.tid = (__u32)id;
	ev->hdr.pad = 0;
	ev->hdr.ts_ns = bpf_ktime_get_ns();
	ev->n = n;
	ev->sent = sent;
	ev->dropped = dropped;
	__u64 size = __builtin_offsetof(struct argus_gpu_batch_event, recs) + bytes;
	if (bpf_ringbuf_output(&events, ev, size, 0))
		argus_count_error(ARGUS_ERR_RINGBUF_GPU);
	return 0;
}

SEC("usdt")
int BPF_USDT(argus_gpu_name, __u32 name_id, const char *name)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_GPU))
		return 0;
	struct argus_gpu_name_event *ev = argus_reserve(sizeof(*ev), ARGUS_EV_GPU_NAME, ARGUS_SRC_GPU);
	if (!ev)
		return 0;
	ev->name_id = name_id;
	ev->pad = 0;
	if (bpf_probe_read_user_str(ev->name, sizeof(ev->name), name) <= 0) {
		/* An unreadable name is counted, never sent: the id keeps what it had. */
		argus_count_error(ARGUS_ERR_GPU_READ);
		bpf_ringbuf_discard(ev, 0);
		return 0;
	}
	bpf_ringbuf_submit(ev, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
