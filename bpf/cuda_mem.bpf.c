/* Device memory handed out and given back through the driver: cuMemAlloc*,
 * cuMemAllocAsync / FromPoolAsync, cuMemAllocManaged, cuMemAllocPitch and the
 * virtual memory API's cuMemCreate, their frees (cuMemFree*, cuMemFreeAsync,
 * cuMemRelease), cuMemMap / cuMemUnmap, and the GPU's total memory as the
 * process's own cuMemGetInfo / cuDeviceTotalMem return it.
 *
 * The entry keeps the arguments (the size, where the result will be written);
 * the return reads the result: an allocation's address (or handle) and size
 * go into gpu_allocs, and its free takes them out again, so held bytes are
 * exact where both ends were seen. A free whose allocation was not seen (made
 * before the agent attached) is counted as unpaired, never guessed at. The
 * calls are rare (a caching allocator asks the driver only when its pool
 * grows), so each is paired one by one; nothing here runs per kernel. */
#include "helpers.bpf.h"

#define ARGUS_MAX_GPU_ALLOCS 131072
#define CUDA_ERROR_OUT_OF_MEMORY 2

/* Live allocations of every tracked process. Not LRU: an evicted entry would
 * make its free unpaired and its bytes held forever; a full map is counted
 * (ARGUS_ERR_GPU_ALLOC_MAP_FULL) and that allocation is not held instead.
 * The agent deletes an ended process's entries. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARGUS_MAX_GPU_ALLOCS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct argus_gpu_alloc_key);
	__type(value, struct argus_gpu_alloc);
} gpu_allocs SEC(".maps");

/* tgid -> what it holds, its peak and its GPU's total. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct argus_gpu_mem);
} gpu_mem SEC(".maps");

static __always_inline struct argus_gpu_mem *gpu_mem_of(__u32 tgid)
{
	struct argus_gpu_mem *m = bpf_map_lookup_elem(&gpu_mem, &tgid);
	if (m)
		return m;
	struct argus_gpu_mem zero = {};
	bpf_map_update_elem(&gpu_mem, &tgid, &zero, BPF_NOEXIST); /* EEXIST: another thread made it */
	return bpf_map_lookup_elem(&gpu_mem, &tgid);
}

/* Held bytes move by delta; the peak follows. Two threads that allocate at once
 * may both compare against the old peak: the larger sum still wins the later
 * compare, since each compares the held value its own add returned. */
static __always_inline void held_add(__u32 tgid, __s64 delta)
{
	struct argus_gpu_mem *m = gpu_mem_of(tgid);
	if (!m)
		return;
	__s64 now = __sync_add_and_fetch(&m->held, delta);
	if (now > 0 && (__u64)now > m->peak)
		m->peak = (__u64)now;
}

static __always_inline bool read_user_u64(__u64 *out, __u64 addr)
{
	if (bpf_probe_read_user(out, sizeof(*out), (const void *)addr) == 0)
		return true;
	argus_count_error(ARGUS_ERR_READ_USER);
	return false;
}

static __always_inline __u64 asked_bytes(const struct argus_inflight *st)
{
	switch (st->rank) {
	case ARGUS_MEM_ALLOC_U32:
		return st->child.parent & 0xffffffffull;
	case ARGUS_MEM_ALLOC_PITCH:
		return (__u64)(__u32)st->nranks * st->child.list; /* width x height (the pitch pads it) */
	default:
		return st->child.parent;
	}
}

static __always_inline void oom_failed(__u64 pid_tgid, const struct argus_inflight *st, int ret)
{
	__u32 tgid = pid_tgid >> 32;
	struct argus_gpu_oom_event *ev = argus_reserve(sizeof(*ev), ARGUS_EV_GPU_OOM, ARGUS_SRC_CUDA);
	if (!ev)
		return;
	struct argus_gpu_mem *m = bpf_map_lookup_elem(&gpu_mem, &tgid);
	ev->asked = asked_bytes(st);
	ev->held = m ? m->held : 0;
	ev->peak = m ? m->peak : 0;
	ev->total = m ? m->total : 0;
	ev->api = st->id;
	ev->result = ret;
	bpf_ringbuf_submit(ev, 0); /* rare and urgent: wakes the agent */
}

static __always_inline void allocated(__u32 tgid, const struct argus_inflight *st)
{
	struct argus_gpu_alloc_key key = { .tgid = tgid, .family = ARGUS_MEM_FAMILY_ADDRESS };
	struct argus_gpu_alloc val = { .api = st->id };
	switch (st->rank) {
	case ARGUS_MEM_ALLOC_U32: {
		__u32 addr = 0;
		if (bpf_probe_read_user(&addr, sizeof(addr), (const void *)st->ptr)) {
			argus_count_error(ARGUS_ERR_READ_USER);
			return;
		}
		key.addr = addr;
		val.bytes = st->child.parent & 0xffffffffull;
		break;
	}
	case ARGUS_MEM_ALLOC_PITCH: {
		__u64 pitch = 0;
		if (!read_user_u64(&key.addr, st->ptr) || !read_user_u64(&pitch, st->child.parent))
			return;
		val.bytes = pitch * st->child.list;
		break;
	}
	case ARGUS_MEM_CREATE:
		key.family = ARGUS_MEM_FAMILY_HANDLE;
		/* fall through */
	default:
		if (!read_user_u64(&key.addr, st->ptr))
			return;
		val.bytes = st->child.parent;
		break;
	}
	argus_stat_add(tgid, ARGUS_STAT_GPU_ALLOC, st->id, 0, 1, val.bytes);
	/* An address handed out again while the agent still holds it: its free was
	 * not seen (a return probe lost). The old bytes are no longer held. */
	struct argus_gpu_alloc *old = bpf_map_lookup_elem(&gpu_allocs, &key);
	__s64 delta = (__s64)val.bytes - (old ? (__s64)old->bytes : 0);
	if (bpf_map_update_elem(&gpu_allocs, &key, &val, BPF_ANY)) {
		argus_count_error(ARGUS_ERR_GPU_ALLOC_MAP_FULL);
		return;
	}
	held_add(tgid, delta);
}

static __always_inline void freed(__u32 tgid, const struct argus_inflight *st)
{
	struct argus_gpu_alloc_key key = {
		.tgid = tgid,
		.family = st->rank == ARGUS_MEM_RELEASE ? ARGUS_MEM_FAMILY_HANDLE : ARGUS_MEM_FAMILY_ADDRESS,
		.addr = st->rank == ARGUS_MEM_FREE_U32 ? (st->ptr & 0xffffffffull) : st->ptr,
	};
	if (key.addr == 0)
		return; /* freeing NULL does nothing */
	struct argus_gpu_alloc *a = bpf_map_lookup_elem(&gpu_allocs, &key);
	__u64 bytes = a ? a->bytes : 0;
	if (!a || bpf_map_delete_elem(&gpu_allocs, &key)) {
		argus_stat_add(tgid, ARGUS_STAT_GPU_FREE_UNPAIRED, st->id, 0, 1, 0);
		return;
	}
	argus_stat_add(tgid, ARGUS_STAT_GPU_FREE, st->id, 0, 1, bytes);
	held_add(tgid, -(__s64)bytes);
}

static __always_inline void total_reported(__u32 tgid, __u64 where)
{
	__u64 total = 0;
	if (!read_user_u64(&total, where) || total == 0)
		return;
	struct argus_gpu_mem *m = gpu_mem_of(tgid);
	if (m)
		m->total = total;
}

/* Cookie: id = api, flags = enum argus_mem_shape. Arguments 1, 2 and 4 are
 * kept (3 as well for a pitch: its width, for the size asked); which mean what
 * is the shape's business at the return. */
SEC("uprobe")
int BPF_KPROBE(argus_cuda_mem_enter)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!argus_should_trace(tgid, ARGUS_SRC_CUDA))
		return 0;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	struct argus_inflight st = {
		.start_ns = bpf_ktime_get_ns(),
		.ptr = PT_REGS_PARM1(ctx),
		.id = ARGUS_COOKIE_ID(cookie),
		.kind = ARGUS_STAT_GPU_ALLOC,
		.rank = (__s32)ARGUS_COOKIE_FLAGS(cookie),
		.nranks = (__s32)PT_REGS_PARM3(ctx),
		.child = { .parent = PT_REGS_PARM2(ctx), .list = PT_REGS_PARM4(ctx) },
	};
	argus_inflight_begin(ARGUS_CLS_MEM, &st);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(argus_cuda_mem_exit, int ret)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct argus_inflight st;
	if (!argus_inflight_end(ARGUS_CLS_MEM, pid_tgid, &st))
		return 0;
	if (st.kind != ARGUS_STAT_GPU_ALLOC)
		return 0;
	__u32 tgid = pid_tgid >> 32;
	bool allocation = st.rank == ARGUS_MEM_ALLOC || st.rank == ARGUS_MEM_ALLOC_U32 ||
			  st.rank == ARGUS_MEM_ALLOC_PITCH || st.rank == ARGUS_MEM_CREATE;
	if (ret != 0) {
		argus_stat_add(tgid, ARGUS_STAT_CUDA_ERROR, st.id, ret, 1, 0);
		if (allocation && ret == CUDA_ERROR_OUT_OF_MEMORY)
			oom_failed(pid_tgid, &st, ret);
		return 0;
	}
	switch (st.rank) {
	case ARGUS_MEM_FREE:
	case ARGUS_MEM_FREE_U32:
	case ARGUS_MEM_RELEASE:
		freed(tgid, &st);
		break;
	case ARGUS_MEM_MAP:
		argus_stat_add(tgid, ARGUS_STAT_GPU_MAP, st.id, 0, 1, st.child.parent);
		break;
	case ARGUS_MEM_INFO:
		total_reported(tgid, st.child.parent);
		break;
	case ARGUS_MEM_TOTAL:
		total_reported(tgid, st.ptr);
		break;
	default:
		if (allocation)
			allocated(tgid, &st);
		break;
	}
	return 0;
}
