#include "userspace/attach/attach_plan.h"

#include <algorithm>
#include <array>
#include <set>

#include "bpf/argus.h"
#include "bpf/argus_result_codes.h"
#include "userspace/python/py_runtime.h"

namespace argus {
namespace {

struct NcclCollective {
  const char* name;  // without the "nccl"/"pnccl" prefix
  uint32_t op;
  uint8_t count_arg, dtype_arg, comm_arg;  // 1-based SysV positions (nccl.h)
  uint8_t peer_arg = 0;                     // ncclSend/ncclRecv: the other rank
};

// Argument positions straight from nccl.h's prototypes (NCCL 2.28.9; the
// 2.28 additions AlltoAll, Gather and Scatter checked against its nccl.h).
constexpr std::array<NcclCollective, 11> kNcclCollectives{{
    {"AllReduce", ARGUS_OP_ALL_REDUCE, 3, 4, 6},          // send, recv, count, dt, op, comm, stream
    {"Broadcast", ARGUS_OP_BROADCAST, 3, 4, 6},           // send, recv, count, dt, root, comm, stream
    {"Bcast", ARGUS_OP_BROADCAST, 2, 3, 5},               // buff, count, dt, root, comm, stream
    {"Reduce", ARGUS_OP_REDUCE, 3, 4, 7},                 // send, recv, count, dt, op, root, comm, stream
    {"AllGather", ARGUS_OP_ALL_GATHER, 3, 4, 5},          // send, recv, sendcount, dt, comm, stream
    {"ReduceScatter", ARGUS_OP_REDUCE_SCATTER, 3, 4, 6},  // send, recv, recvcount, dt, op, comm, stream
    {"AlltoAll", ARGUS_OP_ALL_TO_ALL, 3, 4, 5},           // send, recv, count, dt, comm, stream
    {"Gather", ARGUS_OP_GATHER, 3, 4, 6},                 // send, recv, count, dt, root, comm, stream
    {"Scatter", ARGUS_OP_SCATTER, 3, 4, 6},               // send, recv, count, dt, root, comm, stream
    {"Send", ARGUS_OP_SEND, 2, 3, 5, 4},                  // send, count, dt, peer, comm, stream
    {"Recv", ARGUS_OP_RECV, 2, 3, 5, 4},                  // recv, count, dt, peer, comm, stream
}};

struct NamedId {
  const char* name;
  uint32_t id;
};

constexpr std::array<NamedId, 4> kNcclInit{{
    {"CommInitRank", ARGUS_NCCL_INIT_RANK},
    {"CommInitRankConfig", ARGUS_NCCL_INIT_RANK_CONFIG},
    {"CommInitRankScalable", ARGUS_NCCL_INIT_RANK_SCALABLE},
    {"CommInitAll", ARGUS_NCCL_COMM_INIT_ALL},  // (comms, ndev, devlist)
}};

// Communicators made from a parent: (comm, color, key, newcomm, config) and
// (comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags).
constexpr std::array<NamedId, 2> kNcclChild{{
    {"CommSplit", ARGUS_NCCL_COMM_SPLIT},
    {"CommShrink", ARGUS_NCCL_COMM_SHRINK},
}};

// Synchronize calls: timed entry->return in the default set.
constexpr std::array<NamedId, 5> kCudaSync{{
    {"cuStreamSynchronize", ARGUS_CU_STREAM_SYNCHRONIZE},
    {"cuStreamSynchronize_ptsz", ARGUS_CU_STREAM_SYNCHRONIZE},
    {"cuEventSynchronize", ARGUS_CU_EVENT_SYNCHRONIZE},
    {"cuCtxSynchronize", ARGUS_CU_CTX_SYNCHRONIZE},
    {"cuCtxSynchronize_v2", ARGUS_CU_CTX_SYNCHRONIZE},
}};

// Rare calls whose error codes matter (out of memory, init failures): a
// uretprobe only, in the default set.
constexpr std::array<NamedId, 8> kCudaChecked{{
    {"cuInit", ARGUS_CU_INIT},
    {"cuCtxCreate", ARGUS_CU_CTX_CREATE},
    {"cuCtxCreate_v2", ARGUS_CU_CTX_CREATE},
    {"cuCtxCreate_v3", ARGUS_CU_CTX_CREATE},
    {"cuCtxCreate_v4", ARGUS_CU_CTX_CREATE},
    {"cuMemAllocHost", ARGUS_CU_MEM_ALLOC_HOST},  // pinned host memory: not the GPU's
    {"cuMemAllocHost_v2", ARGUS_CU_MEM_ALLOC_HOST},
    {"cuMemAllocPitch", ARGUS_CU_MEM_ALLOC_PITCH},  // legacy 32-bit (pitch, width, height): errors only
}};

struct CudaMemoryCall {
  const char* name;
  uint32_t api;
  uint8_t shape;  // enum argus_mem_shape: where its size and result are (cuda.h's prototypes)
};

// Device memory (bpf/cuda_mem.bpf.c): rare calls (a caching allocator asks the
// driver only when its pool grows), each read at entry and return so frees
// pair with their allocations. The legacy cuMemGetInfo / cuDeviceTotalMem
// write 32-bit sizes: a total over 4 GiB does not fit, so only _v2 is read.
constexpr std::array<CudaMemoryCall, 18> kCudaMemory{{
    {"cuMemAlloc", ARGUS_CU_MEM_ALLOC, ARGUS_MEM_ALLOC_U32},
    {"cuMemAlloc_v2", ARGUS_CU_MEM_ALLOC, ARGUS_MEM_ALLOC},
    {"cuMemAllocAsync", ARGUS_CU_MEM_ALLOC_ASYNC, ARGUS_MEM_ALLOC},  // (dptr, bytes, stream)
    {"cuMemAllocAsync_ptsz", ARGUS_CU_MEM_ALLOC_ASYNC, ARGUS_MEM_ALLOC},
    {"cuMemAllocFromPoolAsync", ARGUS_CU_MEM_ALLOC_ASYNC, ARGUS_MEM_ALLOC},  // (dptr, bytes, pool, stream)
    {"cuMemAllocFromPoolAsync_ptsz", ARGUS_CU_MEM_ALLOC_ASYNC, ARGUS_MEM_ALLOC},
    {"cuMemAllocManaged", ARGUS_CU_MEM_ALLOC_MANAGED, ARGUS_MEM_ALLOC},  // (dptr, bytes, flags)
    {"cuMemAllocPitch_v2", ARGUS_CU_MEM_ALLOC_PITCH, ARGUS_MEM_ALLOC_PITCH},
    {"cuMemCreate", ARGUS_CU_MEM_CREATE, ARGUS_MEM_CREATE},  // (handle, bytes, prop, flags)
    {"cuMemFree", ARGUS_CU_MEM_FREE, ARGUS_MEM_FREE_U32},
    {"cuMemFree_v2", ARGUS_CU_MEM_FREE, ARGUS_MEM_FREE},
    {"cuMemFreeAsync", ARGUS_CU_MEM_FREE_ASYNC, ARGUS_MEM_FREE},  // (dptr, stream)
    {"cuMemFreeAsync_ptsz", ARGUS_CU_MEM_FREE_ASYNC, ARGUS_MEM_FREE},
    {"cuMemRelease", ARGUS_CU_MEM_RELEASE, ARGUS_MEM_RELEASE},
    {"cuMemMap", ARGUS_CU_MEM_MAP, ARGUS_MEM_MAP},  // (ptr, bytes, offset, handle, flags)
    {"cuMemUnmap", ARGUS_CU_MEM_UNMAP, ARGUS_MEM_MAP},  // (ptr, bytes)
    {"cuMemGetInfo_v2", ARGUS_CU_MEM_GET_INFO, ARGUS_MEM_INFO},
    {"cuDeviceTotalMem_v2", ARGUS_CU_DEVICE_TOTAL_MEM, ARGUS_MEM_TOTAL},
}};

constexpr bool is_allocation(uint8_t shape) {
  return shape == ARGUS_MEM_ALLOC || shape == ARGUS_MEM_ALLOC_U32 || shape == ARGUS_MEM_ALLOC_PITCH ||
         shape == ARGUS_MEM_CREATE;
}

struct CudaCopy {
  const char* name;
  uint32_t api;
  uint8_t dir;        // enum argus_gpu_copy_dir
  uint8_t bytes_arg;  // 1-based SysV position of ByteCount (cuda.h)
  bool u32;           // the unversioned legacy ABI: ByteCount is an unsigned int
};

// Host-API copies with a known direction: a few per step, so in the default set
// (entry: calls and bytes; return: error codes). Per-thread-stream variants
// (_ptds, _ptsz) share the id of their base API.
constexpr std::array<CudaCopy, 18> kCudaCopies{{
    {"cuMemcpyHtoD", ARGUS_CU_MEMCPY_HTOD, ARGUS_GPU_COPY_HTOD, 3, true},   // (dst, src, n)
    {"cuMemcpyHtoD_v2", ARGUS_CU_MEMCPY_HTOD, ARGUS_GPU_COPY_HTOD, 3, false},
    {"cuMemcpyHtoD_v2_ptds", ARGUS_CU_MEMCPY_HTOD, ARGUS_GPU_COPY_HTOD, 3, false},
    {"cuMemcpyDtoH", ARGUS_CU_MEMCPY_DTOH, ARGUS_GPU_COPY_DTOH, 3, true},   // (dstHost, src, n)
    {"cuMemcpyDtoH_v2", ARGUS_CU_MEMCPY_DTOH, ARGUS_GPU_COPY_DTOH, 3, false},
    {"cuMemcpyDtoH_v2_ptds", ARGUS_CU_MEMCPY_DTOH, ARGUS_GPU_COPY_DTOH, 3, false},
    {"cuMemcpyDtoD", ARGUS_CU_MEMCPY_DTOD, ARGUS_GPU_COPY_DTOD, 3, true},   // (dst, src, n)
    {"cuMemcpyDtoD_v2", ARGUS_CU_MEMCPY_DTOD, ARGUS_GPU_COPY_DTOD, 3, false},
    {"cuMemcpyDtoD_v2_ptds", ARGUS_CU_MEMCPY_DTOD, ARGUS_GPU_COPY_DTOD, 3, false},
    // (dst, src, n, stream)
    {"cuMemcpyHtoDAsync", ARGUS_CU_MEMCPY_HTOD_ASYNC, ARGUS_GPU_COPY_HTOD, 3, true},
    {"cuMemcpyHtoDAsync_v2", ARGUS_CU_MEMCPY_HTOD_ASYNC, ARGUS_GPU_COPY_HTOD, 3, false},
    {"cuMemcpyHtoDAsync_v2_ptsz", ARGUS_CU_MEMCPY_HTOD_ASYNC, ARGUS_GPU_COPY_HTOD, 3, false},
    {"cuMemcpyDtoHAsync", ARGUS_CU_MEMCPY_DTOH_ASYNC, ARGUS_GPU_COPY_DTOH, 3, true},
    {"cuMemcpyDtoHAsync_v2", ARGUS_CU_MEMCPY_DTOH_ASYNC, ARGUS_GPU_COPY_DTOH, 3, false},
    {"cuMemcpyDtoHAsync_v2_ptsz", ARGUS_CU_MEMCPY_DTOH_ASYNC, ARGUS_GPU_COPY_DTOH, 3, false},
    {"cuMemcpyDtoDAsync", ARGUS_CU_MEMCPY_DTOD_ASYNC, ARGUS_GPU_COPY_DTOD, 3, true},
    {"cuMemcpyDtoDAsync_v2", ARGUS_CU_MEMCPY_DTOD_ASYNC, ARGUS_GPU_COPY_DTOD, 3, false},
    {"cuMemcpyDtoDAsync_v2_ptsz", ARGUS_CU_MEMCPY_DTOD_ASYNC, ARGUS_GPU_COPY_DTOD, 3, false},
}};

// Kernel launches: thousands a second in a launch-bound rank, so only under
// --probes deep (a trap costs ~19 us on this VM against a 2.4 ns call).
constexpr std::array<NamedId, 6> kCudaLaunch{{
    {"cuLaunchKernel", ARGUS_CU_LAUNCH_KERNEL},
    {"cuLaunchKernel_ptsz", ARGUS_CU_LAUNCH_KERNEL},
    {"cuLaunchKernelEx", ARGUS_CU_LAUNCH_KERNEL_EX},
    {"cuLaunchKernelEx_ptsz", ARGUS_CU_LAUNCH_KERNEL_EX},
    {"cuLaunchCooperativeKernel", ARGUS_CU_LAUNCH_COOPERATIVE_KERNEL},
    {"cuLaunchCooperativeKernel_ptsz", ARGUS_CU_LAUNCH_COOPERATIVE_KERNEL},
}};

// c10d's backends, Gloo (libtorch_cpu) and NCCL (libtorch_cuda), by the
// mangled name's prefix: namespace, class and method, so that a signature
// changed between PyTorch versions still matches (each overload found is
// probed). Both backends override the same methods. They return
// c10::intrusive_ptr<Work> by value: the return slot is argument 1, `this` 2,
// and send/recv's (tensors, peer, tag) follow as 3, 4, 5. Methods one of
// these calls internally (NCCL's _broadcast_oop, under an uneven allgather)
// are left out: one user call is one count.
struct C10dMethod {
  const char* name;
  uint32_t op;
  uint8_t peer_arg = 0;
};
struct C10dBackend {
  const char* prefix;  // "_ZN4c10d16ProcessGroupGloo"
  uint32_t kind;       // enum argus_c10d_backend_kind
};
constexpr std::array<C10dBackend, 2> kC10dBackends{{
    {"_ZN4c10d16ProcessGroupGloo", ARGUS_C10D_GLOO},
    {"_ZN4c10d16ProcessGroupNCCL", ARGUS_C10D_NCCL},
}};
constexpr uint8_t kC10dThisArg = 2;
constexpr std::array<C10dMethod, 19> kC10dMethods{{
    {"allreduce", ARGUS_OP_ALL_REDUCE},
    {"allreduce_coalesced", ARGUS_OP_ALL_REDUCE},
    {"allreduce_sparse", ARGUS_OP_ALL_REDUCE},
    {"allgather", ARGUS_OP_ALL_GATHER},
    {"allgather_coalesced", ARGUS_OP_ALL_GATHER},
    {"all_gather_single", ARGUS_OP_ALL_GATHER},  // _allgather_base
    {"all_gather_single_coalesced", ARGUS_OP_ALL_GATHER},
    {"reduce_scatter", ARGUS_OP_REDUCE_SCATTER},
    {"reduce_scatter_single", ARGUS_OP_REDUCE_SCATTER},  // _reduce_scatter_base
    {"reduce_scatter_single_coalesced", ARGUS_OP_REDUCE_SCATTER},
    {"alltoall", ARGUS_OP_ALL_TO_ALL},
    {"all_to_all_single", ARGUS_OP_ALL_TO_ALL},  // alltoall_base
    {"broadcast", ARGUS_OP_BROADCAST},
    {"reduce", ARGUS_OP_REDUCE},
    {"gather", ARGUS_OP_GATHER},
    {"scatter", ARGUS_OP_SCATTER},
    {"barrier", ARGUS_C10D_OP_BARRIER},
    {"send", ARGUS_OP_SEND, 4},
    {"recv", ARGUS_OP_RECV, 4},
}};
// The waits on a Gloo backend's work objects: c10d::Work::wait (Gloo's
// collectives' AsyncWork keeps the base's) and the send and receive works'
// own. ProcessGroupNCCL's WorkNCCL::wait blocks the stream, not the host (by
// default): its host waits are the CUDA synchronize calls, probed as such.
constexpr std::array<const char*, 3> kGlooWaits{{
    "_ZN4c10d4Work4waitE",
    "_ZN4c10d16ProcessGroupGloo8SendWork4waitE",
    "_ZN4c10d16ProcessGroupGloo8RecvWork4waitE",
}};
// Names the process groups: ProcessGroup::setGroupName / setGroupDesc(const std::string&).
constexpr std::array<NamedId, 2> kC10dGroupText{{
    {"_ZN4c10d12ProcessGroup12setGroupNameE", ARGUS_C10D_GROUP_NAME},
    {"_ZN4c10d12ProcessGroup12setGroupDescE", ARGUS_C10D_GROUP_DESC},
}};

constexpr uint32_t kClsNccl = 1;  // ARGUS_CLS_NCCL in helpers.bpf.h
constexpr uint32_t kClsCuda = 2;  // ARGUS_CLS_CUDA

// A function symbol usable for a uprobe: defined, code, not an ifunc resolver.
const elf::Symbol* probeable(const elf::SymbolTable& symbols, std::string_view name) {
  const elf::Symbol* s = symbols.find(name);
  if (s == nullptr || !s->is_function || s->ifunc || !s->mapped) return nullptr;
  return s;
}

// The NCCL entry point: the public weak name first, else the strong pnccl one.
const elf::Symbol* nccl_symbol(const elf::SymbolTable& symbols, const std::string& base) {
  if (const auto* s = probeable(symbols, "nccl" + base)) return s;
  return probeable(symbols, "pnccl" + base);
}

// Every probeable function whose mangled name starts with `prefix` (the table
// is sorted by name).
std::vector<const elf::Symbol*> probeable_with_prefix(const elf::SymbolTable& symbols, std::string_view prefix) {
  std::vector<const elf::Symbol*> out;
  const auto& all = symbols.symbols();
  auto it = std::lower_bound(all.begin(), all.end(), prefix,
                             [](const elf::Symbol& s, std::string_view p) { return s.name < p; });
  for (; it != all.end() && std::string_view(it->name).substr(0, prefix.size()) == prefix; ++it)
    if (it->is_function && !it->ifunc && it->mapped && it->dynamic) out.push_back(&*it);
  return out;
}

// "_ZN4c10d16ProcessGroupGloo" "9allreduce" "E": a method's mangled prefix.
std::string c10d_method_prefix(const C10dBackend& backend, std::string_view method) {
  return std::string(backend.prefix) + std::to_string(method.size()) + std::string(method) + "E";
}

bool has_c10d_backend(const elf::SymbolTable& symbols, const C10dBackend& backend) {
  return std::any_of(kC10dMethods.begin(), kC10dMethods.end(), [&](const C10dMethod& m) {
    return !probeable_with_prefix(symbols, c10d_method_prefix(backend, m.name)).empty();
  });
}

class Planner {
 public:
  void add(const elf::Symbol& sym, ProbeProgram program, bool retprobe, uint64_t cookie) {
    // One probe per (address, program): aliases share an address.
    if (!seen_.insert({sym.file_offset, static_cast<int>(program)}).second) return;
    specs_.push_back({sym.name, sym.file_offset, program, retprobe, cookie});
  }
  std::vector<ProbeSpec> take() { return std::move(specs_); }

 private:
  std::set<std::pair<uint64_t, int>> seen_;
  std::vector<ProbeSpec> specs_;
};

void plan_nccl(const elf::SymbolTable& symbols, Planner& plan) {
  for (const auto& c : kNcclCollectives) {
    const auto* sym = nccl_symbol(symbols, c.name);
    if (sym == nullptr) continue;
    plan.add(*sym, ProbeProgram::NcclCollEnter, false,
             ARGUS_COOKIE_P2P(c.op, c.count_arg, c.dtype_arg, c.comm_arg, c.peer_arg));
    plan.add(*sym, ProbeProgram::TimedExit, true, ARGUS_COOKIE(kClsNccl, 0, 0, 0, ARGUS_STAT_NCCL_ERROR));
  }
  for (const auto& init : kNcclInit) {
    const auto* sym = nccl_symbol(symbols, init.name);
    if (sym == nullptr) continue;
    plan.add(*sym, ProbeProgram::NcclInitEnter, false, ARGUS_COOKIE(init.id, 0, 0, 0, 0));
    plan.add(*sym, ProbeProgram::NcclInitExit, true, ARGUS_COOKIE(init.id, 0, 0, 0, 0));
  }
  for (const auto& child : kNcclChild) {
    const auto* sym = nccl_symbol(symbols, child.name);
    if (sym == nullptr) continue;
    plan.add(*sym, ProbeProgram::NcclChildEnter, false, ARGUS_COOKIE(child.id, 0, 0, 0, 0));
    plan.add(*sym, ProbeProgram::NcclChildExit, true, ARGUS_COOKIE(child.id, 0, 0, 0, 0));
  }
  // Group boundaries (no event: a map update each), for knowing which
  // operations NCCL launched together (a pipeline stage's sends and receives),
  // and ncclGroupEnd's return: the outermost end is where a grouped exchange
  // holds the host (a first connection, a blocking backend), timed as a call.
  const auto* start = nccl_symbol(symbols, "GroupStart");
  const auto* end = nccl_symbol(symbols, "GroupEnd");
  if (start && end) {
    plan.add(*start, ProbeProgram::NcclGroupStart, false, 0);
    plan.add(*end, ProbeProgram::NcclGroupEnd, false, 0);
    plan.add(*end, ProbeProgram::NcclGroupExit, true, 0);
  }
}

// A backend's constructor and methods, where its library defines them. The
// cookie's flags say whose method a call was: NCCL's are joined with the NCCL
// calls they make.
void plan_c10d_backend(const elf::SymbolTable& symbols, const C10dBackend& backend, Planner& plan) {
  // Constructors C1 (complete) and C2 (base) share an address: one probe.
  for (const char* ctor : {"C1E", "C2E"})
    for (const auto* sym : probeable_with_prefix(symbols, std::string(backend.prefix) + ctor))
      plan.add(*sym, ProbeProgram::C10dBackendInit, false, ARGUS_COOKIE(backend.kind, 0, 0, 0, 0));
  for (const auto& m : kC10dMethods)
    for (const auto* sym : probeable_with_prefix(symbols, c10d_method_prefix(backend, m.name)))
      plan.add(*sym, ProbeProgram::C10dCollEnter, false,
               ARGUS_COOKIE_P2P(m.op, 0, 0, kC10dThisArg, m.peer_arg) | ARGUS_COOKIE(0, 0, 0, 0, backend.kind));
}

// Nothing when no backend's collective method is found (a build without
// Gloo, or names this agent does not know): the caller says so and counts it.
// libtorch_cpu holds Gloo and the group naming; libtorch_cuda holds NCCL's.
void plan_c10d(const elf::SymbolTable& symbols, Planner& plan) {
  bool any = false;
  for (const auto& b : kC10dBackends) any = has_c10d_backend(symbols, b) || any;
  if (!any) return;
  for (const auto& t : kC10dGroupText)
    for (const auto* sym : probeable_with_prefix(symbols, t.name))
      plan.add(*sym, ProbeProgram::C10dGroupText, false, ARGUS_COOKIE(t.id, 0, 0, 0, 0));
  for (const auto& b : kC10dBackends)
    if (has_c10d_backend(symbols, b)) plan_c10d_backend(symbols, b, plan);
  if (!has_c10d_backend(symbols, kC10dBackends[0])) return;  // the waits timed are Gloo's
  for (const char* wait : kGlooWaits)
    for (const auto* sym : probeable_with_prefix(symbols, wait)) {
      plan.add(*sym, ProbeProgram::C10dWaitEnter, false, 0);
      plan.add(*sym, ProbeProgram::C10dWaitExit, true, 0);
    }
}

void plan_cuda(const elf::SymbolTable& symbols, ProbeSet set, Planner& plan) {
  for (const auto& s : kCudaSync) {
    const auto* sym = probeable(symbols, s.name);
    if (sym == nullptr) continue;
    plan.add(*sym, ProbeProgram::CudaSyncEnter, false, ARGUS_COOKIE(s.id, 0, 0, 0, 0));
    plan.add(*sym, ProbeProgram::TimedExit, true, ARGUS_COOKIE(kClsCuda, 0, 0, 0, ARGUS_STAT_CUDA_ERROR));
  }
  for (const auto& s : kCudaChecked) {
    if (const auto* sym = probeable(symbols, s.name))
      plan.add(*sym, ProbeProgram::CudaRet, true, ARGUS_COOKIE(s.id, 0, 0, 0, 0));
  }
  for (const auto& m : kCudaMemory) {
    const auto* sym = probeable(symbols, m.name);
    if (sym == nullptr) continue;
    plan.add(*sym, ProbeProgram::CudaMemEnter, false, ARGUS_COOKIE(m.api, 0, 0, 0, m.shape));
    plan.add(*sym, ProbeProgram::CudaMemExit, true, 0);
    if (is_allocation(m.shape)) plan.add(*sym, ProbeProgram::PyStackAtOom, true, 0);
  }
  for (const auto& c : kCudaCopies) {
    const auto* sym = probeable(symbols, c.name);
    if (sym == nullptr) continue;
    const uint32_t flags = c.dir | (c.u32 ? ARGUS_COOKIE_COPY_U32 : 0u);
    plan.add(*sym, ProbeProgram::CudaMemcpy, false, ARGUS_COOKIE(c.api, c.bytes_arg, 0, 0, flags));
    plan.add(*sym, ProbeProgram::CudaRet, true, ARGUS_COOKIE(c.api, 0, 0, 0, 0));
  }
  if (set != ProbeSet::Deep) return;
  // Entry: count + start time; return: time inside the launch and its error code.
  for (const auto& s : kCudaLaunch) {
    const auto* sym = probeable(symbols, s.name);
    if (sym == nullptr) continue;
    plan.add(*sym, ProbeProgram::CudaCount, false, ARGUS_COOKIE(s.id, 0, 0, 0, 0));
    plan.add(*sym, ProbeProgram::CudaLaunchExit, true, ARGUS_COOKIE(s.id, 0, 0, 0, 0));
  }
}

}  // namespace

const char* library_kind_name(LibraryKind kind) {
  switch (kind) {
    case LibraryKind::Nccl: return "nccl";
    case LibraryKind::Cuda: return "cuda";
    case LibraryKind::GpuActivity: return "gpu";
    case LibraryKind::Python: return "python";
    case LibraryKind::Loader: return "loader";
    case LibraryKind::Torch: return "torch";
    case LibraryKind::None: break;
  }
  return "none";
}

const char* probe_program_name(ProbeProgram p) {
  switch (p) {
    case ProbeProgram::NcclCollEnter: return "argus_nccl_coll_enter";
    case ProbeProgram::NcclInitEnter: return "argus_nccl_init_enter";
    case ProbeProgram::NcclInitExit: return "argus_nccl_init_exit";
    case ProbeProgram::NcclChildEnter: return "argus_nccl_child_enter";
    case ProbeProgram::NcclChildExit: return "argus_nccl_child_exit";
    case ProbeProgram::NcclGroupStart: return "argus_nccl_group_start";
    case ProbeProgram::NcclGroupEnd: return "argus_nccl_group_end";
    case ProbeProgram::NcclGroupExit: return "argus_nccl_group_exit";
    case ProbeProgram::CudaSyncEnter: return "argus_cuda_sync_enter";
    case ProbeProgram::CudaCount: return "argus_cuda_count";
    case ProbeProgram::CudaRet: return "argus_cuda_ret";
    case ProbeProgram::TimedExit: return "argus_timed_exit";
    case ProbeProgram::CudaMemcpy: return "argus_cuda_memcpy";
    case ProbeProgram::CudaLaunchExit: return "argus_cuda_launch_exit";
    case ProbeProgram::PyGcEnter: return "argus_py_gc_enter";
    case ProbeProgram::PyGcExit: return "argus_py_gc_exit";
    case ProbeProgram::PyGcUsdtStart: return "argus_py_gc_usdt_start";
    case ProbeProgram::PyGcUsdtDone: return "argus_py_gc_usdt_done";
    case ProbeProgram::LinkMapChange: return "argus_dl_debug_state";
    case ProbeProgram::C10dBackendInit: return "argus_c10d_backend_init";
    case ProbeProgram::C10dGroupText: return "argus_c10d_group_text";
    case ProbeProgram::C10dCollEnter: return "argus_c10d_coll_enter";
    case ProbeProgram::C10dWaitEnter: return "argus_c10d_wait_enter";
    case ProbeProgram::C10dWaitExit: return "argus_c10d_wait_exit";
    case ProbeProgram::CudaMemEnter: return "argus_cuda_mem_enter";
    case ProbeProgram::CudaMemExit: return "argus_cuda_mem_exit";
    case ProbeProgram::PyStackAtOom: return "argus_py_stack_at_oom";
  }
  return "unknown";
}

LibraryKind classify_library(const elf::SymbolTable& symbols) {
  const bool nccl = nccl_symbol(symbols, "AllReduce") != nullptr && nccl_symbol(symbols, "CommInitRank") != nullptr;
  if (nccl) return LibraryKind::Nccl;
  const bool cuda = probeable(symbols, "cuInit") != nullptr && probeable(symbols, "cuLaunchKernel") != nullptr;
  if (cuda) return LibraryKind::Cuda;
  if (python::looks_like_python(symbols)) return LibraryKind::Python;
  // c10d is there when its ProcessGroup is (libtorch_cpu), or one of its
  // backends (libtorch_cuda holds NCCL's); a library may hold neither backend
  // (planned apart).
  if (!probeable_with_prefix(symbols, kC10dGroupText[0].name).empty() ||
      std::any_of(kC10dBackends.begin(), kC10dBackends.end(),
                  [&](const C10dBackend& b) { return has_c10d_backend(symbols, b); }))
    return LibraryKind::Torch;
  if (probeable(symbols, kLoaderHookSymbol) != nullptr) return LibraryKind::Loader;
  return LibraryKind::None;
}

std::vector<ProbeSpec> plan_probes(const elf::SymbolTable& symbols, LibraryKind kind, ProbeSet set) {
  Planner plan;
  if (kind == LibraryKind::Nccl) plan_nccl(symbols, plan);
  if (kind == LibraryKind::Cuda) plan_cuda(symbols, set, plan);
  if (kind == LibraryKind::Torch) plan_c10d(symbols, plan);
  if (kind == LibraryKind::Loader)
    if (const auto* s = probeable(symbols, kLoaderHookSymbol)) plan.add(*s, ProbeProgram::LinkMapChange, false, 0);
  return plan.take();
}

std::vector<ProbeSpec> plan_python_gc(const std::string& gc_anchor, const std::string& gc_symbol,
                                      uint64_t gc_entry_offset) {
  if (gc_anchor != "gc_collect_main" && gc_anchor != "pygc_collect_call") return {};
  if (gc_entry_offset == 0) return {};
  return {{gc_symbol, gc_entry_offset, ProbeProgram::PyGcEnter, false, 0},
          {gc_symbol, gc_entry_offset, ProbeProgram::PyGcExit, true, 0}};
}

}  // namespace argus
