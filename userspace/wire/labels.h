// Every label the agent puts on what BPF counted or sent: the ids packed into
// probe cookies, stat keys and records (enum values of bpf/argus*.h) turned into
// the words /metrics, the JSON API and the logs use. One place, so that a new id
// gets its word once.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "userspace/model/vocab.h"

namespace argus {

// NCCL: an op id (enum argus_nccl_op) -> "all_reduce", ... ("unknown" out of range);
// an init api id (enum argus_nccl_init_api: how a communicator was made) ->
// "ncclCommInitRank", ..., "ncclCommSplit", "ncclCommShrink", "ncclCommInitAll".
const char* nccl_op_label(uint32_t op);
// NCCL's op labels, and "barrier" (ARGUS_C10D_OP_BARRIER).
const char* c10d_op_label(uint32_t op);
// "gloo" (enum argus_c10d_backend_kind), else "unknown".
const char* c10d_backend_label(uint32_t kind);
const char* nccl_init_api_label(uint32_t api);
// ARGUS_STAT_NCCL_ERROR's sub: an op, an init API, or ncclGroupEnd.
const char* nccl_error_api_label(uint32_t sub);
// A timed NCCL call (an in-flight slot, a call_done record) by its stat kind
// and id: the op of a collective, or "ncclGroupEnd".
const char* nccl_call_label(uint32_t kind, uint32_t id);
// CUDA: an api id (enum argus_cu_api) -> "cuStreamSynchronize", ...
const char* cuda_api_label(uint32_t api);
// Return codes: "CUDA_ERROR_OUT_OF_MEMORY", "ncclSystemError" (bpf/argus_result_codes.h), or the number.
std::string cuda_result_name(int code);
std::string nccl_result_name(int code);
// The `op` label of a block request (enum argus_block_op): "read", "write",
// "flush", "discard", "other".
const char* block_op_label(uint32_t op);
// A BPF error counter (enum argus_error): "ringbuf_full_nccl", "stats_map_full", ...
const char* bpf_error_name(uint32_t err);
// The source whose records a full ring buffer lost, for a ringbuf_full_* counter
// (those are events lost, not errors); nullopt for any other counter.
std::optional<EventSource> ringbuf_full_source(uint32_t err);
// A copy's direction (ARGUS_GPU_COPY_*, also the memcpy stat key's sub): "htod", "dtoh", ...
const char* copy_direction_label(uint32_t dir);
// The `remote` label of a TCP key's address: "10.0.0.7", "fd00::7"; an IPv4-mapped
// IPv6 address as IPv4 (dual-stack sockets). "" for any other family.
std::string tcp_remote_label(uint16_t family, const uint8_t (&addr)[16]);

}  // namespace argus
