// The probe plan, decided from real symbol tables: which functions are probed,
// once per address, with the argument positions nccl.h gives.
#include "attach/attach_plan.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "argus.h"

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

  // 11 collective/p2p entry points x (entry + return), 3 inits x 2, group start/end.
  EXPECT_EQ(plan.size(), 11u * 2 + 3u * 2 + 2u);

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
  // The default set never traps on a launch.
  for (const auto& s : def) {
    EXPECT_NE(s.program, ProbeProgram::CudaCount) << s.symbol;
    EXPECT_EQ(s.symbol.find("cuLaunch"), std::string::npos) << s.symbol;
  }
  // Synchronize: entry + return on both cuStreamSynchronize and its _ptsz twin.
  EXPECT_NE(find_spec(def, "cuStreamSynchronize", ProbeProgram::CudaSyncEnter), nullptr);
  EXPECT_NE(find_spec(def, "cuStreamSynchronize_ptsz", ProbeProgram::CudaSyncEnter), nullptr);
  EXPECT_NE(find_spec(def, "cuMemAlloc_v2", ProbeProgram::CudaRet), nullptr);
  EXPECT_NE(find_spec(def, "cuMemAlloc", ProbeProgram::CudaRet), nullptr);
  // Deep adds every launch variant.
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz"})
    EXPECT_NE(find_spec(deep, name, ProbeProgram::CudaCount), nullptr) << name;
  EXPECT_GT(deep.size(), def.size());
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

TEST(AttachPlan, Labels) {
  EXPECT_STREQ(nccl_op_label(ARGUS_OP_ALL_TO_ALL), "all_to_all");
  EXPECT_STREQ(nccl_op_label(999), "unknown");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_STREAM_SYNCHRONIZE), "cuStreamSynchronize");
  EXPECT_STREQ(cuda_api_label(ARGUS_CU_API_MAX), "unknown");
  EXPECT_EQ(cuda_result_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(cuda_result_name(12345), "12345");
  EXPECT_EQ(nccl_result_name(6), "ncclRemoteError");
}

}  // namespace
}  // namespace argus
