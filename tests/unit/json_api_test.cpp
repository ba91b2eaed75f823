// GET /api/v1/ranks document: fields, nulls, ordering, robustness.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "exporters/json_api.h"

namespace argus {
namespace {

using nlohmann::json;

RankSnapshot rank(int pid, std::string job, int r) {
  RankSnapshot s;
  s.pid = pid;
  s.comm = "python3";
  s.job_id = std::move(job);
  s.rank = r;
  s.node = "n1";
  return s;
}

Snapshot make_snapshot() {
  Snapshot s;
  s.agent.version = "0.1.0";
  s.agent.node = "n1";
  s.agent.probes = "deep";
  s.agent.window_seconds = 10;
  s.agent.tracked_processes = 5;

  RankSnapshot a1 = rank(11, "a", 1);
  a1.local_rank = 1;
  a1.world_size = 4;
  a1.local_world_size = 2;
  a1.identity_source = "env:RANK";
  a1.first_seen_unix = 1700000000.5;
  a1.nccl["all_reduce"] = {10, 4096, 1'500'000'000};
  a1.nccl_groups = {6, 9, 5, 250'000'000};
  ProcessGroupInfo pg;
  pg.backend = 0xb0;
  pg.backend_kind = "gloo";
  pg.rank = 1;
  pg.size = 4;
  pg.name = "0";
  pg.desc = "default_pg";
  pg.comm_id = "j/pg:0";
  a1.process_groups = {pg};
  a1.process_group_calls[{"default_pg", "gloo", "all_reduce"}] = 390;
  a1.process_group_calls[{"unnamed", "gloo", "broadcast"}] = 4;  // another backend's: not this group's
  a1.sync["cuStreamSynchronize"] = {5, 250'000'000};
  a1.launches_counted = true;
  a1.kernel_launches = 777;
  a1.launch_timing.count = 5;
  a1.launch_timing.ns = 250'000;
  a1.launch_timing.log2_buckets = {{16, 5}};
  a1.memcpy["dtoh"] = {15, 960};
  a1.cuda_errors[{"cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY"}] = 3;
  a1.nccl_errors[{"ncclAllReduce", "ncclSystemError"}] = 1;
  a1.collective_wait_ratio = 0.375;
  a1.libraries = {"/usr/lib/libnccl.so.2", "/usr/lib/libcuda.so.1"};
  a1.python_gc.present = true;
  a1.python_gc.version = "3.11.2";
  a1.python_gc.anchor = "usdt";
  a1.python_gc.collections = {120, 11, 3};
  a1.python_gc.timed = 40;
  a1.python_gc.ns = 250'000'000;
  a1.python_gc.window_seconds = 0.125;
  a1.python_gc.window_pauses = 9;
  a1.python_gc.window_max_pause_seconds = 0.0625;

  RankSnapshot a0 = rank(12, "a", 0);
  a0.exited = true;
  a0.exit_reason = ExitReason::kSignal;
  a0.exit_code = 9;
  a0.exited_at_unix = 1700000100.25;

  RankSnapshot b0 = rank(5, "b", 0);
  RankSnapshot unknown = rank(3, "", -1);
  unknown.comm = "py\xff\xfethon";  // not UTF-8: must not make the dump throw
  RankSnapshot job_only = rank(4, "a", -1);

  s.ranks = {unknown, b0, a1, job_only, a0};
  return s;
}

TEST(JsonApi, RoundTripsThroughNlohmann) {
  json doc = json::parse(render_ranks_json(make_snapshot()));
  EXPECT_EQ(doc["node"], "n1");
  EXPECT_EQ(doc["version"], "0.1.0");
  EXPECT_EQ(doc["probes"], "deep");
  EXPECT_EQ(doc["tracked_processes"], 5);
  ASSERT_TRUE(doc["ranks"].is_array());
  ASSERT_EQ(doc["ranks"].size(), 5u);

  const json& a1 = doc["ranks"][1];
  EXPECT_EQ(a1["pid"], 11);
  EXPECT_EQ(a1["job_id"], "a");
  EXPECT_EQ(a1["rank"], 1);
  EXPECT_EQ(a1["local_rank"], 1);
  EXPECT_EQ(a1["world_size"], 4);
  EXPECT_EQ(a1["local_world_size"], 2);
  EXPECT_EQ(a1["node"], "n1");
  EXPECT_EQ(a1["comm"], "python3");
  EXPECT_EQ(a1["state"], "running");
  EXPECT_TRUE(a1["exit_reason"].is_null());
  EXPECT_TRUE(a1["exit_cause"].is_null());
  EXPECT_TRUE(a1["exit_code"].is_null());
  EXPECT_TRUE(a1["exited_at"].is_null());
  EXPECT_EQ(a1["identity_source"], "env:RANK");
  EXPECT_DOUBLE_EQ(a1["first_seen"].get<double>(), 1700000000.5);
  EXPECT_DOUBLE_EQ(a1["collective_wait_ratio"].get<double>(), 0.375);
  EXPECT_EQ(a1["nccl"]["all_reduce"]["calls"], 10);
  EXPECT_EQ(a1["nccl"]["all_reduce"]["bytes"], 4096);
  EXPECT_DOUBLE_EQ(a1["nccl"]["all_reduce"]["wait_seconds"].get<double>(), 1.5);
  EXPECT_EQ(a1["nccl_groups"], (json{{"ended", 6}, {"operations", 9}, {"timed", 5}, {"wait_seconds", 0.25}}));
  ASSERT_EQ(a1["process_groups"].size(), 1u);
  EXPECT_EQ(a1["process_groups"][0], (json{{"group", "default_pg"},
                                           {"name", "0"},
                                           {"desc", "default_pg"},
                                           {"backend", "gloo"},
                                           {"rank", 1},
                                           {"size", 4},
                                           {"comm", "j/pg:0"},
                                           {"nccl_comm", nullptr},
                                           {"members", {1}},
                                           {"calls", {{"all_reduce", 390}}}}));
  EXPECT_EQ(a1["cuda"]["sync"]["cuStreamSynchronize"]["calls"], 5);
  EXPECT_DOUBLE_EQ(a1["cuda"]["sync"]["cuStreamSynchronize"]["wait_seconds"].get<double>(), 0.25);
  EXPECT_EQ(a1["cuda"]["kernel_launches"], 777);
  EXPECT_EQ(a1["cuda"]["launch_timing"],
            json::parse(R"({"count":5,"seconds":0.00025,"log2_buckets_ns":{"65536":5}})"));
  // Every direction is listed, zero when no copy was made.
  EXPECT_EQ(a1["cuda"]["memcpy"], json::parse(R"({"htod":{"calls":0,"bytes":0},"dtoh":{"calls":15,"bytes":960},
                                                   "dtod":{"calls":0,"bytes":0}})"));
  EXPECT_EQ(a1["cuda"]["errors"], json::parse(R"([{"api":"cuMemAlloc","code":"CUDA_ERROR_OUT_OF_MEMORY","count":3}])"));
  EXPECT_EQ(a1["nccl_errors"], json::parse(R"([{"api":"ncclAllReduce","code":"ncclSystemError","count":1}])"));
  EXPECT_EQ(a1["libraries"], json::parse(R"(["/usr/lib/libnccl.so.2","/usr/lib/libcuda.so.1"])"));
  EXPECT_EQ(a1["python"], json::parse(R"({"version":"3.11.2","gc_anchor":"usdt","gc_collections":[120,11,3],
                                          "gc_seconds":0.25,"gc_pauses":40,"gc_window_seconds":0.125,
                                          "gc_window_pauses":9,"gc_window_max_pause_seconds":0.0625})"));
}

TEST(JsonApi, NullsForUnknownFields) {
  json doc = json::parse(render_ranks_json(make_snapshot()));
  const json& a0 = doc["ranks"][0];
  EXPECT_EQ(a0["state"], "exited");
  EXPECT_EQ(a0["exit_reason"], "signal");
  EXPECT_EQ(a0["exit_code"], 9);
  EXPECT_EQ(a0["exit_cause"]["signal_name"], "SIGKILL");
  EXPECT_TRUE(a0["exit_cause"]["sender"].is_null());  // not seen
  EXPECT_DOUBLE_EQ(a0["exited_at"].get<double>(), 1700000100.25);
  EXPECT_TRUE(a0["local_rank"].is_null());
  EXPECT_TRUE(a0["world_size"].is_null());
  EXPECT_TRUE(a0["local_world_size"].is_null());
  EXPECT_TRUE(a0["identity_source"].is_null());
  EXPECT_TRUE(a0["cuda"]["kernel_launches"].is_null()) << "not counted -> null, not 0";
  EXPECT_TRUE(a0["cuda"]["launch_timing"].is_null()) << "not timed -> null";
  EXPECT_EQ(a0["nccl"], json::object());
  EXPECT_EQ(a0["cuda"]["sync"], json::object());
  EXPECT_EQ(a0["cuda"]["errors"], json::array());
  EXPECT_EQ(a0["nccl_errors"], json::array());
  EXPECT_EQ(a0["libraries"], json::array());
  EXPECT_TRUE(a0["python"].is_null()) << "not Python -> null";

  const json& unknown = doc["ranks"][4];
  EXPECT_EQ(unknown["pid"], 3);
  EXPECT_TRUE(unknown["job_id"].is_null());
  EXPECT_TRUE(unknown["rank"].is_null());
  EXPECT_EQ(unknown["comm"], "py\xEF\xBF\xBD\xEF\xBF\xBDthon");  // bad bytes became U+FFFD
}

// The kernel layer's CPU view: null when neither the probe nor a cpu.stat
// follows the rank, else totals, window shares, stealers and the cgroup's quota.
TEST(JsonApi, OffCpuObject) {
  Snapshot s;
  RankSnapshot r = rank(9, "k", 0);
  s.ranks.push_back(r);
  r.pid = 10;
  r.rank = 1;
  r.offcpu.present = true;
  r.offcpu.offcpu_ns = {2'000'000'000, 0, 0, 500'000'000, 0};
  r.offcpu.oncpu_ns = 1'000'000'000;
  r.offcpu.window_offcpu_share = {0.4, 0, 0, 0.1, 0};
  r.offcpu.window_oncpu_share = 0.5;
  r.offcpu.window_span_seconds = 10;
  CpuStealer st;
  st.pid = 812;
  st.comm = "stress-ng";
  st.cgroup = "/noisy";
  st.seconds = 3.5;
  r.offcpu.stealers.push_back(st);
  r.cgroup_cpu.present = true;
  r.cgroup_cpu.path = "/job";
  r.cgroup_cpu.periods = 100;
  r.cgroup_cpu.throttled_periods = 30;
  r.cgroup_cpu.throttled_seconds = 2.25;
  r.cgroup_cpu.window_throttled_share = 0.2;
  s.ranks.push_back(r);
  json doc = json::parse(render_ranks_json(s));
  EXPECT_TRUE(doc["ranks"][0]["offcpu"].is_null());
  const json& o = doc["ranks"][1]["offcpu"];
  EXPECT_DOUBLE_EQ(o["seconds"]["runqueue"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(o["seconds"]["sleep"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(o["cpu_seconds"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(o["window_shares"]["runqueue"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(o["window_cpu_share"].get<double>(), 0.5);
  ASSERT_EQ(o["stealers"].size(), 1u);
  EXPECT_EQ(o["stealers"][0]["pid"], 812);
  EXPECT_EQ(o["stealers"][0]["comm"], "stress-ng");
  EXPECT_EQ(o["stealers"][0]["cgroup"], "/noisy");
  EXPECT_EQ(o["cgroup_cpu"]["throttled_periods"], 30);
  EXPECT_DOUBLE_EQ(o["cgroup_cpu"]["window_throttled_share"].get<double>(), 0.2);
}

TEST(JsonApi, SortedByJobRankPidUnidentifiedLast) {
  json doc = json::parse(render_ranks_json(make_snapshot()));
  std::vector<int> pids;
  for (const auto& r : doc["ranks"]) pids.push_back(r["pid"].get<int>());
  // a/0, a/1, a/(no rank), b/0, (no job)
  EXPECT_EQ(pids, (std::vector<int>{12, 11, 4, 5, 3}));
}

TEST(JsonApi, EmptySnapshot) {
  json doc = json::parse(render_ranks_json(Snapshot{}));
  EXPECT_EQ(doc["ranks"], json::array());
  EXPECT_EQ(doc["node"], "");
}

TEST(JsonApi, DumpJsonNeverThrows) {
  json j = {{"s", std::string("\xc3\x28")}};
  EXPECT_NO_THROW(dump_json(j));
  EXPECT_NO_THROW(dump_json(j, 2));
}

}  // namespace
TEST(JsonApi, GpuStepsDecodeTheSketches) {
  gpu::StepSketch sk;
  for (int i = 0; i < 9; ++i) sk.add(3, 100'000);  // 9 x 100 µs
  sk.add(4, 2'000'000);                            // 1 x 2 ms: the largest total first
  std::vector<gpu::StepSummary> steps = {{5'000'000'000ull, sk.encode()}, {6'000'000'000ull, {0xff}}};
  auto j = gpu_steps_json("job", 2, 77, steps, {{3, "gemm"}}, 1000.0);
  ASSERT_EQ(j["steps"].size(), 2u);
  const auto& s0 = j["steps"][0];
  EXPECT_DOUBLE_EQ(s0["start"].get<double>(), 1005.0);
  EXPECT_EQ(s0["bytes"], steps[0].sketch.size());
  ASSERT_EQ(s0["kernels"].size(), 2u);
  EXPECT_EQ(s0["kernels"][0]["name"], "kernel#4");
  EXPECT_EQ(s0["kernels"][1]["name"], "gemm");
  EXPECT_EQ(s0["kernels"][1]["count"], 9);
  EXPECT_NEAR(s0["kernels"][1]["p50_us"].get<double>(), 100, 100 * gpu::kSketchRelativeError);
  EXPECT_EQ(j["steps"][1]["decoded"], false);  // a corrupt sketch is said so, not guessed
  EXPECT_EQ(j["steps"][1]["kernels"].size(), 0u);
}

}  // namespace argus
