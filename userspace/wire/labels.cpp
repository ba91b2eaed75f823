#include "userspace/wire/labels.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <array>
#include <cstring>

#include "bpf/argus.h"
#include "bpf/argus_gpu_wire.h"
#include "bpf/argus_netblk.h"
#include "bpf/argus_result_codes.h"

namespace argus {
namespace {

// The model's sources are BPF's, number for number.
static_assert(static_cast<int>(EventSource::kProc) == ARGUS_SRC_PROC);
static_assert(static_cast<int>(EventSource::kNccl) == ARGUS_SRC_NCCL);
static_assert(static_cast<int>(EventSource::kCuda) == ARGUS_SRC_CUDA);
static_assert(static_cast<int>(EventSource::kGpu) == ARGUS_SRC_GPU);
static_assert(ARGUS_SRC_MAX == kVocabSize<EventSource>);

constexpr uint16_t kAfInet = 2;  // the kernel's AF_INET and AF_INET6, as BPF copies them
constexpr uint16_t kAfInet6 = 10;

}  // namespace

const char* nccl_op_label(uint32_t op) {
  static constexpr std::array<const char*, ARGUS_OP_MAX> kLabels{
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
      "all_to_all", "send",       "recv",           "gather",    "scatter"};
  return op < kLabels.size() ? kLabels[op] : "unknown";
}

const char* c10d_op_label(uint32_t op) { return op == ARGUS_C10D_OP_BARRIER ? "barrier" : nccl_op_label(op); }

const char* c10d_backend_label(uint32_t kind) {
  switch (kind) {
    case ARGUS_C10D_GLOO: return "gloo";
    case ARGUS_C10D_NCCL: return "nccl";
    default: return "unknown";
  }
}

const char* nccl_init_api_label(uint32_t api) {
  switch (api) {
    case ARGUS_NCCL_INIT_RANK: return "ncclCommInitRank";
    case ARGUS_NCCL_INIT_RANK_CONFIG: return "ncclCommInitRankConfig";
    case ARGUS_NCCL_INIT_RANK_SCALABLE: return "ncclCommInitRankScalable";
    case ARGUS_NCCL_COMM_SPLIT: return "ncclCommSplit";
    case ARGUS_NCCL_COMM_SHRINK: return "ncclCommShrink";
    case ARGUS_NCCL_COMM_INIT_ALL: return "ncclCommInitAll";
    default: return "unknown";
  }
}

const char* nccl_error_api_label(uint32_t sub) {
  if (sub == ARGUS_NCCL_ERR_GROUP_END) return "ncclGroupEnd";
  return sub >= ARGUS_OP_MAX ? nccl_init_api_label(sub - ARGUS_OP_MAX) : nccl_op_label(sub);
}

const char* nccl_call_label(uint32_t kind, uint32_t id) {
  if (kind == ARGUS_STAT_NCCL_GROUP_WAIT) return "ncclGroupEnd";
  if (kind == ARGUS_STAT_C10D_WAIT) return "Work::wait";
  return nccl_op_label(id);
}

const char* cuda_api_label(uint32_t api) {
  static constexpr std::array<const char*, ARGUS_CU_API_MAX> kLabels{
      "cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize", "cuLaunchKernel",
      "cuLaunchKernelEx",    "cuLaunchCooperativeKernel", "cuMemAlloc", "cuMemAllocAsync",
      "cuMemAllocManaged",   "cuMemAllocHost",      "cuInit",           "cuCtxCreate",
      "cuMemAllocPitch",     "cuMemcpyHtoD",        "cuMemcpyDtoH",     "cuMemcpyDtoD",
      "cuMemcpyHtoDAsync",   "cuMemcpyDtoHAsync",   "cuMemcpyDtoDAsync", "cuMemCreate",
      "cuMemFree",           "cuMemFreeAsync",      "cuMemRelease",     "cuMemMap",
      "cuMemUnmap",          "cuMemGetInfo",        "cuDeviceTotalMem"};
  return api < kLabels.size() ? kLabels[api] : "unknown";
}

std::string cuda_result_name(int code) {
  const char* name = argus_cuda_result_name(code);
  return name ? name : std::to_string(code);
}

std::string nccl_result_name(int code) {
  const char* name = argus_nccl_result_name(code);
  return name ? name : std::to_string(code);
}

const char* block_op_label(uint32_t op) {
  switch (op) {
    case ARGUS_BLOCK_READ: return "read";
    case ARGUS_BLOCK_WRITE: return "write";
    case ARGUS_BLOCK_FLUSH: return "flush";
    case ARGUS_BLOCK_DISCARD: return "discard";
    default: return "other";
  }
}

std::optional<EventSource> ringbuf_full_source(uint32_t err) {
  switch (err) {
    case ARGUS_ERR_RINGBUF_PROC: return EventSource::kProc;
    case ARGUS_ERR_RINGBUF_NCCL: return EventSource::kNccl;
    case ARGUS_ERR_RINGBUF_CUDA: return EventSource::kCuda;
    case ARGUS_ERR_RINGBUF_GPU: return EventSource::kGpu;
    default: return std::nullopt;
  }
}

const char* bpf_error_name(uint32_t err) {
  switch (err) {
    case ARGUS_ERR_RINGBUF_PROC: return "ringbuf_full_proc";
    case ARGUS_ERR_RINGBUF_NCCL: return "ringbuf_full_nccl";
    case ARGUS_ERR_RINGBUF_CUDA: return "ringbuf_full_cuda";
    case ARGUS_ERR_STATS_FULL: return "stats_map_full";
    case ARGUS_ERR_INFLIGHT_FULL: return "inflight_map_full";
    case ARGUS_ERR_TRACKED_FULL: return "tracked_map_full";
    case ARGUS_ERR_READ_USER: return "read_user_failed";
    case ARGUS_ERR_RETURN_UNMATCHED: return "return_without_entry";
    case ARGUS_ERR_RINGBUF_GPU: return "ringbuf_full_gpu";
    case ARGUS_ERR_GPU_BATCH_TRUNCATED: return "gpu_batch_truncated";
    case ARGUS_ERR_GPU_READ: return "gpu_read_failed";
    case ARGUS_ERR_PY_SAMPLES_LOST: return "py_samples_lost";
    case ARGUS_ERR_SCHED_MAP_FULL: return "sched_map_full";
    case ARGUS_ERR_STEALER_MAP_FULL: return "stealer_map_full";
    case ARGUS_ERR_EXIT_INFO_FULL: return "exit_info_map_full";
    case ARGUS_ERR_TCP_MAP_FULL: return "tcp_map_full";
    case ARGUS_ERR_BLOCK_MAP_FULL: return "block_map_full";
    case ARGUS_ERR_GPU_ALLOC_MAP_FULL: return "gpu_alloc_map_full";
    default: return "unknown";
  }
}

const char* copy_direction_label(uint32_t dir) {
  switch (dir) {
    case ARGUS_GPU_COPY_HTOD: return "htod";
    case ARGUS_GPU_COPY_DTOH: return "dtoh";
    case ARGUS_GPU_COPY_DTOD: return "dtod";
    case ARGUS_GPU_COPY_HTOH: return "htoh";
    case ARGUS_GPU_COPY_PTOP: return "ptop";
    default: return "other";
  }
}

std::string tcp_remote_label(uint16_t family, const uint8_t (&addr)[16]) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family == kAfInet) return inet_ntop(AF_INET, addr, buf, sizeof(buf)) ? buf : "";
  if (family != kAfInet6) return "";
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(addr, kMapped, sizeof(kMapped)) == 0)
    return inet_ntop(AF_INET, addr + 12, buf, sizeof(buf)) ? buf : "";
  return inet_ntop(AF_INET6, addr, buf, sizeof(buf)) ? buf : "";
}

}  // namespace argus
