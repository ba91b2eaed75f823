// Configuration of one simulated training job: what the launcher parses from
// its flags and hands, whole, to every rank process (as JSON in the
// ARGUS_SIM_WORKER_CONFIG environment variable). Per-rank behaviour (faults) is
// looked up by rank with plan_for(), so a new fault is: a field here, a flag in
// parse_cli(), a line in to_json/from_json, a field in RankPlan, and the worker
// acting on it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "workload.h"

namespace argus::sim {

inline constexpr int kMaxRanks = 1024;
// --host-cpu default: enough CPU work per step that a rank sharing its CPU with
// a hog is late by more than the detectors' margin, cheap enough for 8 ranks on
// 2 cores.
inline constexpr double kDefaultHostCpu = 0.1;
inline constexpr const char *kWorkerFlag = "--worker";
inline constexpr const char *kWorkerConfigEnv = "ARGUS_SIM_WORKER_CONFIG";
inline constexpr const char *kNcclIdEnv = "ARGUS_SIM_NCCL_ID";
// Each rank's simulated node, "node-<i>" (--nodes): an agent per simulated node
// tracks only the processes whose environment carries its node's value.
inline constexpr const char *kNodeEnv = "ARGUS_SIM_NODE";
// The launcher's pid: a rank that hangs (--hang) tells it with SIGUSR1.
inline constexpr const char *kLauncherPidEnv = "ARGUS_SIM_LAUNCHER_PID";

// The driver API family a rank's caching allocator grows its pool by (--mem-api):
// cuMemAlloc/cuMemFree (PyTorch's native allocator), the stream-ordered
// cuMemAllocFromPoolAsync/cuMemFreeAsync (its cudaMallocAsync backend), or the
// virtual memory calls of its expandable segments (cuMemCreate/cuMemMap).
enum class MemApi { Classic, Async, Vmm };
const char *mem_api_name(MemApi api); // "classic", "async", "vmm"
std::optional<MemApi> mem_api_from_name(const std::string &name);
// --gpu-mem-mb: the emulated capacity. At least what a rank's init allocations
// (4.5 GiB of parameters, gradients and communication buffer) and its pool's first
// steps (240 MiB) take, with room to spare.
inline constexpr int kDefaultGpuMemMb = 81920; // an 80 GB GPU (sim_gpu.h)
inline constexpr int kMinGpuMemMb = 5120;
inline constexpr int kMaxGpuMemMb = 16 << 20; // 16 TiB

struct SimConfig {
	int ranks = 8;
	std::int64_t steps = 100; // 0 = until SIGINT/SIGTERM
	int step_ms = 100;        // host compute per step
	// Share of the host compute burnt on CPU (thread CPU time), the rest slept:
	// like a real rank's Python dispatch, a rank that gets less CPU (a noisy
	// neighbour, a CPU quota) takes longer. 0 = pure sleep pacing.
	double host_cpu = kDefaultHostCpu;
	std::string job_id;       // default "sim-<launcher pid>"
	std::map<int, double> stragglers; // rank -> host compute factor (>= 1)
	std::map<int, std::int64_t> straggler_from; // rank -> first slow step (absent: 0)
	std::map<int, double> gpu_slow; // rank -> compute kernel duration factor (> 1; host on time)
	std::map<int, std::int64_t> gpu_slow_from; // rank -> first GPU-slow step (absent: 0)
	// Pipeline parallelism (--pp): 0 = off, else N >= 2 stages of ranks/N ranks each
	// (stage(r) = r / (ranks/N)); bubbles = stage -> extra receive delay in ms.
	int pp = 0;
	std::map<int, int> bubbles;
	// The framework-style job (layout.h): --tp, --ep, --accum or --layers given.
	// Ranks laid out as Megatron does (TP fastest, then DP, then PP), one
	// communicator per group, a 1F1B pipeline of `accum` micro-batches per step.
	// Without it (--pp alone included) a step is the flat one of workload.h.
	bool framework = false;
	int tp = 1;
	int ep = 1;
	int accum = 1;
	int layers = 4; // per pipeline stage
	// --jitter PCT: compute scaled by 1 + PCT/100 * u per rank and step (layout.h).
	double jitter_pct = 0;
	// --eval-every K:MS: every rank pauses MS ms after every K-th step (0 = never).
	int eval_every = 0;
	int eval_ms = 0;
	std::map<int, std::pair<int, int>> checkpoints; // --checkpoint: rank -> (every steps, ms)
	std::map<int, std::int64_t> hangs; // rank -> step it blocks at, before its first collective
	std::map<int, std::int64_t> exits; // rank -> step it exits(1) at, before its first collective
	std::map<int, std::int64_t> gpu_hangs; // rank -> step from which its GPU never finishes a kernel
	int nodes = 1;                     // simulated nodes; ranks in contiguous blocks
	double hang_timeout_s = 0;         // launcher: stop the job S s after a hang/exit; 0 = never
	bool no_abort = false;             // a rank that dies does not abort the communicator
	std::map<int, int> cuda_errors;   // rank -> failing cuMemAlloc_v2 calls after init
	// GPU memory (worker_memory.cpp): the family the ranks' caching allocators grow
	// their pools by, the emulated capacity (ARGUS_SIM_GPU_MEM_MB of every rank), and
	// the faults: a pool that grows every step, a request that does not fit.
	MemApi mem_api = MemApi::Classic;
	int gpu_mem_mb = kDefaultGpuMemMb;
	std::map<int, std::uint64_t> mem_leaks; // rank -> bytes its pool grows by every step
	std::map<int, std::int64_t> mem_ooms;   // rank -> step it runs out of memory at
	std::string out_dir;              // truth files; empty = none
	std::string nccl_lib;             // resolved by the launcher
	std::string cuda_lib;
	int init_ms = 1000;
	int kernels_per_step = 16;
	int kernel_names = kKernelCount; // --kernel-names: distinct kernels a step cycles through
	// NCCL semantics (--nccl-mode): async (real NCCL: a collective only enqueues
	// its kernel; peers wait on the GPU and the host sees it in its next
	// synchronize) or blocking (the call returns once every rank called it, as Gloo).
	bool nccl_async = true;
	bool gpu_fold = false;         // --gpu-fold: the emulated GPU folds compute kernels (gpu/gpu_fold.h)
	bool sync_before_coll = false; // cuStreamSynchronize right before the step's collectives (loss.item())
	int buckets = 0;               // DDP-like gradient all-reduces issued during backward, per step
	int sync_every = 1;            // the step-end synchronize only every K steps (the host runs ahead)
	int master_port = 29500;
	bool quiet = false;
	// InfiniBand fixture (sim/ib_fixture.h): laid out under ib_fixture and evolved with
	// the job's traffic; degrade = "DEV:PORT:KIND[@SECONDS]" faults; ib_only = no rank
	// processes, the traffic of `ranks` ranks doing `steps` steps of step_ms synthesized.
	std::string ib_fixture;
	std::vector<std::string> degrade;
	bool ib_only = false;
};

// What one rank does differently from the others.
struct RankPlan {
	double straggler_factor = 1.0;
	std::int64_t straggler_from_step = 0; // slow from this step on (factor > 1 only)
	int cuda_errors = 0;
	std::int64_t hang_step = -1; // -1: never
	std::int64_t exit_step = -1; // -1: never
	std::int64_t gpu_hang_step = -1; // -1: never; else its kernels from this step on never end
	double gpu_slow_factor = 1.0;        // compute kernels x factor (--gpu-slow)
	std::int64_t gpu_slow_from_step = 0; // from this step on (factor > 1 only)
	int pp_stage = -1;                   // -1: no pipeline (--pp)
	int pp_send_to = -1;                 // the next stage's rank (-1: last stage / no pp)
	int pp_recv_from = -1;               // the previous stage's rank (-1: first stage / no pp)
	int bubble_ms = 0;                   // --bubble of this rank's stage
	std::int64_t recv_delay_us = 0;      // pp_recv_delay_us()
	std::uint64_t mem_leak_bytes = 0;    // --mem-leak: per step, from step 0 (0: none)
	std::int64_t mem_oom_step = -1;      // --mem-oom: -1 never
};

RankPlan plan_for(const SimConfig &cfg, int rank);

// --pp: the pipeline stage of `rank` (r / (ranks / pp)), -1 without --pp. The
// same as the framework layout's stage (layout.h), whatever --tp.
int pp_stage_of(const SimConfig &cfg, int rank);
// --pp: the delay before each eager receive's kernel of `rank` starts, in us:
// for a stage > 0, the natural pipeline fill (10% of step_ms) plus its stage's
// --bubble; 0 for stage 0 and without --pp. In a framework job the 1F1B schedule
// makes the fill itself: only the stage's --bubble, before every receive. The
// launcher hands it to the rank in ARGUS_SIM_PP_RECV_DELAY_US (sim_gpu.h).
std::int64_t pp_recv_delay_us(const SimConfig &cfg, int rank);
inline constexpr double kPpFillShare = 0.1;

// --nodes: node i holds ranks [i*k, min((i+1)*k, ranks)) with k = ceil(ranks/nodes),
// so when nodes does not divide ranks the last node has fewer (parse_cli rejects
// a count that would leave a node empty).
int ranks_per_node(const SimConfig &cfg);
int node_of(const SimConfig &cfg, int rank);
int local_rank_of(const SimConfig &cfg, int rank);
int local_world_size_of(const SimConfig &cfg, int node);
std::string node_name(int node); // "node-<i>"

nlohmann::json to_json(const SimConfig &cfg);
SimConfig config_from_json(const nlohmann::json &j); // throws on malformed input

// A bad command line: the message is one line, without the program name.
struct UsageError : std::runtime_error {
	using std::runtime_error::runtime_error;
};

// Parses the launcher's flags. Returns std::nullopt when --help was printed.
// Throws UsageError on any bad flag or value. Library paths are left empty when
// not given (the launcher resolves the defaults).
std::optional<SimConfig> parse_cli(int argc, char **argv);

} // namespace argus::sim
