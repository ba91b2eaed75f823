// bpf/argus_result_codes.h: the one CUresult and ncclResult_t name table, and the agent's
// labels made from it.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "bpf/argus_result_codes.h"
#include "userspace/attach/attach_plan.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

TEST(ResultCodes, CudaNames) {
  EXPECT_STREQ(argus_cuda_result_name(0), "CUDA_SUCCESS");
  EXPECT_STREQ(argus_cuda_result_name(2), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(argus_cuda_result_name(46), "CUDA_ERROR_DEVICE_UNAVAILABLE");
  EXPECT_STREQ(argus_cuda_result_name(719), "CUDA_ERROR_LAUNCH_FAILED");
  EXPECT_STREQ(argus_cuda_result_name(999), "CUDA_ERROR_UNKNOWN");
  EXPECT_EQ(argus_cuda_result_name(12345), nullptr);
  EXPECT_EQ(argus_cuda_result_name(-1), nullptr);
  EXPECT_EQ(cuda_result_name(46), "CUDA_ERROR_DEVICE_UNAVAILABLE");
  EXPECT_EQ(cuda_result_name(12345), "12345");
}

TEST(ResultCodes, NcclNames) {
  EXPECT_STREQ(argus_nccl_result_name(0), "ncclSuccess");
  EXPECT_STREQ(argus_nccl_result_name(1), "ncclUnhandledCudaError");
  EXPECT_STREQ(argus_nccl_result_name(6), "ncclRemoteError");
  EXPECT_STREQ(argus_nccl_result_name(7), "ncclInProgress");
  EXPECT_EQ(argus_nccl_result_name(8), nullptr);  // ncclNumResults is no result
  EXPECT_EQ(argus_nccl_result_name(-1), nullptr);
  EXPECT_EQ(nccl_result_name(3), "ncclInternalError");
  EXPECT_EQ(nccl_result_name(42), "42");
}

TEST(ResultCodes, TablesHaveNoDuplicates) {
  std::set<int> values;
  std::set<std::string> names;
  for (const auto& c : argus_cuda_results) {
    EXPECT_TRUE(values.insert(c.value).second) << c.value;
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
  }
  values.clear();
  for (const auto& c : argus_nccl_results) {
    EXPECT_TRUE(values.insert(c.value).second) << c.value;
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
  }
}

}  // namespace
}  // namespace argus
