// The contract's rank identity rules: precedence of sources and what counts as garbage.
#include "rank_identity.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace argus
