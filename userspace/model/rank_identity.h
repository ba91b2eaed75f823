// Who a training process is: its job and rank, read from the environment that
// launchers (torchrun, DeepSpeed, mpirun, srun, argus-sim) set. The precedence is the
// contract's ("Rank identity" in CONTRACT.md); a rank still unknown here (-1)
// is filled in later from the rank passed to ncclCommInitRank*.
//
// What each launcher sets in every rank's environment:
//   torchrun   RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
//              TORCHELASTIC_RUN_ID ("none" unless --rdzv-id is given; a uuid under --standalone)
//   DeepSpeed  RANK LOCAL_RANK WORLD_SIZE LOCAL_SIZE MASTER_ADDR MASTER_PORT CROSS_RANK CROSS_SIZE
//              CUDA_VISIBLE_DEVICES (deepspeed/launcher/launch.py; no run id)
//   srun       SLURM_JOB_ID SLURM_STEP_ID SLURM_PROCID SLURM_LOCALID SLURM_NTASKS (SLURM_NPROCS)
//   Open MPI   OMPI_COMM_WORLD_RANK/_LOCAL_RANK/_SIZE/_LOCAL_SIZE, PMIX_NAMESPACE (PMIx-launched)
//   MPICH      PMI_RANK PMI_SIZE MPI_LOCALRANKID MPI_LOCALNRANKS (Hydra; no job id)
// mpirun/mpiexec inside a Slurm allocation start their per-node daemons with srun, so there
// SLURM_PROCID/SLURM_LOCALID/SLURM_NTASKS describe the daemon, not the rank: the MPI
// variables come first.
#pragma once
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace argus {

struct RankIdentity {
  std::string job_id;  // "" when no source is set
  int rank = -1;       // -1 while unknown
  int local_rank = -1;
  int world_size = -1;
  int local_world_size = -1;
  std::string job_source;   // the variable job_id came from, e.g. "ARGUS_JOB_ID",
                            // "SLURM_JOB_ID.SLURM_STEP_ID", or "MASTER_ADDR:MASTER_PORT"
                            // for the hashed fallback
  std::string rank_source;  // e.g. "RANK", "OMPI_COMM_WORLD_RANK"; "" when unknown
  // Raw (sanitize_env_value, kMaxVisibleDevicesLength) values; "" when unset or empty.
  std::string cuda_visible_devices;
  std::string nvidia_visible_devices;
};

// job_id:           ARGUS_JOB_ID, TORCHELASTIC_RUN_ID (unless torchrun's default "none"),
//                   SLURM_JOB_ID ("JOB.STEP" when SLURM_STEP_ID is set), PMIX_NAMESPACE,
//                   else short_hash("MASTER_ADDR:MASTER_PORT") when both are set.
// rank:             RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID
// local_rank:       LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID
// world_size:       WORLD_SIZE, OMPI_COMM_WORLD_SIZE, PMI_SIZE, SLURM_NTASKS, SLURM_NPROCS
// local_world_size: LOCAL_WORLD_SIZE, LOCAL_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS
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

// Printable ASCII only, at most max_length chars. A device list longer than that is cut
// after its last whole entry (at a ','), never inside one: a cut UUID would still read as
// a (wrong) UUID prefix.
inline constexpr size_t kMaxVisibleDevicesLength = 1024;  // 16 MIG ids and then some
std::string sanitize_env_value(std::string_view raw, size_t max_length);
std::string sanitize_device_list(std::string_view raw);

// One device as CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES name it.
struct GpuRef {
  enum class Form {
    Unknown,  // the environment does not say
    None,     // no GPU visible ("none", "-1", an empty CUDA_VISIBLE_DEVICES, ...)
    Index,    // "3": a CUDA (or, for NVIDIA_VISIBLE_DEVICES, the host's nvidia-smi) index
    Uuid,     // "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6" (CUDA also takes a prefix)
    Mig,      // "MIG-<uuid>", "MIG-GPU-<uuid>/1/0", or NVIDIA_VISIBLE_DEVICES's "0:1"
  };
  Form form = Form::Unknown;
  int index = -1;  // Form::Index
  std::string id;  // Form::Uuid, Form::Mig: the entry as written
  bool operator==(const GpuRef&) const = default;
};

// The entries of a device list in order, trimmed, up to the first invalid one (CUDA
// stops there too): "0,1,x,3" gives 0 and 1. "N:M" (a MIG device by GPU and instance
// index) is accepted only where allow_mig_pair is set (NVIDIA_VISIBLE_DEVICES).
std::vector<GpuRef> parse_device_list(std::string_view list, bool allow_mig_pair = false);

// The GPU one rank uses, in host terms where possible:
//  - NVIDIA_VISIBLE_DEVICES (the container runtime): "none" means no GPU; "all", "void"
//    and unset leave the host's GPUs as they are; a list is what the container sees, in
//    order (CUDA index i inside the container is entry i); garbage (a path, as with the
//    device plugin's volume-mounts strategy) makes the GPU unknown.
//  - CUDA_VISIBLE_DEVICES (nullopt when unset; set but empty means no GPU): its entry
//    LOCAL_RANK when it lists several, its only entry when it lists one (one GPU per
//    process, as many pods and torchrun's virtual local rank have); an index there is
//    looked up in NVIDIA_VISIBLE_DEVICES's list when there is one.
//  - Neither narrowing anything: GPU LOCAL_RANK (the usual cuda:LOCAL_RANK), else unknown.
// Indexes assume CUDA numbers GPUs as nvidia-smi does (CUDA_DEVICE_ORDER=PCI_BUS_ID).
GpuRef rank_gpu(std::optional<std::string_view> cuda_visible_devices,
                std::optional<std::string_view> nvidia_visible_devices, int local_rank);
// The same from stored values, where "" stands for unset.
GpuRef rank_gpu_from_strings(const std::string& cuda_visible_devices, const std::string& nvidia_visible_devices,
                             int local_rank);

}  // namespace argus
