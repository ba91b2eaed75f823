// Which probes go where in a library: pure data, decided from the library's own
// symbol table (never from its file name), so it is unit-tested without BPF.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/elf/elf_symbols.h"

namespace argus {

// GpuActivity: a library that only produces GPU activity records (the CUPTI
// injection library); producers are found by kGpuProducerSymbol. Python: a
// libpython, or an executable with the interpreter linked in
// (python::looks_like_python): its GC collector is probed. Loader: the dynamic
// loader (exports _dl_debug_state): one probe there turns every dlopen on the
// node into a discovery hint; it never makes its users ranks. Torch: PyTorch's
// c10d library (libtorch_cpu), found by ProcessGroupGloo's exported methods: its
// process groups are probed.
enum class LibraryKind { None, Nccl, Cuda, GpuActivity, Python, Loader, Torch };
inline constexpr const char* kLoaderHookSymbol = "_dl_debug_state";
inline constexpr const char* kGpuProducerSymbol = "argus_gpu_wire_version";
enum class ProbeSet { Default, Deep };

// The BPF program a probe runs (one per program in bpf/).
enum class ProbeProgram {
  NcclCollEnter,  // argus_nccl_coll_enter
  NcclInitEnter,  // argus_nccl_init_enter
  NcclInitExit,   // argus_nccl_init_exit (uretprobe)
  NcclChildEnter, // argus_nccl_child_enter: ncclCommSplit / ncclCommShrink
  NcclChildExit,  // argus_nccl_child_exit (uretprobe): the child's handle and its number
  NcclGroupStart, // argus_nccl_group_start: the thread's group depth and number
  NcclGroupEnd,   // argus_nccl_group_end: ... and the ended group counted, the outermost timed
  NcclGroupExit,  // argus_nccl_group_exit (uretprobe): the outermost end's time and errors
  CudaSyncEnter,  // argus_cuda_sync_enter
  CudaCount,      // argus_cuda_count (deep): counts a launch, keeps its entry time
  CudaRet,        // argus_cuda_ret (uretprobe)
  TimedExit,      // argus_timed_exit (uretprobe)
  CudaMemcpy,     // argus_cuda_memcpy: calls and bytes per copy direction
  CudaLaunchExit, // argus_cuda_launch_exit (uretprobe, deep): launch time, log2 histogram, errors
  PyGcEnter,      // argus_py_gc_enter: a Python collection begins (reads the GC counters)
  PyGcExit,       // argus_py_gc_exit (uretprobe): ... ends (the generation whose counter moved)
  PyGcUsdtStart,  // argus_py_gc_usdt_start: the same at python:gc__start (USDT)
  PyGcUsdtDone,   // argus_py_gc_usdt_done: ... at python:gc__done (USDT)
  LinkMapChange,  // argus_dl_debug_state: the loader changed a link map (dlopen)
  C10dBackendInit, // argus_c10d_backend_init: a ProcessGroupGloo made (rank, size)
  C10dGroupText,  // argus_c10d_group_text: a process group named or described
  C10dCollEnter,  // argus_c10d_coll_enter: a collective or p2p call on a backend
  C10dWaitEnter,  // argus_c10d_wait_enter: a Work::wait begins (Gloo's works)
  C10dWaitExit,   // argus_c10d_wait_exit (uretprobe): ... its time
  CudaMemEnter,   // argus_cuda_mem_enter: a device memory call's arguments
  CudaMemExit,    // argus_cuda_mem_exit (uretprobe): ... its result: held bytes, pairs, failures, an oom event
  PyStackAtOom,   // argus_py_stack_at_oom (uretprobe): the Python stack where an allocation ran out of memory
};

struct ProbeSpec {
  std::string symbol;  // the name it was resolved by, for logs and errors
  uint64_t file_offset = 0;
  ProbeProgram program = ProbeProgram::NcclCollEnter;
  bool retprobe = false;
  uint64_t cookie = 0;
};

const char* library_kind_name(LibraryKind kind);  // "nccl", "cuda", "gpu", "python", "loader", "torch", "none"
const char* probe_program_name(ProbeProgram p);    // the BPF program's name

// A library is NCCL if it exports the NCCL collective API, CUDA if it exports
// the driver API's launch and init entry points, Python if it is an interpreter,
// Loader if it is a dynamic loader, Torch if it exports c10d's Gloo backend.
LibraryKind classify_library(const elf::SymbolTable& symbols);

// The probes for one library. Weak `ncclX` and strong `pncclX` at one address
// get one probe, so a call is never counted twice.
std::vector<ProbeSpec> plan_probes(const elf::SymbolTable& symbols, LibraryKind kind, ProbeSet set);
// The GC probes of an interpreter whose collector is a symbol (gc_anchor
// "gc_collect_main" or "pygc_collect_call"): entry + return at that offset.
// Empty for the USDT anchor (attached by name) and for "none".
std::vector<ProbeSpec> plan_python_gc(const std::string& gc_anchor, const std::string& gc_symbol,
                                      uint64_t gc_entry_offset);


}  // namespace argus
