// The GPU layer end to end, as root: the sim's emulated GPU (and the real
// CUPTI injection library) hand GPU activity records to the agent through the
// USDT probes; the agent's figures are compared with what the producers
// recorded, and the injected GPU faults must be named.
#include <algorithm>
#include <set>
#include <sstream>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

std::set<int> ranks_of(const json& events) {
  std::set<int> out;
  for (const auto& e : events) out.insert(e.at("rank").get<int>());
  return out;
}

// Polls until some event of this kind names a rank of the job (or timeout).
json wait_events(const Agent& agent, const std::string& kind, const std::string& job, std::chrono::seconds timeout,
                 size_t want = 1) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  json evs = json::array();
  while (std::chrono::steady_clock::now() < deadline) {
    evs = events_of(agent, kind, job);
    if (evs.size() >= want) break;
    std::this_thread::sleep_for(250ms);
  }
  return evs;
}

// Every GPU figure the agent keeps equals what the sim's libcuda sent through
// the probe, to the record and to the nanosecond.
std::string diff_gpu(const json& truth, const json& agent) {
  std::ostringstream d;
  const json& t = truth.at("gpu");
  const json g = agent.value("gpu", json());
  if (g.is_null()) return " no gpu figures";
  auto cmp_u = [&](const char* what, uint64_t got, uint64_t want) {
    if (got != want) d << " " << what << " " << got << "!=" << want;
  };
  cmp_u("records", g.value("records", 0ull), t.at("records").get<uint64_t>());
  cmp_u("kernels", g.value("kernels", 0ull), t.at("kernels").get<uint64_t>());
  cmp_u("lost", g.value("records_lost", 0ull), t.at("dropped").get<uint64_t>());
  auto cmp_s = [&](const char* what, double got, uint64_t want_ns) {
    if (got != static_cast<double>(want_ns) / 1e9) d << " " << what << " " << got << "!=" << want_ns << "ns";
  };
  cmp_s("kernel_seconds", g.value("kernel_seconds", -1.0), t.at("kernel_ns").get<uint64_t>());
  cmp_s("nccl_kernel_seconds", g.value("nccl_kernel_seconds", -1.0), t.at("nccl_kernel_ns").get<uint64_t>());
  const json mb = g.value("memcpy_bytes", json::object());
  for (const auto& [dir, n] : t.at("memcpy_bytes").items())
    if (n.get<uint64_t>() != 0) cmp_u(("memcpy_bytes." + dir).c_str(), mb.value(dir, 0ull), n.get<uint64_t>());
  return d.str();
}

TEST(GpuLayer, EveryRecordTheSimSentIsCountedExactly) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpu-exact");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  auto r = run_command(sim_args(out, "gpu-exact", 4, 40), dir, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 4u);
  for (const auto& [rank, t] : truth) ASSERT_GT(t.at("gpu").at("records").get<uint64_t>(), 0u) << rank;
  EXPECT_EQ(wait_for_truth(agent, truth, diff_gpu, 10s), "") << agent.log();
  // The same figures on /metrics, and nothing lost on the way.
  const std::string m = agent.get_text("/metrics");
  const auto& t0 = truth.at(0);
  const std::map<std::string, std::string> r0 = {{"job_id", "gpu-exact"}, {"rank", "0"}};
  EXPECT_EQ(metric_value(m, "argus_gpu_records_total", {{"job_id", "gpu-exact"}, {"rank", "0"}, {"kind", "kernel"}}),
            static_cast<double>(t0.at("gpu").at("kernels").get<uint64_t>()));
  EXPECT_EQ(metric_value(m, "argus_nccl_kernel_seconds_total", r0),
            static_cast<double>(t0.at("gpu").at("nccl_kernel_ns").get<uint64_t>()) / 1e9);
  EXPECT_EQ(metric_value(m, "argus_agent_events_lost_total", {{"source", "gpu"}}), 0);
  EXPECT_EQ(metric_value(m, "argus_agent_bpf_errors_total", {{"error", "gpu_batch_truncated"}}), 0);
  EXPECT_GT(metric_value(m, "argus_gpu_step_summary_bytes", r0), 0);

  // The per-step summaries: every step runs each of the sim's 4 compute kernels
  // kernels_per_step / 4 = 4 times (workload.h).
  auto steps = agent.get_json("/api/v1/ranks/gpu-exact/0/gpu-steps?last=30");
  ASSERT_TRUE(steps.has_value());
  ASSERT_GE((*steps)["steps"].size(), 10u) << steps->dump();  // of 40 (the first ones before the period is known may merge)
  std::vector<uint64_t> fwd;
  for (const auto& st : (*steps)["steps"]) {
    EXPECT_TRUE(st["decoded"].get<bool>());
    for (const auto& k : st["kernels"])
      if (k["name"] == "sim_gemm_fwd") fwd.push_back(k["count"].get<uint64_t>());
  }
  ASSERT_FALSE(fwd.empty());
  std::sort(fwd.begin(), fwd.end());
  EXPECT_EQ(fwd[fwd.size() / 2], 4u) << steps->dump();
  auto bad = cli::http_get(agent.url("/api/v1/ranks/gpu-exact/0/gpu-steps?last=0"), 5s);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
  auto none = cli::http_get(agent.url("/api/v1/ranks/gpu-exact/99/gpu-steps"), 5s);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->status, 404);
}

// fold: the sim's GPU folds its compute kernels as libargus-cupti.so does by default.
void slow_gpu_named_alone(const std::string& job, bool fold) {
  const auto dir = make_temp_dir(job);
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const int slow = 5;
  std::vector<std::string> args = {bin("argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", "60",
                                   "--init-ms", "1500", "--job-id", job, "--gpu-slow", std::to_string(slow) + ":3",
                                   "--quiet"};
  if (fold) args.push_back("--gpu-fold");
  Child sim(args, dir / "sim.log");
  auto evs = wait_events(agent, "straggler", job, 45s);
  ASSERT_EQ(evs.size(), 1u) << evs.dump() << agent.log();
  EXPECT_EQ(evs[0]["rank"], slow);
  EXPECT_EQ(evs[0]["evidence"]["reason"], "gpu") << evs[0].dump();
  EXPECT_NE(evs[0]["summary"].get<std::string>().find("on its GPU"), std::string::npos) << evs[0]["summary"];
  std::this_thread::sleep_for(3s);  // nobody else joins it
  EXPECT_EQ(ranks_of(events_of(agent, "straggler", job)), std::set<int>{slow});
  auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc.has_value());
  for (const auto& r : (*doc)["ranks"]) {
    if (r.value("job_id", json()) != job) continue;
    const bool is_slow = r["rank"] == slow;
    EXPECT_EQ(r["straggler"], is_slow) << r.dump();
    if (is_slow) {
      EXPECT_EQ(r["straggler_reason"], "gpu");
    }
  }
  const std::string m = agent.get_text("/metrics");
  EXPECT_NE(m.find("argus_straggler{job_id=\"" + job + "\",rank=\"" + std::to_string(slow) + "\"} 1"),
            std::string::npos);
  if (fold) {  // the figures came from spans
    for (const auto& r : (*doc)["ranks"]) {
      if (r.value("job_id", json()) == job) {
        EXPECT_GT(r["gpu"]["kernels_folded"].get<uint64_t>(), 0u) << r.dump();
      }
    }
  }
}

TEST(GpuLayer, SlowGpuNamedWithReasonGpuAndNobodyElse) {
  ARGUS_REQUIRE_ROOT();
  slow_gpu_named_alone("gpu-slow", false);
}

TEST(GpuLayer, SlowGpuNamedFromFoldedRecords) {
  ARGUS_REQUIRE_ROOT();
  slow_gpu_named_alone("gpu-slow-fold", true);
}

void bubble_stage_named(const std::string& job, bool fold) {
  const auto dir = make_temp_dir(job);
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  std::vector<std::string> args = {bin("argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", "80",
                                   "--init-ms", "1500", "--job-id", job, "--pp", "4", "--bubble", "1:30",
                                   "--out", out.string(), "--quiet"};
  if (fold) args.push_back("--gpu-fold");
  Child sim(args, dir / "sim.log");
  auto evs = wait_events(agent, "pipeline_bubble", job, 45s, 2);
  std::this_thread::sleep_for(3s);
  evs = events_of(agent, "pipeline_bubble", job);
  // Stage 1 of 4 over 8 ranks holds ranks 2 and 3 (the sim's truth says so once written).
  EXPECT_EQ(ranks_of(evs), (std::set<int>{2, 3})) << evs.dump() << agent.log();
  for (const auto& e : evs) EXPECT_NE(e["summary"].get<std::string>().find("pipeline receives"), std::string::npos);
  auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc.has_value());
  double lowest_flagged = 1, highest_other = 0;
  for (const auto& r : (*doc)["ranks"]) {
    if (r.value("job_id", json()) != job || r["gpu"].is_null() || r["gpu"]["bubble_ratio"].is_null()) continue;
    const double b = r["gpu"]["bubble_ratio"].get<double>();
    const bool flagged = r["rank"] == 2 || r["rank"] == 3;
    if (flagged)
      lowest_flagged = std::min(lowest_flagged, b);
    else
      highest_other = std::max(highest_other, b);
  }
  EXPECT_GT(lowest_flagged, highest_other);
  sim.terminate();  // the ranks write their truth as they stop
  ASSERT_TRUE(sim.wait_for(30s).has_value());
  // The sim's own record: the ranks of the bubble stage are the ones it delayed.
  const auto truth = read_truth(out);
  for (const auto& [rank, t] : truth) {
    const bool bubble_stage = t.value("pp_stage", -1) == 1;
    EXPECT_EQ(bubble_stage, rank == 2 || rank == 3) << rank;
  }
}

TEST(GpuLayer, BubbleStageNamedAndItsRanksIdleMost) {
  ARGUS_REQUIRE_ROOT();
  bubble_stage_named("gpu-bubble", false);
}

TEST(GpuLayer, BubbleStageNamedFromFoldedRecords) {
  ARGUS_REQUIRE_ROOT();
  bubble_stage_named("gpu-bubble-fold", true);
}

// Folded (--gpu-fold): the kernels, their time and the NCCL time the agent keeps
// still equal what the sim's GPU ran, to the kernel and the nanosecond, though
// only spans, sketches, gaps and the NCCL kernels crossed (the sim is not
// kernel-heavy: it flushes after every synchronize, so its spans are small and
// folding saves it nothing; the unit tests and the bench measure the saving); the per-step sketches
// count the same 4 forward GEMMs a step.
TEST(GpuLayer, FoldedRecordsFromTheSimAreCountedExactly) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpu-fold");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  auto args = sim_args(out, "gpu-fold", 4, 40);
  args.push_back("--gpu-fold");
  auto r = run_command(args, dir, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 4u);
  EXPECT_EQ(wait_for_truth(agent, truth, diff_gpu, 10s), "") << agent.log();
  auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc.has_value());
  for (const auto& rk : (*doc)["ranks"]) {
    if (rk.value("job_id", json()) != "gpu-fold") continue;
    const auto& t = truth.at(rk["rank"].get<int>()).at("gpu");
    // Every compute kernel came folded (none ran 1 s); only the NCCL ones alone.
    EXPECT_EQ(rk["gpu"]["kernels_folded"].get<uint64_t>(),
              t.at("kernels").get<uint64_t>() - t.at("nccl_kernels").get<uint64_t>())
        << rk.dump();
  }
  auto steps = agent.get_json("/api/v1/ranks/gpu-fold/0/gpu-steps?last=30");
  ASSERT_TRUE(steps.has_value());
  ASSERT_GE((*steps)["steps"].size(), 10u) << steps->dump();
  std::vector<uint64_t> fwd;
  for (const auto& st : (*steps)["steps"])
    for (const auto& k : st["kernels"])
      if (k["name"] == "sim_gemm_fwd") fwd.push_back(k["count"].get<uint64_t>());
  ASSERT_FALSE(fwd.empty());
  std::sort(fwd.begin(), fwd.end());
  EXPECT_EQ(fwd[fwd.size() / 2], 4u) << steps->dump();
}

// A step's shape as a real one has it (150 kernel names, each ±3% from launch
// to launch, 2 000 kernels a step), folded, over a longer job: one sketch per
// step, each closed by the next step's mark and holding exactly that step's
// kernels by the sim's count (a wrong step period once made 65-step sketches).
TEST(GpuLayer, ALongFoldedJobGetsOneSketchPerStep) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpu-steps");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const auto out = dir / "truth";
  constexpr int kSteps = 150;
  auto args = sim_args(out, "gpu-steps", 2, kSteps, {"--gpu-fold", "--kernels-per-step", "2000", "--kernel-names", "150"});
  Child sim(args, dir / "sim.log", {"ARGUS_SIM_GPU_JITTER_PCT=3"});
  const auto st = sim.wait_for(180s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  EXPECT_EQ(wait_for_truth(agent, truth, diff_gpu, 10s), "") << agent.log();
  // Compute kernels a step, by the sim's count (its NCCL kernels also run at init, so not those).
  const uint64_t launches = truth.at(0).at("cuda").at("kernel_launches").get<uint64_t>();
  ASSERT_EQ(launches % kSteps, 0u) << truth.at(0).dump();
  auto steps = agent.get_json("/api/v1/ranks/gpu-steps/0/gpu-steps?last=600");
  ASSERT_TRUE(steps.has_value());
  size_t by_step = 0, whole = 0;
  for (const auto& s : (*steps)["steps"]) {
    uint64_t n = 0;
    for (const auto& k : s["kernels"])
      if (k["name"].get<std::string>().rfind("nccl", 0) != 0) n += k["count"].get<uint64_t>();
    by_step += s["closed_by"] == "step" ? 1 : 0;
    whole += n == launches / kSteps ? 1 : 0;
  }
  // The first step may start before the first mark and the last stay open; a busy test
  // machine may blur a mark or two. A wrong step period blurs nearly all of them.
  EXPECT_GE(by_step, static_cast<size_t>(kSteps * 95 / 100)) << steps->dump().substr(0, 2000);
  EXPECT_GE(whole, static_cast<size_t>(kSteps * 95 / 100)) << steps->dump().substr(0, 2000);
  const std::string m = agent.get_text("/metrics");
  EXPECT_EQ(metric_value(m, "argus_agent_capped_total", {{"structure", "step_sketch_records"}}), 0);
  EXPECT_EQ(metric_value(m, "argus_agent_capped_total", {{"structure", "step_sketch_time"}}), 0);
}

// The trace opens in a real, independent JSON parser (Python's) and every
// track's spans are well nested; it holds kernels, collectives, synchronize
// waits and bubbles of every rank.
void trace_well_nested(const std::string& job, bool fold) {
  const auto dir = make_temp_dir(job);
  Agent agent(dir, {"--window", "5", "--debug-routes"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  std::vector<std::string> args = {bin("argus-sim"), "--ranks", "4", "--steps", "0", "--step-ms", "50",
                                   "--init-ms", "1500", "--job-id", job, "--pp", "2", "--bubble", "1:10", "--quiet"};
  if (fold) args.push_back("--gpu-fold");
  Child sim(args, dir / "sim.log");
  std::this_thread::sleep_for(6s);
  const auto file = dir / "trace.json";
  auto r = run_command({bin("argusctl"), "trace", "--agent", agent.url(""), "--seconds", "3", "-o", file.string()},
                       dir, 30s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto check = fs::path(ARGUS_SOURCE_DIR) / "tests" / "integration" / "check_trace.py";
  std::vector<std::string> check_args = {"python3", check.string(), file.string(), job, "4"};
  if (fold) check_args.push_back("--folded");
  auto c = run_command(check_args, dir, 60s);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  // Bad requests get a clear 400, never a trace.
  auto bad = cli::http_get(agent.url("/api/v1/trace?seconds=abc"), 5s);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("seconds"), std::string::npos);
  if (fold) {  // the compute kernels came as folded spans, drawn on their own track
    EXPECT_NE(read_text(file).find("GPU compute (folded)"), std::string::npos);
  }
}

TEST(GpuLayer, TraceIsChromeJsonWithEveryRankAndWellNestedTracks) {
  ARGUS_REQUIRE_ROOT();
  trace_well_nested("gpu-trace", false);
}

TEST(GpuLayer, FoldedTraceIsChromeJsonAndWellNestedToo) {
  ARGUS_REQUIRE_ROOT();
  trace_well_nested("gpu-trace-fold", true);
}

// An agent that starts after the job: what the emulated GPU produced while no
// agent listened is counted (the USDT semaphore tells the producer), never
// silently lost, and every kernel name is announced again for the late agent.
TEST(GpuLayer, RecordsFiredBeforeTheAgentListensAreCounted) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpu-late");
  const auto out = dir / "truth";
  Child sim({bin("argus-sim"), "--ranks", "2", "--steps", "150", "--step-ms", "40", "--init-ms", "300", "--job-id",
             "gpu-late", "--out", out.string(), "--quiet"},
            dir / "sim.log");
  std::this_thread::sleep_for(2500ms);  // ~50 steps with nobody listening
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  auto st = sim.wait_for(60s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "sim.log");
  const auto truth = read_truth(out);
  ASSERT_EQ(truth.size(), 2u);
  auto diff = [](const json& t, const json& a) {
    std::ostringstream d;
    const json& tg = t.at("gpu");
    const json g = a.value("gpu", json());
    if (g.is_null()) return std::string(" no gpu figures");
    const uint64_t unheard = tg.at("unheard_records").get<uint64_t>();
    if (unheard == 0) d << " the sim fired nothing before the agent listened";
    if (g.value("records", 0ull) != tg.at("records").get<uint64_t>())
      d << " records " << g.value("records", 0ull) << "!=" << tg.at("records");
    if (g.value("records_unheard", 0ull) != unheard) d << " records_unheard " << g.value("records_unheard", 0ull)
                                                        << "!=" << unheard;
    if (g.value("kernels", 0ull) + g.value("kernels_unheard", 0ull) != tg.at("kernels").get<uint64_t>())
      d << " kernels " << g.value("kernels", 0ull) << "+" << g.value("kernels_unheard", 0ull) << "!=" << tg.at("kernels");
    if (g.value("nccl_kernels_unheard", 0ull) == 0) d << " no NCCL kernel counted before the agent";
    if (g.value("records_lost", 0ull) != unheard + tg.at("dropped").get<uint64_t>())
      d << " records_lost " << g.value("records_lost", 0ull) << "!=" << unheard << "+" << tg.at("dropped");
    return d.str();
  };
  EXPECT_EQ(wait_for_truth(agent, truth, diff, 10s), "") << agent.log();
  // Names announced to nobody were announced again: the steps' kernels have names.
  auto steps = agent.get_json("/api/v1/ranks/gpu-late/0/gpu-steps?last=5");
  ASSERT_TRUE(steps.has_value());
  ASSERT_FALSE((*steps)["steps"].empty()) << steps->dump();
  bool named = false;
  for (const auto& k : (*steps)["steps"].back()["kernels"]) {
    EXPECT_EQ(k["name"].get<std::string>().rfind("kernel#", 0), std::string::npos) << k.dump();
    named = named || k["name"] == "sim_gemm_fwd";
  }
  EXPECT_TRUE(named) << steps->dump();
}

// The real CUPTI injection library, driven with hand-built CUPTI buffers (no
// GPU here), hands its batches to the agent through the same USDT probe.
TEST(GpuLayer, CuptiInjectionLibraryBatchesReachTheAgent) {
  ARGUS_REQUIRE_ROOT();
  const auto so = fs::path(lib("libargus-cupti.so"));
  if (!fs::exists(so)) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << "CI=true and libargus-cupti.so was not built";
    GTEST_SKIP() << "built without the CUPTI headers";
  }
  const auto dir = make_temp_dir("gpu-cupti");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  Child smoke({bin("cupti_inject_smoke"), so.string(), "--delay-ms", "3000", "--process", "10000", "--names", "16",
               "--work-ms", "3500"},
              dir / "smoke.log", {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "ARGUS_JOB_ID=cupti-smoke"});
  auto st = smoke.wait_for(60s);
  const std::string log = read_text(dir / "smoke.log");
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << log;
  // Folded by default: the agent counts every kernel the library converted.
  const auto at = log.find("\nkernels=");
  ASSERT_NE(at, std::string::npos) << log;
  const uint64_t fired = std::stoull(log.substr(at + 9));
  ASSERT_EQ(fired, 10000u) << log;
  ASSERT_NE(log.find("\nfolded=10000\n"), std::string::npos) << log;
  double got = 0;
  for (int i = 0; i < 40 && got != static_cast<double>(fired); ++i) {
    got = metric_value(agent.get_text("/metrics"), "argus_gpu_records_total",
                       {{"job_id", "cupti-smoke"}, {"rank", "0"}, {"kind", "kernel"}});
    if (got != static_cast<double>(fired)) std::this_thread::sleep_for(250ms);
  }
  EXPECT_EQ(got, static_cast<double>(fired)) << agent.log() << log;
}

// Bad pointers, oversized counts and malformed records from a producer are
// counted, the good records kept, and the agent carries on.
TEST(GpuLayer, HostileProducerIsCountedNotTrusted) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("gpu-bad");
  Agent agent(dir, {"--window", "5", "--debug-routes"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  Child p({bin("gpu_bad_producer"), "2500"}, dir / "producer.log",
          {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "ARGUS_JOB_ID=bad-producer"});
  auto st = p.wait_for(30s);
  ASSERT_TRUE(st && WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << read_text(dir / "producer.log");
  const std::map<std::string, std::string> r0 = {{"job_id", "bad-producer"}, {"rank", "0"}};
  const std::map<std::string, std::string> kernels = {{"job_id", "bad-producer"}, {"rank", "0"}, {"kind", "kernel"}};
  std::string m;
  for (int i = 0; i < 20; ++i) {
    m = agent.get_text("/metrics");
    if (metric_value(m, "argus_gpu_records_total", kernels) == 266) break;
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_EQ(metric_value(m, "argus_gpu_records_total", kernels), 256 + 10) << m << agent.log();
  // Truncated by BPF, dropped by the producer, and the 3 that end before they start.
  EXPECT_EQ(metric_value(m, "argus_gpu_records_lost_total", r0), 100000 - 256 + 5 + 3);
  EXPECT_GE(metric_value(m, "argus_agent_bpf_errors_total", {{"error", "gpu_read_failed"}}), 2);
  EXPECT_GE(metric_value(m, "argus_agent_bpf_errors_total", {{"error", "gpu_batch_truncated"}}), 1);
  EXPECT_TRUE(agent.child().running());
  auto trace = agent.get_json("/api/v1/trace?seconds=60");
  ASSERT_TRUE(trace.has_value());
  EXPECT_NE(trace->dump().find("bad_producer_kernel"), std::string::npos);  // the readable name won
}

}  // namespace
}  // namespace argus::itest
