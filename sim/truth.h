// What a simulated rank actually called, counted at the call site: the ground
// truth that tests compare the agent's metrics with. Written at worker exit as
// <out>/rank-<RANK>.json (atomically: temporary file + rename).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim_gpu.h"

namespace argus::sim {

struct OpCount {
	std::uint64_t calls = 0;
	std::uint64_t bytes = 0;
};

// The rank's device memory as its driver calls made it ("gpu_memory"), counted at
// the call site. Labels are driver API families, variants under their base name:
// allocations "cuMemAlloc" (cuMemAlloc, cuMemAlloc_v2), "cuMemAllocAsync"
// (cuMemAllocAsync, cuMemAllocFromPoolAsync), "cuMemAllocManaged",
// "cuMemAllocPitch", "cuMemCreate"; frees "cuMemFree" (cuMemFree, cuMemFree_v2),
// "cuMemFreeAsync", "cuMemRelease"; maps "cuMemMap", "cuMemUnmap". Only successful
// calls are counted there, with the bytes of the allocation made or freed (a
// pitched one: pitch x height); a failed call counts in `failures` (by result name).
enum class MemOp { Alloc, Free, Map }; // which table of GpuMemoryTruth a call goes in

struct GpuMemoryTruth {
	std::string api = "classic"; // --mem-api
	std::map<std::string, OpCount> allocations, frees, maps;
	std::map<std::string, std::uint64_t> failures;
	std::uint64_t held = 0;  // allocated less freed, now
	std::uint64_t peak = 0;  // the most `held` was
	std::uint64_t total = 0; // cuDeviceTotalMem_v2
	std::optional<std::uint64_t> held_before_teardown; // unset: no teardown yet (held)
	// The caching allocator's first out-of-memory: {"step", "asked_bytes",
	// "held_bytes", "peak_bytes", "code", "api" (label of the failing call)}; null if none.
	nlohmann::json oom;

	// A successful call: its table, and `held` / `peak` for allocations and frees.
	void count(MemOp op, const std::string &label, std::uint64_t bytes);
	void failed(const std::string &result_name) { failures[result_name]++; }
	nlohmann::json to_json() const;
};

struct Truth {
	std::string job_id;
	int rank = 0;
	int pid = 0;
	int local_rank = 0;
	int world_size = 1;
	int local_world_size = 1;
	std::string node = "node-0"; // simulated node (--nodes), as in ARGUS_SIM_NODE
	std::int64_t steps_completed = 0;
	// "completed" (all steps), "stopped" (SIGTERM/SIGINT), "aborted" (a NCCL wait
	// was aborted or timed out), "failed" (setup failed), "hung" (--hang: blocked,
	// later stopped), "exited" (--exit: exited with status 1), "oom" (ran out of GPU
	// memory, --mem-oom or --mem-leak: exited with status 1). "running" in a file
	// written while the rank runs (at a straggler's onset).
	std::string status = "running";
	// Injected faults, as they fire: {"kind": "straggler"|"gpu_slow"|"bubble"|"hang"|"exit"|
	// "mem_leak"|"oom", ..., "injected_at": CLOCK_REALTIME unix seconds}.
	nlohmann::json faults = nlohmann::json::array();

	std::map<std::string, OpCount> nccl;                                  // op label
	std::map<std::string, std::map<std::string, std::uint64_t>> nccl_errors; // op -> ncclResult name
	std::uint64_t group_start = 0;
	std::uint64_t group_end = 0;
	std::uint64_t group_end_ns = 0; // time inside ncclGroupEnd, around the call
	std::uint64_t nccl_init = 0;   // ncclCommInitRank calls (the world, DP and PP groups)
	std::uint64_t nccl_split = 0;  // ncclCommSplit calls (TP and EP groups)

	std::uint64_t kernel_launches = 0;
	std::map<std::string, std::uint64_t> sync;  // base api -> calls
	std::map<std::string, std::map<std::string, std::uint64_t>> cuda_errors; // base api -> code name
	std::map<std::string, std::uint64_t> cuda_calls; // exact symbol -> calls
	// Host-API copies (cuMemcpyHtoD/DtoH/DtoD and Async variants) by direction
	// ("htod", "dtoh", "dtod"): calls, and the ByteCount passed.
	std::map<std::string, OpCount> memcpy;
	GpuMemoryTruth gpu_memory;

	// "gpu": written when the CUDA library is the simulator's (has_gpu), or with --pp.
	bool has_gpu = false;
	// What the emulated GPU handed to the agent through argus:gpu_batch
	// (argus_sim_gpu_totals, taken after argus_sim_gpu_flush_all).
	argus_sim_gpu_totals gpu{};
	// "nccl_mode": "async" or "blocking"; "collectives": per collective number of
	// the rank's communicator, [seq, host call ns, GPU start ns, GPU end ns]
	// (CLOCK_MONOTONIC, GPU times 0 when never resolved), the newest
	// ARGUS_SIM_COLL_LOG_MAX; present with the simulator's libcuda.
	std::string nccl_mode = "async";
	// --host-cpu: the share of the host compute burnt on CPU ("host_cpu"), and
	// the thread CPU time the burning took ("host_cpu_seconds").
	double host_cpu = 0;
	std::uint64_t host_cpu_burnt_ns = 0;
	std::vector<argus_sim_coll_rec> collectives;
	int pp_stage = -1;               // --pp: this rank's stage ("pp_stage", also in "gpu")
	std::int64_t recv_delay_us = -1; // --pp: delay of each eager receive's kernel ("gpu")

	// A framework job's place (layout.h): {"tp", "pp", "dp", "ep", "accum", "layers",
	// "stage", "tp_rank", "dp_rank", "ep_rank"}; null (left out) for a flat job.
	nlohmann::json layout;
	// One entry per communicator of the rank, the world first: {"kind" (world, tp,
	// dp, pp, ep), "index" (the group's), "rank" (its rank in it), "nranks",
	// "members" (world ranks, in its rank order), "made" ("init_rank" or "split"),
	// "id" (hex of its unique id's first 16 bytes), "collectives" (as the top
	// level's, of this communicator)}. The top-level "collectives" are the world's.
	nlohmann::json communicators = nlohmann::json::array();
	// Every send and receive, newest ARGUS_SIM_P2P_LOG_MAX: {"op" (send, recv),
	// "comm" (kind), "comm_index", "peer" (world rank), "bytes", "call_ns",
	// "gpu_start_ns", "gpu_end_ns"} (CLOCK_MONOTONIC; GPU times 0 if never resolved).
	nlohmann::json p2p = nlohmann::json::array();
	// --jitter: {"pct", "seed", "factors": [[step, factor], ...] (newest 1024)}; null without.
	nlohmann::json jitter;
	// --eval-every / --checkpoint: {"kind" (eval, checkpoint), "step" (after it),
	// "ms", "start", "end" (CLOCK_REALTIME unix seconds)}, newest 1024.
	nlohmann::json pauses = nlohmann::json::array();

	nlohmann::json to_json() const;
};

// The driver API label of a symbol: without _ptsz/_ptds and _vN suffixes
// ("cuMemAlloc_v2" -> "cuMemAlloc", "cuStreamSynchronize_ptsz" -> "cuStreamSynchronize").
std::string cuda_base_api(std::string symbol);

// Writes `j` to `path` atomically. Returns false (errno set) on failure.
bool write_json_atomic(const std::string &path, const nlohmann::json &j);

} // namespace argus::sim
