// Who a training process is: its job and rank, read from the environment that
// launchers (torchrun, mpirun, srun, argus-sim) set. The precedence is the
// contract's ("Rank identity" in CONTRACT.md); a rank still unknown here (-1)
// is filled in later from the rank passed to ncclCommInitRank*.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace argus {

struct RankIdentity {
  std::string job_id;  // "" when no source is set
  int rank = -1;       // -1 while unknown
  int local_rank = -1;
  int world_size = -1;
  int local_world_size = -1;
  std::string job_source;   // the variable job_id came from, e.g. "ARGUS_JOB_ID",
                            // or "MASTER_ADDR:MASTER_PORT" for the hashed fallback
  std::string rank_source;  // e.g. "RANK", "OMPI_COMM_WORLD_RANK"; "" when unknown
};

// job_id:           ARGUS_JOB_ID, TORCHELASTIC_RUN_ID, SLURM_JOB_ID, else
//                   short_hash("MASTER_ADDR:MASTER_PORT") when both are set.
// rank:             RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID
// local_rank:       LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID
// world_size:       WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS
// local_world_size: LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE
// An empty or unusable value is skipped and the next source tried: integers
// must be plain decimal in [0, 2^31) ("3x", "-1", " 3" are unusable), a job id
// must be non-empty after sanitize_job_id().
RankIdentity identity_from_environ(const std::map<std::string, std::string>& env);

// 8 lowercase hex digits: FNV-1a 64 folded to 32 bits. Stable across builds and
// hosts, so every rank of a job derives the same id from MASTER_ADDR:MASTER_PORT.
std::string short_hash(std::string_view s);

// A job id becomes a Prometheus label value. Any UTF-8 is legal there, but
// control characters and arbitrary bytes from a process's environment only
// break dashboards and logs, and an unbounded value bloats every series; so
// keep printable ASCII (0x20-0x7e) only, dropping the rest, and cut to 128 chars.
inline constexpr size_t kMaxJobIdLength = 128;
std::string sanitize_job_id(std::string_view raw);

}  // namespace argus
