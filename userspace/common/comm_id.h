// A communicator's name in every output (the `comm` label, /api/v1/comms, events'
// evidence, the trace, the job-id fallback): a hash of its ncclUniqueId bytes.
//
// The unique id itself starts with NCCL's bootstrap magic and the root rank's socket
// address; publishing it would hand out where the job's bootstrap listens. The hash is
// unkeyed on purpose: every rank of a communicator, on every node, hashes the same
// bytes and gets the same name, which cross-node joins rely on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace argus {

// The first 16 hex digits (64 bits) of SHA-256 over the bytes.
std::string comm_id_from_uid(const uint8_t* uid, std::size_t n);

}  // namespace argus
