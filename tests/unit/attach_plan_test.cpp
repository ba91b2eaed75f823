// The probe plan, decided from real symbol tables: which functions are probed,
// once per address, with the argument positions nccl.h gives.
#include "userspace/attach/attach_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "bpf/argus.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

const std::string kRealNccl = std::string(ARGUS_CUDA_ROOT) + "/lib/libnccl.so.2";
const std::string kCudaStub = std::string(ARGUS_CUDA_ROOT) + "/lib64/stubs/libcuda.so";
const std::string kShimNccl = std::string(ARGUS_BUILD_DIR) + "/lib/libnccl.so.2";
const std::string kShimCuda = std::string(ARGUS_BUILD_DIR) + "/lib/libcuda.so.1";

elf::SymbolTable load(const std::string& path) {
  auto t = elf::read_symbols(path);
  EXPECT_TRUE(t.ok()) << t.error();
  return t.ok() ? *t : elf::SymbolTable{};
}

const ProbeSpec* find_spec(const std::vector<ProbeSpec>& plan, const std::string& sym, ProbeProgram prog) {
  for (const auto& s : plan)
    if (s.symbol == sym && s.program == prog) return &s;
  return nullptr;
}

void expect_nccl_plan(const std::string& path) {
  auto t = load(path);
  ASSERT_EQ(classify_library(t), LibraryKind::Nccl);
  auto plan = plan_probes(t, LibraryKind::Nccl, ProbeSet::Default);

  // Weak ncclX and strong pncclX share an address: exactly one probe per
  // (address, program), so no call is counted twice.
  std::set<std::pair<uint64_t, ProbeProgram>> seen;
  for (const auto& s : plan) EXPECT_TRUE(seen.insert({s.file_offset, s.program}).second) << s.symbol;

  // 11 collective/p2p entry points x (entry + return); the inits and the
  // children (split, shrink) the library exports x 2; ncclGroupStart, entry
  // only, and ncclGroupEnd, entry and return.
  size_t made = 0;
  for (const char* f : {"CommInitRank", "CommInitRankConfig", "CommInitRankScalable", "CommInitAll", "CommSplit",
                        "CommShrink"})
    made += t.find(std::string("nccl") + f) != nullptr || t.find(std::string("pnccl") + f) != nullptr;
  EXPECT_EQ(plan.size(), 11u * 2 + made * 2 + 3);
  const auto* gs = find_spec(plan, "ncclGroupStart", ProbeProgram::NcclGroupStart);
  const auto* ge = find_spec(plan, "ncclGroupEnd", ProbeProgram::NcclGroupEnd);
  ASSERT_NE(gs, nullptr);
  ASSERT_NE(ge, nullptr);
  EXPECT_FALSE(gs->retprobe);
  EXPECT_FALSE(ge->retprobe);
  EXPECT_EQ(ge->file_offset, t.find("pncclGroupEnd")->file_offset);
  const auto* gx = find_spec(plan, "ncclGroupEnd", ProbeProgram::NcclGroupExit);
  ASSERT_NE(gx, nullptr);
  EXPECT_TRUE(gx->retprobe);
  EXPECT_EQ(gx->file_offset, ge->file_offset);

  const auto* reduce = find_spec(plan, "ncclReduce", ProbeProgram::NcclCollEnter);
  ASSERT_NE(reduce, nullptr);
  EXPECT_EQ(ARGUS_COOKIE_ID(reduce->cookie), static_cast<uint32_t>(ARGUS_OP_REDUCE));
  EXPECT_EQ(ARGUS_COOKIE_COUNT_ARG(reduce->cookie), 3u);
  EXPECT_EQ(ARGUS_COOKIE_COMM_ARG(reduce->cookie), 7u);  // on the stack
  const auto* send = find_spec(plan, "ncclSend", ProbeProgram::NcclCollEnter);
  ASSERT_NE(send, nullptr);
  EXPECT_EQ(ARGUS_COOKIE_COUNT_ARG(send->cookie), 2u);
  EXPECT_EQ(ARGUS_COOKIE_DTYPE_ARG(send->cookie), 3u);
  EXPECT_EQ(ARGUS_COOKIE_COMM_ARG(send->cookie), 5u);
  EXPECT_EQ(ARGUS_COOKIE_PEER_ARG(send->cookie), 4u);  // (sendbuff, count, datatype, peer, comm, stream)
  const auto* recv = find_spec(plan, "ncclRecv", ProbeProgram::NcclCollEnter);
  ASSERT_NE(recv, nullptr);
  EXPECT_EQ(ARGUS_COOKIE_PEER_ARG(recv->cookie), 4u);
  EXPECT_EQ(ARGUS_COOKIE_ID(recv->cookie), static_cast<uint32_t>(ARGUS_OP_RECV));
  // Collectives carry no peer.
  EXPECT_EQ(ARGUS_COOKIE_PEER_ARG(find_spec(plan, "ncclAllReduce", ProbeProgram::NcclCollEnter)->cookie), 0u);
  // The probe goes where the symbol table says ncclAllReduce lives.
  const auto* ar = find_spec(plan, "ncclAllReduce", ProbeProgram::NcclCollEnter);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->file_offset, t.find("pncclAllReduce")->file_offset);
  EXPECT_TRUE(find_spec(plan, "ncclAllReduce", ProbeProgram::TimedExit)->retprobe);
  EXPECT_NE(find_spec(plan, "ncclCommInitRankScalable", ProbeProgram::NcclInitExit), nullptr);
  // ncclBcast and ncclBroadcast are both "broadcast".
  EXPECT_EQ(ARGUS_COOKIE_ID(find_spec(plan, "ncclBcast", ProbeProgram::NcclCollEnter)->cookie),
            static_cast<uint32_t>(ARGUS_OP_BROADCAST));
}

TEST(AttachPlan, RealNcclSymbolTable) {
  if (!std::filesystem::exists(kRealNccl)) GTEST_SKIP() << kRealNccl << " not installed";
  expect_nccl_plan(kRealNccl);
}

// NCCL 2.28's nccl.h: the 2.28 collectives, the children and InitAll, with
// the argument positions of its prototypes.
TEST(AttachPlan, RealNccl228CollectivesChildrenAndInitAll) {
  if (!std::filesystem::exists(kRealNccl)) GTEST_SKIP() << kRealNccl << " not installed";
  const auto t = load(kRealNccl);
  const auto plan = plan_probes(t, LibraryKind::Nccl, ProbeSet::Default);
  EXPECT_EQ(plan.size(), 11u * 2 + 6u * 2 + 3);  // 2.28.9 exports every one of them; ncclGroupEnd: entry and return
  struct Coll {
    const char* sym;
    uint32_t op, count, dtype, comm;
  };
  // (send, recv, count, datatype, comm, stream); Gather/Scatter: (..., datatype, root, comm, stream)
  for (const Coll& c : {Coll{"ncclAlltoAll", ARGUS_OP_ALL_TO_ALL, 3, 4, 5}, Coll{"ncclGather", ARGUS_OP_GATHER, 3, 4, 6},
                        Coll{"ncclScatter", ARGUS_OP_SCATTER, 3, 4, 6}}) {
    const auto* s = find_spec(plan, c.sym, ProbeProgram::NcclCollEnter);
    ASSERT_NE(s, nullptr) << c.sym;
    EXPECT_EQ(ARGUS_COOKIE_ID(s->cookie), c.op) << c.sym;
    EXPECT_EQ(ARGUS_COOKIE_COUNT_ARG(s->cookie), c.count) << c.sym;
    EXPECT_EQ(ARGUS_COOKIE_DTYPE_ARG(s->cookie), c.dtype) << c.sym;
    EXPECT_EQ(ARGUS_COOKIE_COMM_ARG(s->cookie), c.comm) << c.sym;
    EXPECT_NE(find_spec(plan, c.sym, ProbeProgram::TimedExit), nullptr) << c.sym;
  }
  EXPECT_STREQ(nccl_op_label(ARGUS_OP_GATHER), "gather");
  EXPECT_STREQ(nccl_op_label(ARGUS_OP_SCATTER), "scatter");
  for (auto [sym, api] : {std::pair{"ncclCommSplit", ARGUS_NCCL_COMM_SPLIT}, {"ncclCommShrink", ARGUS_NCCL_COMM_SHRINK}}) {
    const auto* enter = find_spec(plan, sym, ProbeProgram::NcclChildEnter);
    const auto* exit = find_spec(plan, sym, ProbeProgram::NcclChildExit);
    ASSERT_NE(enter, nullptr) << sym;
    ASSERT_NE(exit, nullptr) << sym;
    EXPECT_TRUE(exit->retprobe);
    EXPECT_EQ(ARGUS_COOKIE_ID(enter->cookie), static_cast<uint32_t>(api));
    EXPECT_EQ(ARGUS_COOKIE_ID(exit->cookie), static_cast<uint32_t>(api));
    EXPECT_EQ(enter->file_offset, t.find(std::string("p") + sym)->file_offset);
    EXPECT_STREQ(nccl_init_api_label(api), sym);
  }
  const auto* all = find_spec(plan, "ncclCommInitAll", ProbeProgram::NcclInitEnter);
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(ARGUS_COOKIE_ID(all->cookie), static_cast<uint32_t>(ARGUS_NCCL_COMM_INIT_ALL));
  EXPECT_NE(find_spec(plan, "ncclCommInitAll", ProbeProgram::NcclInitExit), nullptr);
  EXPECT_STREQ(probe_program_name(ProbeProgram::NcclChildExit), "argus_nccl_child_exit");
  EXPECT_STREQ(probe_program_name(ProbeProgram::NcclGroupStart), "argus_nccl_group_start");
}

TEST(AttachPlan, SimShimNcclMatchesTheRealLayout) {
  if (!std::filesystem::exists(kShimNccl)) GTEST_SKIP() << "shim not built";
  expect_nccl_plan(kShimNccl);
}

TEST(AttachPlan, CudaStubDefaultAndDeep) {
  if (!std::filesystem::exists(kCudaStub)) GTEST_SKIP() << kCudaStub << " not installed";
  auto t = load(kCudaStub);
  ASSERT_EQ(classify_library(t), LibraryKind::Cuda);
  auto def = plan_probes(t, LibraryKind::Cuda, ProbeSet::Default);
  auto deep = plan_probes(t, LibraryKind::Cuda, ProbeSet::Deep);
  // The default set never traps on a launch: no launch program, no cuLaunch* symbol.
  for (const auto& s : def) {
    EXPECT_NE(s.program, ProbeProgram::CudaCount) << s.symbol;
    EXPECT_NE(s.program, ProbeProgram::CudaLaunchExit) << s.symbol;
    EXPECT_EQ(s.symbol.find("cuLaunch"), std::string::npos) << s.symbol;
  }
  // Synchronize: entry + return on both cuStreamSynchronize and its _ptsz twin.
  EXPECT_NE(find_spec(def, "cuStreamSynchronize", ProbeProgram::CudaSyncEnter), nullptr);
  EXPECT_NE(find_spec(def, "cuStreamSynchronize_ptsz", ProbeProgram::CudaSyncEnter), nullptr);
  EXPECT_NE(find_spec(def, "cuMemAlloc_v2", ProbeProgram::CudaMemExit), nullptr);
  EXPECT_NE(find_spec(def, "cuMemAlloc", ProbeProgram::CudaMemExit), nullptr);
  // Deep adds every launch variant: entry (count, start time) and a timed return
  // (time inside the launch, log2 histogram, error code), nothing else.
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
                           "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"}) {
    const auto* entry = find_spec(deep, name, ProbeProgram::CudaCount);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_FALSE(entry->retprobe);
    const auto* exit = find_spec(deep, name, ProbeProgram::CudaLaunchExit);
    ASSERT_NE(exit, nullptr) << name;
    EXPECT_TRUE(exit->retprobe);
    EXPECT_EQ(ARGUS_COOKIE_ID(exit->cookie), ARGUS_COOKIE_ID(entry->cookie)) << name;
    EXPECT_EQ(find_spec(deep, name, ProbeProgram::CudaRet), nullptr) << name;  // the timed return counts errors
  }
  EXPECT_EQ(deep.size(), def.size() + 6u * 2);
}

// Device memory: every allocation, free, map and total call the stub exports
// gets its entry (api and shape in the cookie) and return; allocations also
// the Python stack at an out-of-memory return. Host (pinned) allocations and
// the legacy 32-bit pitch keep the error-code return only.
TEST(AttachPlan, CudaStubDeviceMemoryCalls) {
  if (!std::filesystem::exists(kCudaStub)) GTEST_SKIP() << kCudaStub << " not installed";
  auto t = load(kCudaStub);
  auto def = plan_probes(t, LibraryKind::Cuda, ProbeSet::Default);
  struct Want {
    uint32_t api;
    uint32_t shape;
  };
  const std::map<std::string, Want> want = {
      {"cuMemAlloc", {ARGUS_CU_MEM_ALLOC, ARGUS_MEM_ALLOC_U32}},
      {"cuMemAlloc_v2", {ARGUS_CU_MEM_ALLOC, ARGUS_MEM_ALLOC}},
      {"cuMemAllocAsync", {ARGUS_CU_MEM_ALLOC_ASYNC, ARGUS_MEM_ALLOC}},
      {"cuMemAllocAsync_ptsz", {ARGUS_CU_MEM_ALLOC_ASYNC, ARGUS_MEM_ALLOC}},
      {"cuMemAllocFromPoolAsync", {ARGUS_CU_MEM_ALLOC_ASYNC, ARGUS_MEM_ALLOC}},
      {"cuMemAllocManaged", {ARGUS_CU_MEM_ALLOC_MANAGED, ARGUS_MEM_ALLOC}},
      {"cuMemAllocPitch_v2", {ARGUS_CU_MEM_ALLOC_PITCH, ARGUS_MEM_ALLOC_PITCH}},
      {"cuMemCreate", {ARGUS_CU_MEM_CREATE, ARGUS_MEM_CREATE}},
      {"cuMemFree", {ARGUS_CU_MEM_FREE, ARGUS_MEM_FREE_U32}},
      {"cuMemFree_v2", {ARGUS_CU_MEM_FREE, ARGUS_MEM_FREE}},
      {"cuMemFreeAsync", {ARGUS_CU_MEM_FREE_ASYNC, ARGUS_MEM_FREE}},
      {"cuMemRelease", {ARGUS_CU_MEM_RELEASE, ARGUS_MEM_RELEASE}},
      {"cuMemMap", {ARGUS_CU_MEM_MAP, ARGUS_MEM_MAP}},
      {"cuMemUnmap", {ARGUS_CU_MEM_UNMAP, ARGUS_MEM_MAP}},
      {"cuMemGetInfo_v2", {ARGUS_CU_MEM_GET_INFO, ARGUS_MEM_INFO}},
      {"cuDeviceTotalMem_v2", {ARGUS_CU_DEVICE_TOTAL_MEM, ARGUS_MEM_TOTAL}},
  };
  for (const auto& [name, w] : want) {
    const auto* entry = find_spec(def, name, ProbeProgram::CudaMemEnter);
    ASSERT_NE(entry, nullptr) << name;
    EXPECT_FALSE(entry->retprobe) << name;
    EXPECT_EQ(ARGUS_COOKIE_ID(entry->cookie), w.api) << name;
    EXPECT_EQ(ARGUS_COOKIE_FLAGS(entry->cookie), w.shape) << name;
    const auto* ret = find_spec(def, name, ProbeProgram::CudaMemExit);
    ASSERT_NE(ret, nullptr) << name;
    EXPECT_TRUE(ret->retprobe) << name;
    const bool allocation = w.shape == ARGUS_MEM_ALLOC || w.shape == ARGUS_MEM_ALLOC_U32 ||
                            w.shape == ARGUS_MEM_ALLOC_PITCH || w.shape == ARGUS_MEM_CREATE;
    EXPECT_EQ(find_spec(def, name, ProbeProgram::PyStackAtOom) != nullptr, allocation) << name;
    EXPECT_EQ(find_spec(def, name, ProbeProgram::CudaRet), nullptr) << name << ": its errors are counted once";
  }
  for (const char* host : {"cuMemAllocHost", "cuMemAllocHost_v2", "cuMemAllocPitch"}) {
    EXPECT_NE(find_spec(def, host, ProbeProgram::CudaRet), nullptr) << host;
    EXPECT_EQ(find_spec(def, host, ProbeProgram::CudaMemEnter), nullptr) << host;
  }
  // Every exported cuMemAlloc* name is covered one way or the other.
  for (const auto& sym : t.symbols()) {
    if (sym.name.rfind("cuMemAlloc", 0) == 0 && sym.is_function) {
      EXPECT_TRUE(find_spec(def, sym.name, ProbeProgram::CudaRet) != nullptr ||
                  find_spec(def, sym.name, ProbeProgram::CudaMemExit) != nullptr)
          << sym.name;
    }
  }
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_MEM_ALLOC), "cuMemAlloc");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_MEM_ALLOC_PITCH), "cuMemAllocPitch");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_MEM_CREATE), "cuMemCreate");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_MEM_RELEASE), "cuMemRelease");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_DEVICE_TOTAL_MEM), "cuDeviceTotalMem");
}

// Host copies in the default set: entry (ByteCount at arg 3, direction) and
// return (error code); the unversioned legacy names read a 32-bit count.
TEST(AttachPlan, CudaStubMemcpyDirectionsAndByteCount) {
  if (!std::filesystem::exists(kCudaStub)) GTEST_SKIP() << kCudaStub << " not installed";
  auto t = load(kCudaStub);
  auto def = plan_probes(t, LibraryKind::Cuda, ProbeSet::Default);
  struct Want {
    const char* name;
    uint32_t api, dir;
    bool u32;
  };
  const Want wants[] = {
      {"cuMemcpyHtoD", ARGUS_CU_MEMCPY_HTOD, ARGUS_GPU_COPY_HTOD, true},
      {"cuMemcpyHtoD_v2", ARGUS_CU_MEMCPY_HTOD, ARGUS_GPU_COPY_HTOD, false},
      {"cuMemcpyHtoD_v2_ptds", ARGUS_CU_MEMCPY_HTOD, ARGUS_GPU_COPY_HTOD, false},
      {"cuMemcpyDtoH", ARGUS_CU_MEMCPY_DTOH, ARGUS_GPU_COPY_DTOH, true},
      {"cuMemcpyDtoH_v2", ARGUS_CU_MEMCPY_DTOH, ARGUS_GPU_COPY_DTOH, false},
      {"cuMemcpyDtoH_v2_ptds", ARGUS_CU_MEMCPY_DTOH, ARGUS_GPU_COPY_DTOH, false},
      {"cuMemcpyDtoD", ARGUS_CU_MEMCPY_DTOD, ARGUS_GPU_COPY_DTOD, true},
      {"cuMemcpyDtoD_v2", ARGUS_CU_MEMCPY_DTOD, ARGUS_GPU_COPY_DTOD, false},
      {"cuMemcpyDtoD_v2_ptds", ARGUS_CU_MEMCPY_DTOD, ARGUS_GPU_COPY_DTOD, false},
      {"cuMemcpyHtoDAsync", ARGUS_CU_MEMCPY_HTOD_ASYNC, ARGUS_GPU_COPY_HTOD, true},
      {"cuMemcpyHtoDAsync_v2", ARGUS_CU_MEMCPY_HTOD_ASYNC, ARGUS_GPU_COPY_HTOD, false},
      {"cuMemcpyHtoDAsync_v2_ptsz", ARGUS_CU_MEMCPY_HTOD_ASYNC, ARGUS_GPU_COPY_HTOD, false},
      {"cuMemcpyDtoHAsync", ARGUS_CU_MEMCPY_DTOH_ASYNC, ARGUS_GPU_COPY_DTOH, true},
      {"cuMemcpyDtoHAsync_v2", ARGUS_CU_MEMCPY_DTOH_ASYNC, ARGUS_GPU_COPY_DTOH, false},
      {"cuMemcpyDtoHAsync_v2_ptsz", ARGUS_CU_MEMCPY_DTOH_ASYNC, ARGUS_GPU_COPY_DTOH, false},
      {"cuMemcpyDtoDAsync", ARGUS_CU_MEMCPY_DTOD_ASYNC, ARGUS_GPU_COPY_DTOD, true},
      {"cuMemcpyDtoDAsync_v2", ARGUS_CU_MEMCPY_DTOD_ASYNC, ARGUS_GPU_COPY_DTOD, false},
      {"cuMemcpyDtoDAsync_v2_ptsz", ARGUS_CU_MEMCPY_DTOD_ASYNC, ARGUS_GPU_COPY_DTOD, false},
  };
  for (const auto& w : wants) {
    SCOPED_TRACE(w.name);
    const auto* entry = find_spec(def, w.name, ProbeProgram::CudaMemcpy);
    ASSERT_NE(entry, nullptr);
    EXPECT_FALSE(entry->retprobe);
    EXPECT_EQ(entry->file_offset, t.find(w.name)->file_offset);
    EXPECT_EQ(ARGUS_COOKIE_ID(entry->cookie), w.api);
    EXPECT_EQ(ARGUS_COOKIE_COUNT_ARG(entry->cookie), 3u);  // (dst, src, ByteCount[, stream])
    const uint32_t flags = ARGUS_COOKIE_FLAGS(entry->cookie);
    EXPECT_EQ(ARGUS_COOKIE_COPY_DIR(flags), w.dir);
    EXPECT_EQ((flags & ARGUS_COOKIE_COPY_U32) != 0, w.u32);
    const auto* ret = find_spec(def, w.name, ProbeProgram::CudaRet);
    ASSERT_NE(ret, nullptr);
    EXPECT_TRUE(ret->retprobe);
    EXPECT_EQ(ARGUS_COOKIE_ID(ret->cookie), w.api);
  }
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_MEMCPY_HTOD_ASYNC), "cuMemcpyHtoDAsync");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_MEMCPY_DTOD), "cuMemcpyDtoD");
  // Deep adds launches only: the copy probes are the same in both sets.
  auto deep = plan_probes(t, LibraryKind::Cuda, ProbeSet::Deep);
  size_t def_copies = 0, deep_copies = 0;
  for (const auto& s : def) def_copies += s.program == ProbeProgram::CudaMemcpy;
  for (const auto& s : deep) deep_copies += s.program == ProbeProgram::CudaMemcpy;
  EXPECT_EQ(def_copies, std::size(wants));
  EXPECT_EQ(deep_copies, def_copies);
}

// The sim's shim exports the copies the worker makes, each probed on its own.
TEST(AttachPlan, SimShimCudaCopiesAndLaunches) {
  if (!std::filesystem::exists(kShimCuda)) GTEST_SKIP() << "shim not built";
  auto t = load(kShimCuda);
  auto def = plan_probes(t, LibraryKind::Cuda, ProbeSet::Default);
  for (const char* name : {"cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyDtoD_v2", "cuMemcpyHtoDAsync_v2",
                           "cuMemcpyDtoHAsync_v2", "cuMemcpyDtoDAsync_v2"}) {
    EXPECT_NE(find_spec(def, name, ProbeProgram::CudaMemcpy), nullptr) << name;
    EXPECT_NE(find_spec(def, name, ProbeProgram::CudaRet), nullptr) << name;
  }
  for (const auto& s : def) {
    EXPECT_NE(s.program, ProbeProgram::CudaCount) << s.symbol;
    EXPECT_NE(s.program, ProbeProgram::CudaLaunchExit) << s.symbol;
  }
  auto deep = plan_probes(t, LibraryKind::Cuda, ProbeSet::Deep);
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"}) {
    EXPECT_NE(find_spec(deep, name, ProbeProgram::CudaCount), nullptr) << name;
    EXPECT_NE(find_spec(deep, name, ProbeProgram::CudaLaunchExit), nullptr) << name;
  }
}

TEST(AttachPlan, LibrariesAreRecognisedBySymbolsNotNames) {
  // libc exports neither API.
  auto libc = load("/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ(classify_library(libc), LibraryKind::None);
  EXPECT_TRUE(plan_probes(libc, LibraryKind::None, ProbeSet::Deep).empty());
  if (std::filesystem::exists(kShimCuda)) {
    EXPECT_EQ(classify_library(load(kShimCuda)), LibraryKind::Cuda);
  }
  // An empty table is nothing.
  EXPECT_EQ(classify_library(elf::SymbolTable{}), LibraryKind::None);
}

// The dynamic loader is recognised by _dl_debug_state (the r_debug protocol's
// breakpoint, which every dlopen calls): one entry probe there, and it makes
// nobody a rank. libc (which dlopen lives in) is not a loader.
TEST(AttachPlan, TheDynamicLoaderGetsOneLinkMapProbe) {
  const std::string ld = std::filesystem::canonical("/lib64/ld-linux-x86-64.so.2").string();
  auto t = load(ld);
  ASSERT_EQ(classify_library(t), LibraryKind::Loader) << ld;
  EXPECT_STREQ(library_kind_name(LibraryKind::Loader), "loader");
  for (ProbeSet set : {ProbeSet::Default, ProbeSet::Deep}) {
    auto specs = plan_probes(t, LibraryKind::Loader, set);
    ASSERT_EQ(specs.size(), 1u);
    EXPECT_EQ(specs[0].symbol, kLoaderHookSymbol);
    EXPECT_EQ(specs[0].program, ProbeProgram::LinkMapChange);
    EXPECT_FALSE(specs[0].retprobe);
    EXPECT_EQ(specs[0].file_offset, t.find(kLoaderHookSymbol)->file_offset);
  }
  EXPECT_STREQ(probe_program_name(ProbeProgram::LinkMapChange), "argus_dl_debug_state");
  EXPECT_EQ(classify_library(load("/lib/x86_64-linux-gnu/libc.so.6")), LibraryKind::None);
}

// Interpreters are Python by their exported symbols (libpython, or an
// executable with it linked in); their GC probes are an entry + return pair at
// the collector for the symbol anchors, nothing for the USDT one or none.
TEST(AttachPlan, PythonInterpretersAndTheirGcProbes) {
  for (const std::string& path : {std::string("/usr/bin/python3.11"),
                                 std::string(std::getenv("HOME") ? std::getenv("HOME") : "/root") +
                                     "/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0"}) {
    if (!std::filesystem::exists(path)) continue;
    elf::ReadOptions dyn;
    dyn.include_symtab = false;
    auto t = elf::read_symbols(path, dyn);
    ASSERT_TRUE(t.ok()) << t.error();
    EXPECT_EQ(classify_library(*t), LibraryKind::Python) << path;
    EXPECT_TRUE(plan_probes(*t, LibraryKind::Python, ProbeSet::Default).empty());
  }
  EXPECT_EQ(classify_library(load(kShimNccl)), LibraryKind::Nccl);  // NCCL first, whatever else it exports
  auto plan = plan_python_gc("gc_collect_main", "gc_collect_main.lto_priv.0", 0x1234);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].program, ProbeProgram::PyGcEnter);
  EXPECT_FALSE(plan[0].retprobe);
  EXPECT_EQ(plan[1].program, ProbeProgram::PyGcExit);
  EXPECT_TRUE(plan[1].retprobe);
  EXPECT_EQ(plan[0].file_offset, 0x1234u);
  EXPECT_EQ(plan[1].file_offset, 0x1234u);
  EXPECT_EQ(plan[0].symbol, "gc_collect_main.lto_priv.0");
  EXPECT_EQ(plan_python_gc("pygc_collect_call", "PyGC_Collect->0x630c00", 0x230c00).size(), 2u);
  EXPECT_TRUE(plan_python_gc("usdt", "python:gc__start", 0).empty());
  EXPECT_TRUE(plan_python_gc("none", "", 0).empty());
  EXPECT_TRUE(plan_python_gc("gc_collect_main", "gc_collect_main", 0).empty());  // no offset: nothing to probe
  EXPECT_STREQ(library_kind_name(LibraryKind::Python), "python");
  EXPECT_STREQ(probe_program_name(ProbeProgram::PyGcUsdtDone), "argus_py_gc_usdt_done");
}

TEST(AttachPlan, Labels) {
  EXPECT_STREQ(nccl_op_label(ARGUS_OP_ALL_TO_ALL), "all_to_all");
  EXPECT_STREQ(nccl_op_label(999), "unknown");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_STREAM_SYNCHRONIZE), "cuStreamSynchronize");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_API_MAX), "unknown");
  EXPECT_EQ(cuda_result_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(cuda_result_name(12345), "12345");
  EXPECT_EQ(nccl_result_name(6), "ncclRemoteError");
}


// PyTorch's c10d (libtorch_cpu): the Gloo backend's constructor, the group's
// naming and description, and every collective and p2p method, by mangled
// prefix, so each overload is probed and a changed signature still matches.
elf::Symbol fn(const std::string& name, uint64_t at) {
  elf::Symbol s;
  s.name = name;
  s.value = s.file_offset = at;
  s.mapped = s.is_function = s.dynamic = s.global = true;
  return s;
}

TEST(AttachPlan, C10dGlooMethodsByMangledPrefix) {
  std::vector<elf::Symbol> syms{
      fn("_ZN4c10d16ProcessGroupGloo9allreduceERSt6vectorIN2at6TensorESaIS3_EERKNS_16AllreduceOptionsE", 0x100),
      fn("_ZN4c10d16ProcessGroupGloo9allreduceERSt6vectorIN2at6TensorESaIS3_EERKNS_16AllreduceOptionsEi", 0x180),
      fn("_ZN4c10d16ProcessGroupGloo14reduce_scatterERSt6vectorIN2at6TensorESaIS3_EE", 0x200),
      fn("_ZN4c10d16ProcessGroupGloo6reduceERSt6vectorIN2at6TensorESaIS3_EERKNS_13ReduceOptionsE", 0x280),
      fn("_ZN4c10d16ProcessGroupGloo4sendERSt6vectorIN2at6TensorESaIS3_EEii", 0x300),
      fn("_ZN4c10d16ProcessGroupGloo7barrierERKNS_14BarrierOptionsE", 0x380),
      fn("_ZN4c10d16ProcessGroupGlooC1ERKN3c1013intrusive_ptrINS_5StoreEEEiiNS2_INS0_7OptionsEEE", 0x400),
      fn("_ZN4c10d16ProcessGroupGlooC2ERKN3c1013intrusive_ptrINS_5StoreEEEiiNS2_INS0_7OptionsEEE", 0x400),
      fn("_ZN4c10d12ProcessGroup12setGroupNameERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", 0x500),
      fn("_ZN4c10d12ProcessGroup12setGroupDescERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE", 0x580),
      fn("_ZN4c10d16ProcessGroupGloo7enqueueEN3c1013intrusive_ptrINS0_9AsyncWorkEEE", 0x600),  // not a call of the user's
  };
  std::sort(syms.begin(), syms.end(), [](const elf::Symbol& a, const elf::Symbol& b) { return a.name < b.name; });
  elf::SymbolTable t(syms, 62, 3, false);
  ASSERT_EQ(classify_library(t), LibraryKind::Torch);
  EXPECT_STREQ(library_kind_name(LibraryKind::Torch), "torch");
  auto plan = plan_probes(t, LibraryKind::Torch, ProbeSet::Default);
  std::map<uint64_t, ProbeSpec> by_offset;
  for (const auto& s : plan) EXPECT_TRUE(by_offset.emplace(s.file_offset, s).second) << s.symbol;
  EXPECT_EQ(plan.size(), 9u);  // both allreduce overloads, one constructor probe, no enqueue
  EXPECT_FALSE(by_offset.count(0x600));
  for (uint64_t at : {0x100u, 0x180u}) {
    EXPECT_EQ(by_offset.at(at).program, ProbeProgram::C10dCollEnter);
    EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(at).cookie), static_cast<uint32_t>(ARGUS_OP_ALL_REDUCE));
    EXPECT_EQ(ARGUS_COOKIE_COMM_ARG(by_offset.at(at).cookie), 2u);  // after the return slot
  }
  EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(0x200).cookie), static_cast<uint32_t>(ARGUS_OP_REDUCE_SCATTER));
  EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(0x280).cookie), static_cast<uint32_t>(ARGUS_OP_REDUCE));
  EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(0x300).cookie), static_cast<uint32_t>(ARGUS_OP_SEND));
  EXPECT_EQ(ARGUS_COOKIE_PEER_ARG(by_offset.at(0x300).cookie), 4u);  // (slot, this, tensors, dstRank, tag)
  EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(0x380).cookie), static_cast<uint32_t>(ARGUS_C10D_OP_BARRIER));
  EXPECT_EQ(by_offset.at(0x400).program, ProbeProgram::C10dBackendInit);
  EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(0x400).cookie), static_cast<uint32_t>(ARGUS_C10D_GLOO));
  EXPECT_EQ(by_offset.at(0x500).program, ProbeProgram::C10dGroupText);
  EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(0x500).cookie), static_cast<uint32_t>(ARGUS_C10D_GROUP_NAME));
  EXPECT_EQ(ARGUS_COOKIE_ID(by_offset.at(0x580).cookie), static_cast<uint32_t>(ARGUS_C10D_GROUP_DESC));
  for (const auto& s : plan) EXPECT_FALSE(s.retprobe);
  EXPECT_STREQ(probe_program_name(ProbeProgram::C10dCollEnter), "argus_c10d_coll_enter");
  EXPECT_STREQ(c10d_op_label(ARGUS_C10D_OP_BARRIER), "barrier");
  EXPECT_STREQ(c10d_op_label(ARGUS_OP_ALL_REDUCE), "all_reduce");

  // c10d without the Gloo methods (a build without Gloo): still PyTorch, but
  // nothing to probe (the probe manager says so and counts c10d_unsupported).
  elf::SymbolTable bare({fn("_ZN4c10d12ProcessGroup12setGroupNameERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
                            0x500)},
                        62, 3, false);
  EXPECT_EQ(classify_library(bare), LibraryKind::Torch);
  EXPECT_TRUE(plan_probes(bare, LibraryKind::Torch, ProbeSet::Default).empty());
}

// The real wheel (the torch venv scripts/install-deps.sh caches): every method
// the plan names is exported, and each gets exactly one probe.
std::optional<elf::SymbolTable> real_torch_library(const std::string& name) {
  const char* cache = std::getenv("ARGUS_CACHE_DIR");
  const std::string lib = std::string(cache && *cache ? cache : "/var/cache/argus") +
                          "/torch-venv/lib/python3.11/site-packages/torch/lib/" + name;
  if (!std::filesystem::exists(lib)) return std::nullopt;
  elf::ReadOptions dyn;
  dyn.include_symtab = false;
  auto t = elf::read_symbols(lib, dyn);
  EXPECT_TRUE(t.ok()) << t.error();
  if (!t.ok()) return std::nullopt;
  return std::move(*t);
}

// The real library's plan, classified as PyTorch's; nullopt when the venv is
// not installed (or the library is not PyTorch's: a failure).
std::optional<std::vector<ProbeSpec>> real_torch_plan(const std::string& name) {
  auto t = real_torch_library(name);
  if (!t) return std::nullopt;
  EXPECT_EQ(classify_library(*t), LibraryKind::Torch) << name;
  return plan_probes(*t, LibraryKind::Torch, ProbeSet::Default);
}

std::map<ProbeProgram, int> probes_per_program(const std::vector<ProbeSpec>& plan) {
  std::map<ProbeProgram, int> per_program;
  std::set<std::pair<uint64_t, ProbeProgram>> probes;  // an entry and its return share an offset
  for (const auto& s : plan) {
    ++per_program[s.program];
    EXPECT_TRUE(probes.insert({s.file_offset, s.program}).second) << s.symbol;
  }
  return per_program;
}

TEST(AttachPlan, RealLibtorchCpu) {
  const auto plan = real_torch_plan("libtorch_cpu.so");
  if (!plan) GTEST_SKIP() << "the torch venv is not installed";
  auto per_program = probes_per_program(*plan);
  EXPECT_EQ(per_program[ProbeProgram::C10dBackendInit], 1);  // C1 and C2 share an address
  EXPECT_EQ(per_program[ProbeProgram::C10dGroupText], 2);
  EXPECT_EQ(per_program[ProbeProgram::C10dCollEnter], 19);  // one per method of the plan (torch 2.15)
  // Work::wait, SendWork::wait, RecvWork::wait: entry and return each.
  EXPECT_EQ(per_program[ProbeProgram::C10dWaitEnter], 3);
  EXPECT_EQ(per_program[ProbeProgram::C10dWaitExit], 3);
  for (const auto& s : *plan) {
    if (s.program == ProbeProgram::C10dCollEnter) {
      EXPECT_EQ(ARGUS_COOKIE_FLAGS(s.cookie), static_cast<uint32_t>(ARGUS_C10D_GLOO)) << s.symbol;
    }
  }
}

// libtorch_cuda holds ProcessGroupNCCL (the group naming stays in
// libtorch_cpu): its constructor and the same 19 methods, each call marked as
// NCCL's so that the agent joins it with the NCCL call it makes.
TEST(AttachPlan, RealLibtorchCudaHasTheNcclBackend) {
  const auto plan = real_torch_plan("libtorch_cuda.so");
  if (!plan) GTEST_SKIP() << "the torch venv is not installed";
  auto per_program = probes_per_program(*plan);
  EXPECT_EQ(per_program[ProbeProgram::C10dBackendInit], 1);
  EXPECT_EQ(per_program[ProbeProgram::C10dGroupText], 0);
  EXPECT_EQ(per_program[ProbeProgram::C10dCollEnter], 19);
  EXPECT_EQ(per_program[ProbeProgram::C10dWaitEnter], 0);  // WorkNCCL::wait blocks the stream, not the host
  std::set<std::string> methods;
  for (const auto& s : *plan) {
    const uint32_t expect_kind = s.program == ProbeProgram::C10dBackendInit ? ARGUS_COOKIE_ID(s.cookie)
                                                                             : ARGUS_COOKIE_FLAGS(s.cookie);
    EXPECT_EQ(expect_kind, static_cast<uint32_t>(ARGUS_C10D_NCCL)) << s.symbol;
    EXPECT_EQ(s.symbol.rfind("_ZN4c10d16ProcessGroupNCCL", 0), 0u) << s.symbol;
    if (s.program == ProbeProgram::C10dCollEnter) methods.insert(s.symbol);
  }
  // The internal out-of-place broadcast an uneven allgather makes is not a user's call.
  for (const auto& m : methods) EXPECT_EQ(m.find("_broadcast_oop"), std::string::npos) << m;
}

}  // namespace
}  // namespace argus
