// What the BpfLoader's files share: the skeleton, and the helpers more than one
// of them uses. Private to userspace/probes.
#pragma once
#include <cstring>
#include <string>

#include "argus.skel.h"
#include "userspace/attach/attach_plan.h"

namespace argus::bpf_detail {

inline std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

// The BPF program a probe runs.
inline bpf_program* program_for(argus_bpf* skel, ProbeProgram p) {
  switch (p) {
    case ProbeProgram::NcclCollEnter: return skel->progs.argus_nccl_coll_enter;
    case ProbeProgram::NcclInitEnter: return skel->progs.argus_nccl_init_enter;
    case ProbeProgram::NcclInitExit: return skel->progs.argus_nccl_init_exit;
    case ProbeProgram::NcclChildEnter: return skel->progs.argus_nccl_child_enter;
    case ProbeProgram::NcclChildExit: return skel->progs.argus_nccl_child_exit;
    case ProbeProgram::NcclGroupStart: return skel->progs.argus_nccl_group_start;
    case ProbeProgram::NcclGroupEnd: return skel->progs.argus_nccl_group_end;
    case ProbeProgram::NcclGroupExit: return skel->progs.argus_nccl_group_exit;
    case ProbeProgram::CudaSyncEnter: return skel->progs.argus_cuda_sync_enter;
    case ProbeProgram::CudaCount: return skel->progs.argus_cuda_count;
    case ProbeProgram::CudaRet: return skel->progs.argus_cuda_ret;
    case ProbeProgram::CudaMemcpy: return skel->progs.argus_cuda_memcpy;
    case ProbeProgram::CudaLaunchExit: return skel->progs.argus_cuda_launch_exit;
    case ProbeProgram::TimedExit: return skel->progs.argus_timed_exit;
    case ProbeProgram::PyGcEnter: return skel->progs.argus_py_gc_enter;
    case ProbeProgram::PyGcExit: return skel->progs.argus_py_gc_exit;
    case ProbeProgram::PyGcUsdtStart: return skel->progs.argus_py_gc_usdt_start;
    case ProbeProgram::PyGcUsdtDone: return skel->progs.argus_py_gc_usdt_done;
    case ProbeProgram::LinkMapChange: return skel->progs.argus_dl_debug_state;
    case ProbeProgram::C10dBackendInit: return skel->progs.argus_c10d_backend_init;
    case ProbeProgram::C10dGroupText: return skel->progs.argus_c10d_group_text;
    case ProbeProgram::C10dCollEnter: return skel->progs.argus_c10d_coll_enter;
    case ProbeProgram::C10dWaitEnter: return skel->progs.argus_c10d_wait_enter;
    case ProbeProgram::C10dWaitExit: return skel->progs.argus_c10d_wait_exit;
    case ProbeProgram::CudaMemEnter: return skel->progs.argus_cuda_mem_enter;
    case ProbeProgram::CudaMemExit: return skel->progs.argus_cuda_mem_exit;
    case ProbeProgram::PyStackAtOom: return skel->progs.argus_py_stack_at_oom;
  }
  return nullptr;
}

}  // namespace argus::bpf_detail
