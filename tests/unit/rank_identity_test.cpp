// The contract's rank identity rules: precedence of sources and what counts as garbage.
#include "userspace/model/rank_identity.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace argus {
namespace {

using Env = std::map<std::string, std::string>;

TEST(RankIdentity, TorchrunEnvironment) {
  auto id = identity_from_environ({{"RANK", "5"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "16"},
                                   {"LOCAL_WORLD_SIZE", "4"}, {"MASTER_ADDR", "10.0.0.1"},
                                   {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "run-42"}});
  EXPECT_EQ(id.job_id, "run-42");
  EXPECT_EQ(id.job_source, "TORCHELASTIC_RUN_ID");
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.rank_source, "RANK");
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.world_size, 16);
  EXPECT_EQ(id.local_world_size, 4);
}

TEST(RankIdentity, JobIdPrecedence) {
  Env env = {{"ARGUS_JOB_ID", "argus"}, {"TORCHELASTIC_RUN_ID", "te"}, {"SLURM_JOB_ID", "123"},
             {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}};
  EXPECT_EQ(identity_from_environ(env).job_id, "argus");
  env.erase("ARGUS_JOB_ID");
  EXPECT_EQ(identity_from_environ(env).job_id, "te");
  env.erase("TORCHELASTIC_RUN_ID");
  EXPECT_EQ(identity_from_environ(env).job_id, "123");
  EXPECT_EQ(identity_from_environ(env).job_source, "SLURM_JOB_ID");
  env.erase("SLURM_JOB_ID");
  auto id = identity_from_environ(env);
  EXPECT_EQ(id.job_id, short_hash("h:1"));
  EXPECT_EQ(id.job_source, "MASTER_ADDR:MASTER_PORT");
  env.erase("MASTER_PORT");  // both are needed for the hash
  id = identity_from_environ(env);
  EXPECT_EQ(id.job_id, "");
  EXPECT_EQ(id.job_source, "");
}

TEST(RankIdentity, EmptyOrUnprintableJobIdFallsThrough) {
  auto id = identity_from_environ({{"ARGUS_JOB_ID", ""}, {"TORCHELASTIC_RUN_ID", "\x01\x02\x7f"}, {"SLURM_JOB_ID", "77"}});
  EXPECT_EQ(id.job_id, "77");
  EXPECT_EQ(id.job_source, "SLURM_JOB_ID");
  id = identity_from_environ({{"MASTER_ADDR", ""}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(id.job_id, "");
}

TEST(RankIdentity, JobIdSanitised) {
  auto id = identity_from_environ({{"ARGUS_JOB_ID", "job\n42\t\xc3\xa9 x"}});
  EXPECT_EQ(id.job_id, "job42 x");
  EXPECT_EQ(sanitize_job_id(std::string(500, 'a')), std::string(kMaxJobIdLength, 'a'));
  EXPECT_EQ(sanitize_job_id(std::string(200, '\x01') + "ok"), "ok");  // the cap counts kept chars
  EXPECT_EQ(sanitize_job_id("a b~{}\"=,"), "a b~{}\"=,");             // printable punctuation stays
}

TEST(RankIdentity, RankPrecedence) {
  Env env = {{"RANK", "1"}, {"OMPI_COMM_WORLD_RANK", "2"}, {"SLURM_PROCID", "3"}};
  EXPECT_EQ(identity_from_environ(env).rank, 1);
  env.erase("RANK");
  EXPECT_EQ(identity_from_environ(env).rank, 2);
  EXPECT_EQ(identity_from_environ(env).rank_source, "OMPI_COMM_WORLD_RANK");
  env.erase("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(identity_from_environ(env).rank, 3);
  EXPECT_EQ(identity_from_environ(env).rank_source, "SLURM_PROCID");
  env.erase("SLURM_PROCID");
  auto id = identity_from_environ(env);
  EXPECT_EQ(id.rank, -1);  // filled later from ncclCommInitRank*
  EXPECT_EQ(id.rank_source, "");
}

TEST(RankIdentity, OtherFieldsPrecedence) {
  auto ompi = identity_from_environ({{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"SLURM_LOCALID", "9"},
                                     {"SLURM_NTASKS", "99"}});
  EXPECT_EQ(ompi.local_rank, 2);
  EXPECT_EQ(ompi.world_size, 8);
  EXPECT_EQ(ompi.local_world_size, 4);
  auto slurm = identity_from_environ({{"SLURM_JOB_ID", "5"}, {"SLURM_PROCID", "6"}, {"SLURM_LOCALID", "1"},
                                      {"SLURM_NTASKS", "12"}});
  EXPECT_EQ(slurm.job_id, "5");
  EXPECT_EQ(slurm.rank, 6);
  EXPECT_EQ(slurm.local_rank, 1);
  EXPECT_EQ(slurm.world_size, 12);
  EXPECT_EQ(slurm.local_world_size, -1);
}

TEST(RankIdentity, GarbageIntegersFallThrough) {
  for (const char* bad : {"3x", "-1", "", " 3", "3 ", "+3", "0x3", "2147483648", "99999999999999999999", "3.0", "٣"}) {
    auto id = identity_from_environ({{"RANK", bad}, {"OMPI_COMM_WORLD_RANK", "7"}});
    EXPECT_EQ(id.rank, 7) << "RANK=" << bad;
    EXPECT_EQ(id.rank_source, "OMPI_COMM_WORLD_RANK");
    EXPECT_EQ(identity_from_environ({{"WORLD_SIZE", bad}}).world_size, -1) << bad;
  }
  EXPECT_EQ(identity_from_environ({{"RANK", "0"}}).rank, 0);
  EXPECT_EQ(identity_from_environ({{"RANK", "2147483647"}}).rank, 2147483647);
  EXPECT_EQ(identity_from_environ({{"RANK", "007"}}).rank, 7);
  EXPECT_EQ(identity_from_environ({}).rank, -1);
}

TEST(RankIdentity, ShortHashIsStable) {
  std::string h = short_hash("10.0.0.1:29500");
  EXPECT_EQ(h.size(), 8u);
  EXPECT_EQ(h.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(h, short_hash("10.0.0.1:29500"));
  EXPECT_NE(h, short_hash("10.0.0.1:29501"));
  // Pinned values: a change here changes every hashed job_id in the field.
  EXPECT_EQ(short_hash(""), "4fd0bfc1");   // the FNV-1a 64 basis cbf29ce4 ^ 84222325
  EXPECT_EQ(short_hash("a"), "296230c0");  // FNV-1a 64 of "a" is af63dc4c8601ec8c
  EXPECT_EQ(h, "2a768a81");
}

// torchrun without --rdzv-id: TORCHELASTIC_RUN_ID=none says nothing about the job.
TEST(RankIdentity, TorchrunDefaultRunIdNoneIsAbsent) {
  Env env = {{"TORCHELASTIC_RUN_ID", "none"}, {"RANK", "0"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto id = identity_from_environ(env);
  EXPECT_EQ(id.job_id, short_hash("10.0.0.1:29500"));
  EXPECT_EQ(id.job_source, "MASTER_ADDR:MASTER_PORT");
  env["SLURM_JOB_ID"] = "4242";
  id = identity_from_environ(env);
  EXPECT_EQ(id.job_id, "4242");
  EXPECT_EQ(id.job_source, "SLURM_JOB_ID");
  // Only the exact default is torchrun's: other ids stay ids.
  EXPECT_EQ(identity_from_environ({{"TORCHELASTIC_RUN_ID", "None"}}).job_id, "None");
  EXPECT_EQ(identity_from_environ({{"TORCHELASTIC_RUN_ID", "none-1"}}).job_id, "none-1");
  EXPECT_EQ(identity_from_environ({{"TORCHELASTIC_RUN_ID", "none"}}).job_id, "");
}

// Two torchrun jobs on one node, neither with --rdzv-id: apart by their endpoint, and every
// rank of one job agrees.
TEST(RankIdentity, TwoTorchrunJobsOnOneNodeStayApart) {
  auto rank_of = [](const char* port, int rank) {
    return identity_from_environ({{"TORCHELASTIC_RUN_ID", "none"},
                                  {"RANK", std::to_string(rank)},
                                  {"LOCAL_RANK", std::to_string(rank)},
                                  {"WORLD_SIZE", "4"},
                                  {"LOCAL_WORLD_SIZE", "4"},
                                  {"MASTER_ADDR", "127.0.0.1"},
                                  {"MASTER_PORT", port}});
  };
  const std::string a = rank_of("29500", 0).job_id;
  const std::string b = rank_of("29501", 0).job_id;
  EXPECT_NE(a, b);
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(rank_of("29500", r).job_id, a);
    EXPECT_EQ(rank_of("29501", r).job_id, b);
  }
  // Nodes of one multi-node job all name the same master.
  auto other_node = identity_from_environ({{"TORCHELASTIC_RUN_ID", "none"}, {"RANK", "9"},
                                           {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(other_node.job_id, a);
}

TEST(RankIdentity, SlurmEnvironment) {
  Env env = {{"SLURM_JOB_ID", "12345"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "7"},
             {"SLURM_LOCALID", "3"},    {"SLURM_NTASKS", "16"}, {"SLURM_NPROCS", "16"}};
  auto id = identity_from_environ(env);
  EXPECT_EQ(id.job_id, "12345.0");
  EXPECT_EQ(id.job_source, "SLURM_JOB_ID.SLURM_STEP_ID");
  EXPECT_EQ(id.rank, 7);
  EXPECT_EQ(id.rank_source, "SLURM_PROCID");
  EXPECT_EQ(id.local_rank, 3);
  EXPECT_EQ(id.world_size, 16);
  env["SLURM_STEP_ID"] = "1";  // another step of the same allocation is another job
  EXPECT_EQ(identity_from_environ(env).job_id, "12345.1");
  env.erase("SLURM_STEP_ID");  // a batch script's own processes
  EXPECT_EQ(identity_from_environ(env).job_id, "12345");
  EXPECT_EQ(identity_from_environ(env).job_source, "SLURM_JOB_ID");
  env["SLURM_STEP_ID"] = "\x01";  // nothing printable: the job alone
  EXPECT_EQ(identity_from_environ(env).job_id, "12345");
  env.erase("SLURM_NTASKS");  // the old name
  EXPECT_EQ(identity_from_environ(env).world_size, 16);
  // A step without a job says nothing.
  EXPECT_EQ(identity_from_environ({{"SLURM_STEP_ID", "0"}}).job_id, "");
}

TEST(RankIdentity, OpenMpiEnvironment) {
  auto id = identity_from_environ({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                   {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_NODE_RANK", "1"}, {"PMIX_RANK", "5"},
                                   {"PMIX_NAMESPACE", "prterun-node1-81234@1"}});
  EXPECT_EQ(id.job_id, "prterun-node1-81234@1");
  EXPECT_EQ(id.job_source, "PMIX_NAMESPACE");
  EXPECT_EQ(id.rank, 5);
  EXPECT_EQ(id.rank_source, "OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.world_size, 8);
  EXPECT_EQ(id.local_world_size, 4);
}

// mpirun inside a Slurm allocation: its daemons are srun tasks (one per node), so the
// SLURM_* task variables describe the daemon; the MPI ones win.
TEST(RankIdentity, MpiUnderSlurmPrefersTheMpiVariables) {
  auto ompi = identity_from_environ({{"SLURM_JOB_ID", "900"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"},
                                     {"SLURM_LOCALID", "0"}, {"SLURM_NTASKS", "2"},
                                     {"OMPI_COMM_WORLD_RANK", "6"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                     {"OMPI_COMM_WORLD_SIZE", "8"}, {"PMIX_NAMESPACE", "3456237569"}});
  EXPECT_EQ(ompi.job_id, "900.0");  // Slurm's job id still comes before the MPI namespace
  EXPECT_EQ(ompi.rank, 6);
  EXPECT_EQ(ompi.local_rank, 2);
  EXPECT_EQ(ompi.world_size, 8);
  auto hydra = identity_from_environ({{"SLURM_JOB_ID", "901"}, {"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "0"},
                                      {"SLURM_NTASKS", "2"}, {"PMI_RANK", "6"}, {"PMI_SIZE", "8"},
                                      {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "4"}});
  EXPECT_EQ(hydra.rank, 6);
  EXPECT_EQ(hydra.rank_source, "PMI_RANK");
  EXPECT_EQ(hydra.local_rank, 2);
  EXPECT_EQ(hydra.world_size, 8);
  EXPECT_EQ(hydra.local_world_size, 4);
}

// MPICH's Hydra: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS, PMI_FD; no job id.
TEST(RankIdentity, MpichHydraEnvironment) {
  auto id = identity_from_environ({{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}, {"PMI_FD", "6"},
                                   {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}, {"PMI_HOSTNAME", "n1"}});
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.rank_source, "PMI_RANK");
  EXPECT_EQ(id.world_size, 4);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.local_world_size, 2);
  EXPECT_EQ(id.job_id, "");  // left to the NCCL communicator's root
}

// deepspeed/launcher/launch.py: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, MASTER_ADDR,
// MASTER_PORT, CROSS_RANK, CROSS_SIZE and the node's CUDA_VISIBLE_DEVICES; no run id.
TEST(RankIdentity, DeepSpeedLauncherEnvironment) {
  Env env = {{"RANK", "10"},        {"LOCAL_RANK", "2"},           {"WORLD_SIZE", "16"},
             {"LOCAL_SIZE", "8"},   {"MASTER_ADDR", "10.1.2.3"},   {"MASTER_PORT", "29500"},
             {"CROSS_RANK", "1"},   {"CROSS_SIZE", "2"},           {"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}};
  auto id = identity_from_environ(env);
  EXPECT_EQ(id.job_id, short_hash("10.1.2.3:29500"));
  EXPECT_EQ(id.rank, 10);
  EXPECT_EQ(id.local_rank, 2);
  EXPECT_EQ(id.world_size, 16);
  EXPECT_EQ(id.local_world_size, 8);
  EXPECT_EQ(id.cuda_visible_devices, "0,1,2,3,4,5,6,7");
  EXPECT_EQ(rank_gpu_from_strings(id.cuda_visible_devices, id.nvidia_visible_devices, id.local_rank).index, 2);
  env["LOCAL_WORLD_SIZE"] = "4";  // torchrun's name comes first
  EXPECT_EQ(identity_from_environ(env).local_world_size, 4);
}

TEST(RankIdentity, VisibleDevicesKeptSanitised) {
  auto id = identity_from_environ({{"CUDA_VISIBLE_DEVICES", "GPU-5e3c1b2a-1111\n"},
                                   {"NVIDIA_VISIBLE_DEVICES", "all"}});
  EXPECT_EQ(id.cuda_visible_devices, "GPU-5e3c1b2a-1111");
  EXPECT_EQ(id.nvidia_visible_devices, "all");
  EXPECT_EQ(identity_from_environ({{"CUDA_VISIBLE_DEVICES", ""}}).cuda_visible_devices, "");
  EXPECT_EQ(identity_from_environ({}).nvidia_visible_devices, "");
  // Huge: cut after the last whole entry, never inside a UUID.
  std::string uuids;
  const std::string one = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  for (int i = 0; i < 40; ++i) uuids += (i ? "," : "") + one;
  const std::string kept = identity_from_environ({{"CUDA_VISIBLE_DEVICES", uuids}}).cuda_visible_devices;
  EXPECT_LE(kept.size(), kMaxVisibleDevicesLength);
  EXPECT_EQ(kept.size() % (one.size() + 1), one.size());  // whole entries only
  EXPECT_EQ(parse_device_list(kept).size(), (kMaxVisibleDevicesLength + 1) / (one.size() + 1));
  EXPECT_EQ(sanitize_device_list(std::string(5000, '7')), "");  // one huge entry: nothing usable
  EXPECT_EQ(sanitize_device_list("0,1"), "0,1");
}

GpuRef index_ref(int i) {
  GpuRef g;
  g.form = GpuRef::Form::Index;
  g.index = i;
  return g;
}
GpuRef id_ref(GpuRef::Form form, std::string id) {
  GpuRef g;
  g.form = form;
  g.id = std::move(id);
  return g;
}
const GpuRef kUnknown{};
const GpuRef kNone = [] {
  GpuRef g;
  g.form = GpuRef::Form::None;
  return g;
}();

TEST(RankGpu, DeviceListForms) {
  using F = GpuRef::Form;
  const std::string u0 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  const std::string u1 = "GPU-5e3c1b2a-1111-2222-3333-444455556666";
  EXPECT_EQ(parse_device_list("0,1,2,3"), (std::vector<GpuRef>{index_ref(0), index_ref(1), index_ref(2), index_ref(3)}));
  EXPECT_EQ(parse_device_list(" 4 , 5 "), (std::vector<GpuRef>{index_ref(4), index_ref(5)}));
  EXPECT_EQ(parse_device_list(u0 + "," + u1), (std::vector<GpuRef>{id_ref(F::Uuid, u0), id_ref(F::Uuid, u1)}));
  EXPECT_EQ(parse_device_list("GPU-8932f937"), (std::vector<GpuRef>{id_ref(F::Uuid, "GPU-8932f937")}));  // a prefix
  EXPECT_EQ(parse_device_list("MIG-GPU-" + u0.substr(4) + "/1/0"),
            (std::vector<GpuRef>{id_ref(F::Mig, "MIG-GPU-" + u0.substr(4) + "/1/0")}));
  EXPECT_EQ(parse_device_list("MIG-c6fd4f4b-0f1a-5e3c-9a3f-0b1f5c2d6e7a"),
            (std::vector<GpuRef>{id_ref(F::Mig, "MIG-c6fd4f4b-0f1a-5e3c-9a3f-0b1f5c2d6e7a")}));
  // CUDA stops at the first invalid entry.
  EXPECT_EQ(parse_device_list("1,-1,2"), (std::vector<GpuRef>{index_ref(1)}));
  EXPECT_EQ(parse_device_list("2," + u0 + ",x,3"), (std::vector<GpuRef>{index_ref(2), id_ref(F::Uuid, u0)}));
  for (const char* bad : {"", ",", "-1", "x", "GPU-", "GPU-xyz", "MIG-", "gpu-1234", "1.5", "+1", "0x1",
                          "99999999999", "/var/run/nvidia-container-devices", "0:1"})
    EXPECT_TRUE(parse_device_list(bad).empty()) << bad;
  EXPECT_EQ(parse_device_list("0:1,1:0", true), (std::vector<GpuRef>{id_ref(F::Mig, "0:1"), id_ref(F::Mig, "1:0")}));
}

TEST(RankGpu, CudaVisibleDevicesByLocalRank) {
  using F = GpuRef::Form;
  const std::string u0 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  const std::string u1 = "GPU-5e3c1b2a-1111-2222-3333-444455556666";
  EXPECT_EQ(rank_gpu("4,5,6,7", std::nullopt, 2), index_ref(6));
  EXPECT_EQ(rank_gpu("5", std::nullopt, 3), index_ref(5));  // one GPU per process: that one
  EXPECT_EQ(rank_gpu("5", std::nullopt, -1), index_ref(5));
  EXPECT_EQ(rank_gpu("0,1", std::nullopt, 2), kUnknown);   // out of range
  EXPECT_EQ(rank_gpu("0,1", std::nullopt, -1), kUnknown);  // which one?
  EXPECT_EQ(rank_gpu(u0 + "," + u1, std::nullopt, 1), id_ref(F::Uuid, u1));
  EXPECT_EQ(rank_gpu(u0, std::nullopt, 5), id_ref(F::Uuid, u0));
  EXPECT_EQ(rank_gpu("MIG-c6fd4f4b-0f1a-5e3c-9a3f-0b1f5c2d6e7a", std::nullopt, 0),
            id_ref(F::Mig, "MIG-c6fd4f4b-0f1a-5e3c-9a3f-0b1f5c2d6e7a"));
  // Set but showing no device: CUDA sees none.
  for (const char* none : {"", "-1", "garbage", "NoDevFiles"}) EXPECT_EQ(rank_gpu(none, std::nullopt, 0), kNone) << none;
  // Nothing set: cuda:LOCAL_RANK.
  EXPECT_EQ(rank_gpu(std::nullopt, std::nullopt, 3), index_ref(3));
  EXPECT_EQ(rank_gpu(std::nullopt, std::nullopt, -1), kUnknown);
  // Stored strings: "" stands for unset.
  EXPECT_EQ(rank_gpu_from_strings("", "", 1), index_ref(1));
  EXPECT_EQ(rank_gpu_from_strings("2,3", "", 1), index_ref(3));
}

TEST(RankGpu, NvidiaVisibleDevices) {
  using F = GpuRef::Form;
  const std::string u0 = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  const std::string u1 = "GPU-5e3c1b2a-1111-2222-3333-444455556666";
  EXPECT_EQ(rank_gpu(std::nullopt, "none", 0), kNone);
  EXPECT_EQ(rank_gpu("0", "none", 0), kNone);
  EXPECT_EQ(rank_gpu(std::nullopt, "all", 2), index_ref(2));  // the host's GPUs, unnarrowed
  EXPECT_EQ(rank_gpu(std::nullopt, "void", 2), index_ref(2));
  EXPECT_EQ(rank_gpu("1,3", "all", 1), index_ref(3));
  // A pod with one GPU, named by UUID (the device plugin's way) or host index.
  EXPECT_EQ(rank_gpu(std::nullopt, u1, 0), id_ref(F::Uuid, u1));
  EXPECT_EQ(rank_gpu(std::nullopt, "5", 0), index_ref(5));
  // Several: CUDA index i in the container is entry i.
  EXPECT_EQ(rank_gpu(std::nullopt, "4,5,6,7", 1), index_ref(5));
  EXPECT_EQ(rank_gpu("1", "4,5,6,7", 0), index_ref(5));
  EXPECT_EQ(rank_gpu("0,1", u0 + "," + u1, 1), id_ref(F::Uuid, u1));
  EXPECT_EQ(rank_gpu("3", "4,5", 0), kUnknown);  // beyond what the container has
  EXPECT_EQ(rank_gpu(u0, "4,5", 0), id_ref(F::Uuid, u0));  // a UUID needs no mapping
  EXPECT_EQ(rank_gpu(std::nullopt, "0:1,0:2", 1), id_ref(F::Mig, "0:2"));
  // Not a list we can read (the device plugin's volume-mounts strategy): unknown.
  EXPECT_EQ(rank_gpu(std::nullopt, "/var/run/nvidia-container-devices", 0), kUnknown);
  EXPECT_EQ(rank_gpu("0", "/var/run/nvidia-container-devices", 0), kUnknown);
}

}  // namespace
}  // namespace argus
