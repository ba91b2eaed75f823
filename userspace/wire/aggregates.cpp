#include "userspace/wire/aggregates.h"

#include <string>

#include "bpf/argus.h"
#include "userspace/wire/labels.h"

namespace argus {

namespace {

// A backend's calls under its group's label; one whose making the agent did
// not see (it attached late) is "unnamed", of the backend its method was.
void add_process_group_calls(const AggregateRecord& r, RankSnapshot& s) {
  std::string label = "unnamed", kind = c10d_backend_label(r.sub >> 8);
  for (const auto& g : s.process_groups)
    if (g.backend == r.object) {
      label = process_group_label(g);
      kind = g.backend_kind;
    }
  s.process_group_calls[{label, kind, c10d_op_label(r.sub & 0xff)}] += r.count;
}

void add_calls(CopyCounters& c, const AggregateRecord& r) {
  c.calls += r.count;
  c.bytes += r.sum;
}

// The calls that hand out device memory (host allocations are not the GPU's).
bool is_device_allocation_api(uint32_t api) {
  return api == ARGUS_CU_MEM_ALLOC || api == ARGUS_CU_MEM_ALLOC_ASYNC || api == ARGUS_CU_MEM_ALLOC_MANAGED ||
         api == ARGUS_CU_MEM_ALLOC_PITCH || api == ARGUS_CU_MEM_CREATE;
}

}  // namespace

AggregateRecord aggregate_of(const StatEntry& s) {
  AggregateRecord r{s.key.tgid, s.key.kind, s.key.sub, s.key.code, s.value.count, s.value.sum};
  if (s.key.kind == ARGUS_STAT_C10D_CALLS)
    r.object = (static_cast<uint64_t>(s.key.pad) << 32) | static_cast<uint32_t>(s.key.code);
  return r;
}

void apply_aggregates(const std::vector<AggregateRecord>& records, RankSnapshot& s) {
  // BPF keeps totals since the process was first seen: replace, never add.
  s.nccl.clear();
  s.nccl_groups = GroupCounters{};
  s.sync.clear();
  s.cuda_errors.clear();
  s.gpu_memory.allocations.clear();
  s.gpu_memory.frees.clear();
  s.gpu_memory.maps.clear();
  s.gpu_memory.unpaired_frees = 0;
  s.gpu_memory.failures.clear();
  s.nccl_errors.clear();
  s.kernel_launches = 0;
  s.launch_timing = LaunchTiming{};
  s.memcpy.clear();
  s.python_gc.timed = 0;
  s.python_gc.ns = 0;
  s.python_gc.log2_buckets.clear();
  s.block_io.clear();
  s.offcpu.offcpu_ns.fill(0);
  s.offcpu.oncpu_ns = 0;
  s.process_group_calls.clear();
  s.process_group_waits = {};
  for (const auto& r : records) {
    switch (r.kind) {
      case ARGUS_STAT_NCCL_CALLS: {
        auto& c = s.nccl[nccl_op_label(r.sub)];
        c.calls += r.count;
        c.bytes += r.sum;
        break;
      }
      case ARGUS_STAT_NCCL_WAIT:
        s.nccl[nccl_op_label(r.sub)].wait_ns += r.sum;
        break;
      case ARGUS_STAT_NCCL_GROUP:
        s.nccl_groups.ended += r.count;
        s.nccl_groups.ops += r.sum;
        break;
      case ARGUS_STAT_NCCL_GROUP_WAIT:
        s.nccl_groups.timed += r.count;
        s.nccl_groups.wait_ns += r.sum;
        break;
      case ARGUS_STAT_CUDA_SYNC: {
        auto& c = s.sync[cuda_api_label(r.sub)];
        c.calls += r.count;
        c.wait_ns += r.sum;
        break;
      }
      case ARGUS_STAT_CUDA_LAUNCH:
        s.kernel_launches += r.count;
        break;
      case ARGUS_STAT_CUDA_LAUNCH_HIST:  // its buckets sum to the timed launches and their time
        s.launch_timing.count += r.count;
        s.launch_timing.ns += r.sum;
        s.launch_timing.log2_buckets[r.sub] += r.count;
        break;
      case ARGUS_STAT_PY_GC:
        s.python_gc.timed += r.count;
        s.python_gc.ns += r.sum;
        break;
      case ARGUS_STAT_PY_GC_HIST:
        s.python_gc.log2_buckets[r.sub] += r.count;
        break;
      case ARGUS_STAT_BLOCK_IO: {
        auto& b = s.block_io[block_op_label(r.sub)];
        b.count += r.count;
        b.ns += r.sum;
        break;
      }
      case ARGUS_STAT_BLOCK_IO_HIST:
        s.block_io[block_op_label(static_cast<uint32_t>(r.code))].log2_buckets[r.sub] += r.count;
        break;
      case ARGUS_STAT_OFFCPU:
        if (r.sub < s.offcpu.offcpu_ns.size()) s.offcpu.offcpu_ns[r.sub] += r.sum;
        break;
      case ARGUS_STAT_ONCPU:
        s.offcpu.oncpu_ns += r.sum;
        break;
      case ARGUS_STAT_CUDA_MEMCPY:
        add_calls(s.memcpy[copy_direction_label(r.sub)], r);
        break;
      case ARGUS_STAT_CUDA_ERROR:
        s.cuda_errors[{cuda_api_label(r.sub), cuda_result_name(r.code)}] += r.count;
        if (is_device_allocation_api(r.sub)) s.gpu_memory.failures[cuda_result_name(r.code)] += r.count;
        break;
      case ARGUS_STAT_GPU_ALLOC:
        add_calls(s.gpu_memory.allocations[cuda_api_label(r.sub)], r);
        break;
      case ARGUS_STAT_GPU_FREE:
        add_calls(s.gpu_memory.frees[cuda_api_label(r.sub)], r);
        break;
      case ARGUS_STAT_GPU_MAP:
        add_calls(s.gpu_memory.maps[cuda_api_label(r.sub)], r);
        break;
      case ARGUS_STAT_GPU_FREE_UNPAIRED:
        s.gpu_memory.unpaired_frees += r.count;
        break;
      case ARGUS_STAT_C10D_CALLS:
        add_process_group_calls(r, s);
        break;
      case ARGUS_STAT_C10D_WAIT:
        s.process_group_waits.calls += r.count;
        s.process_group_waits.wait_ns += r.sum;
        break;
      case ARGUS_STAT_NCCL_ERROR: {
        s.nccl_errors[{nccl_error_api_label(r.sub), nccl_result_name(r.code)}] += r.count;
        break;
      }
      default:
        break;
    }
  }
}

}  // namespace argus
