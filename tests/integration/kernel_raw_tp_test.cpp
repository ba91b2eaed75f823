// The raw_tp fallback of every kernel tracepoint program, as on a kernel that
// refuses tp_btf: forced with --tp-flavour raw_tp, each probe loads, attaches
// and feeds its layer (off-CPU time, a kill's signal and sender).
#include <signal.h>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

constexpr const char* kSleeper = R"PY(
import time
while True:
    time.sleep(0.05)
)PY";

TEST(KernelRawTp, EveryTracepointProgramLoadsAndFeedsItsLayerAsRawTp) {
  ARGUS_REQUIRE_ROOT();
  const fs::path py = "/usr/bin/python3.11";
  if (!fs::exists(py)) {
    if (ci()) FAIL() << "CI=true and no " << py;
    GTEST_SKIP() << "no " << py;
  }
  const fs::path dir = make_temp_dir("rawtp");
  Agent agent(dir, {"--tp-flavour", "raw_tp", "--window", "3"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string m = agent.get_text("/metrics");
  for (const char* probe : {"sched_process_exec", "sched_process_exit", "sched_switch", "sched_wakeup",
                            "sched_wakeup_new", "signal_generate", "mark_victim", "tcp_retransmit_skb",
                            "block_rq_issue", "block_rq_complete"})
    EXPECT_EQ(metric_value(m, "argus_agent_kernel_probe_up", {{"probe", probe}, {"flavour", "raw_tp"}}), 1) << probe;

  const std::string job = "rawtp-" + std::to_string(::getpid());
  Child rank({py.string(), "-c", kSleeper}, dir / "rank.log",
             {"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=" + job});
  // Off-CPU time from the raw_tp sched programs: a sleeper sleeps.
  double sleep_s = 0;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline && sleep_s <= 0.5) {
    if (auto doc = agent.get_json("/api/v1/ranks"))
      for (const auto& r : (*doc)["ranks"])
        if (r.value("job_id", json()) == job && r["offcpu"].is_object() && r["offcpu"]["seconds"].is_object())
          sleep_s = r["offcpu"]["seconds"].value("sleep", 0.0);
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_GT(sleep_s, 0.5) << agent.log();

  // The kill's signal and sender from the raw_tp signal_generate and exit programs.
  ASSERT_EQ(::kill(rank.pid(), SIGKILL), 0);
  rank.wait_for(5s);
  json ev;
  const auto until = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < until && ev.is_null()) {
    auto evs = events_of(agent, "rank_exit", job);
    if (!evs.empty()) ev = evs[0];
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_FALSE(ev.is_null()) << agent.log();
  EXPECT_EQ(ev["evidence"]["reason"], "signal") << ev;
  EXPECT_EQ(ev["evidence"]["signal"], SIGKILL) << ev;
  EXPECT_EQ(ev["evidence"]["sender"]["pid"], static_cast<int>(::getpid())) << ev;
}

}  // namespace
}  // namespace argus::itest
