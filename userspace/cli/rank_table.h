// argusctl's table of a node's ranks, from the agent's GET /api/v1/ranks document.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace argus::cli {

// One line per rank, sorted by job then rank (then pid), under a header line:
// JOB RANK PID STATE COLL COLL_GB COLL% SYNC% GPU% NCCL_K% BUBBLE% LAUNCHES ERRORS FLAGS
// COLL counts NCCL collective and P2P calls; COLL_GB is their bytes / 1e9; COLL% is
// collective_wait_ratio x 100 (inside collective calls: near 0 with real, asynchronous
// NCCL) and SYNC% sync_wait_ratio x 100 (blocked in CUDA synchronize); LAUNCHES is "-" where launches are not counted; ERRORS
// counts CUDA and NCCL calls that failed. Processes without job_id or rank appear only
// with include_unidentified (as "?"); otherwise a last line says how many were hidden.
// Missing or mistyped fields read as unknown, never throw. Ends with a newline.
std::string format_rank_table(const nlohmann::json& ranks_doc, bool include_unidentified);

// The events document of GET /api/v1/events as lines: TIME KIND JOB RANK SUMMARY.
std::string format_event_list(const nlohmann::json& events_doc);

}  // namespace argus::cli
