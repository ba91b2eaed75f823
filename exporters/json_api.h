// The JSON API's documents (GET /api/v1/ranks, ...).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "userspace/gpu_timeline/timeline.h"
#include "userspace/model/snapshot.h"

namespace argus {

inline constexpr const char* kJsonContentType = "application/json";

// GET /api/v1/ranks:
// {"node", "version", "probes", "window_seconds", "tracked_processes",
//  "ranks": [{"pid", "job_id" (null while unknown), "rank" (null while unknown),
//             "local_rank", "world_size", "local_world_size" (null while unknown),
//             "node", "comm", "state": "running"|"exited", "exit_reason", "exit_code",
//             "exited_at" (null while running), "exit_cause" (null while running: the
//             rank_exit event's evidence, docs/metrics.md "Rank deaths"),
//             "identity_source" (null if none),
//             "first_seen", "collective_wait_ratio", "sync_wait_ratio", "straggler",
//             "straggler_reason" ("host"|"compute"|"cpu_contention"|"throttled"|"io"|"gc_pause"|"sync"|"gpu"|null),
//             "pipeline_bubble", "gpu": null | {"busy_ratio", "nccl_kernel_ratio", "bubble_ratio",
//                     "records", "kernels", "kernel_seconds", "nccl_kernel_seconds", "idle_seconds",
//                     "bubble_seconds", "records_lost", "memcpy_bytes", "step_summary_bytes", ...},
//             "nccl": {op: {"calls", "bytes", "wait_seconds"}},
//             "cuda": {"sync": {api: {"calls", "wait_seconds"}},
//                      "kernel_launches": N | null when not counted,
//                      "launch_timing": null unless --probes deep | {"count", "seconds",
//                              "log2_buckets_ns": {"<2^b>": launches of [2^(b-1), 2^b) ns}},
//                      "memcpy": {"htod"|"dtoh"|"dtod": {"calls", "bytes"}} (host copy APIs),
//                      "errors": [{"api", "code", "count"}]},
//             "nccl_errors": [{"api", "code", "count"}], "libraries": [...]}]}
// Every process, identified or not. Ranks are sorted by job_id, rank, pid; a process
// without job_id or rank comes after the identified ones.
nlohmann::json ranks_json(const Snapshot& snap);

// ranks_json(snap) as text. Strings that are not valid UTF-8 (a comm from /proc can be
// anything) have their bad bytes replaced by U+FFFD rather than failing.
std::string render_ranks_json(const Snapshot& snap);

// j.dump() that never throws on bad UTF-8 (replaces it); indent < 0 means compact.
std::string dump_json(const nlohmann::json& j, int indent = -1);

// GET /api/v1/comms: {"comms": [{"job_id", "comm", "nranks", "ranks_here", "newest_seq",
//                                "stalled_seconds", "hung", "missing_ranks": [...]}]}
nlohmann::json comms_json(const Snapshot& snap);

}  // namespace argus

namespace argus {

// GET /api/v1/ranks/{job_id}/{rank}/gpu-steps?last=N: the rank's per-step kernel
// summaries (decoded sketches), oldest first:
// {"job_id", "rank", "pid", "steps": [{"start" (unix seconds), "bytes" (encoded size),
//   "kernels": [{"name", "count", "total_us", "p50_us", "p90_us", "max_us"}] (by total_us, largest first)}]}
// mono_to_unix_offset_s: added to a CLOCK_MONOTONIC time in seconds gives unix seconds.
nlohmann::json gpu_steps_json(const std::string& job_id, int rank, int pid, const std::vector<gpu::StepSummary>& steps,
                              const std::map<uint32_t, std::string>& names, double mono_to_unix_offset_s);

}  // namespace argus
