// Worker mode of argus-sim: one rank of the simulated training job. The launcher
// execs `argus-sim --worker` with the rank's torchrun-style environment (RANK,
// WORLD_SIZE, ...), the job's unique id in ARGUS_SIM_NCCL_ID and the whole
// SimConfig as JSON in ARGUS_SIM_WORKER_CONFIG.
#pragma once

namespace argus::sim {

// Exit codes of a rank process.
inline constexpr int kWorkerOk = 0;          // all steps done, or stopped by SIGTERM/SIGINT
inline constexpr int kWorkerBadEnv = 2;      // missing/invalid environment or config
inline constexpr int kWorkerLoadFailed = 3;  // dlopen/dlsym of a library failed
inline constexpr int kWorkerNcclFailed = 4;  // a NCCL call failed (aborted, timed out)
inline constexpr int kWorkerCudaFailed = 5;  // CUDA setup failed
inline constexpr int kWorkerInjectedExit = 1; // --exit RANK:STEP fired, or out of GPU memory (status "oom")

int worker_main();

} // namespace argus::sim
