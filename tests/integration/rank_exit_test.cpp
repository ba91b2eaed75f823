// Rank deaths with their cause, end to end as root: a simulated rank killed by
// `kill -9` from this test (signal, sender, the hang that follows), a Python
// rank the OOM killer takes in a 64 MiB memory cgroup, and one that exits 3.
#include <set>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {



// The live process of (job, rank) in the agent's view, or -1.
int pid_of(const Agent& agent, const std::string& job, int rank) {
  auto doc = agent.get_json("/api/v1/ranks");
  if (!doc) return -1;
  for (const auto& r : (*doc)["ranks"])
    if (r.value("job_id", json()) == job && r.value("rank", json()) == rank && r.value("state", "") == "running")
      return r.at("pid").get<int>();
  return -1;
}

json first_event(const Agent& agent, const std::string& kind, const std::string& job, int rank) {
  for (const auto& e : events_of(agent, kind, job))
    if (e.value("rank", json()) == rank) return e;  // a hang with nobody missing has rank null
  return json();
}

std::string exits_series(const std::string& job, int rank, const std::string& reason) {
  return "argus_rank_exits_total{job_id=\"" + job + "\",rank=\"" + std::to_string(rank) + "\",reason=\"" + reason +
         "\"} 1";
}

// kill -9 from this process: the rank_exit event names SIGKILL and this test as
// its sender, the exit is counted as a signal, and the hang that follows (its
// peers wait in their next collective) names it missing and dead.
TEST(RankExit, KillNineNamesTheSenderAndTheHangSaysItDied) {
  ARGUS_REQUIRE_ROOT();
  const fs::path dir = make_temp_dir("kill9");
  Agent agent(dir, {"--window", "5"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string job = "kill9-job";
  Child sim({bin("argus-sim"), "--ranks", "4", "--steps", "0", "--step-ms", "50", "--init-ms", "200", "--job-id", job,
             "--no-abort", "--out", (dir / "truth").string(), "--quiet"},
            dir / "sim.log");
  // Every rank followed and in its collectives: the hang tracker knows them all.
  int victim = -1;
  ASSERT_TRUE(eventually(
      [&] {
        const std::string m = agent.get_text("/metrics");
        for (int r = 0; r < 4; ++r)
          if (metric_value(m, "argus_nccl_last_seq", {{"job_id", job}, {"rank", std::to_string(r)}}) < 5) return false;
        victim = pid_of(agent, job, 2);
        return victim > 0;
      },
      30s))
      << agent.log();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const std::string me = read_text("/proc/self/comm").substr(0, read_text("/proc/self/comm").find('\n'));

  json ev;
  ASSERT_TRUE(eventually([&] { return !(ev = first_event(agent, "rank_exit", job, 2)).is_null(); }, 15s))
      << agent.log();
  const json& e = ev["evidence"];
  EXPECT_EQ(e["pid"], victim);
  EXPECT_EQ(e["reason"], "signal");
  EXPECT_EQ(e["signal"], 9);
  EXPECT_EQ(e["signal_name"], "SIGKILL");
  EXPECT_EQ(e["sender"]["pid"], getpid()) << ev.dump();
  EXPECT_EQ(e["sender"]["comm"], me);
  EXPECT_TRUE(e["oom"].is_null());
  EXPECT_EQ(ev["summary"], "rank 2 of job " + job + " (pid " + std::to_string(victim) +
                               ") was killed by SIGKILL from pid " + std::to_string(getpid()) + " (`" + me + "`)");
  const std::string m = agent.get_text("/metrics");
  EXPECT_NE(m.find(exits_series(job, 2, "signal")), std::string::npos) << m;
  for (int r : {0, 1, 3})
    EXPECT_EQ(m.find("argus_rank_exits_total{job_id=\"" + job + "\",rank=\"" + std::to_string(r)), std::string::npos);

  // The hang: its peers wait for it; it is named missing, dead, and how.
  json hang;
  ASSERT_TRUE(eventually([&] { return !(hang = first_event(agent, "hang", job, 2)).is_null(); }, 45s)) << agent.log();
  const std::string s = hang["summary"];
  // Killed between two collectives it never issued the next one; killed after
  // issuing one (its GPU's part never ran) it died inside it. Both happen.
  ASSERT_EQ(hang["evidence"]["missing"].size(), 1u) << hang.dump();
  const bool died_inside = hang["evidence"]["missing"][0].value("issued_newest", false);
  EXPECT_NE(s.find("rank 2 (it died: killed by SIGKILL from pid " + std::to_string(getpid()) + " (`" + me + "`)) " +
                   (died_inside ? "issued it and died before it finished" : "never issued it")),
            std::string::npos)
      << s;
  EXPECT_EQ(hang["evidence"]["cause"], died_inside ? "rank_died" : "missing_rank");
  EXPECT_EQ(hang["evidence"]["missing"][0]["rank"], 2);
  EXPECT_EQ(hang["evidence"]["missing"][0]["exited"], true);
  EXPECT_EQ(hang["evidence"]["missing"][0]["exit_cause"]["signal_name"], "SIGKILL");
  fs::remove_all(dir);
}

// A v1 memory cgroup the test owns: 64 MiB (and no swap), removed with whatever
// still runs in it.
class MemoryCgroup {
 public:
  explicit MemoryCgroup(const std::string& name) : dir_(fs::path("/sys/fs/cgroup/memory") / name) {
    std::error_code ec;
    if (!fs::create_directory(dir_, ec)) return;
    ok_ = write("memory.limit_in_bytes", "64M");
    if (ok_ && fs::exists(dir_ / "memory.memsw.limit_in_bytes")) ok_ = write("memory.memsw.limit_in_bytes", "64M");
  }
  ~MemoryCgroup() {
    for (int i = 0; i < 100 && fs::exists(dir_); ++i) {
      std::istringstream procs(read_text(dir_ / "cgroup.procs"));
      for (int pid; procs >> pid;) kill(pid, SIGKILL);
      if (rmdir(dir_.c_str()) == 0) break;
      std::this_thread::sleep_for(50ms);
    }
  }
  bool ok() const { return ok_; }
  const fs::path& dir() const { return dir_; }

 private:
  bool write(const std::string& file, const std::string& value) {
    std::ofstream out(dir_ / file);
    out << value;
    out.flush();
    return static_cast<bool>(out);
  }
  fs::path dir_;
  bool ok_ = false;
};

constexpr const char* kRankScript = R"PY(
import os, sys, time
go = sys.argv[1] + ".go"
while not os.path.exists(go):
    time.sleep(0.02)

def spin():
    x = 0
    for i in range(200000):
        x += i
    return x

def hog():
    kept = []
    while True:  # 1 MiB at a time, on CPU in between: the sampler sees this frame
        spin()
        kept.append(bytearray(1 << 20))

if sys.argv[2] == "oom":
    hog()
sys.exit(3)
)PY";

std::vector<std::string> rank_env(const std::string& job, int rank, int world) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(rank),
          "TORCHELASTIC_RUN_ID=" + job};
}

// One agent, two Python ranks: rank 0 in a 64 MiB memory cgroup allocates until
// the OOM killer takes it; rank 1 exits with code 3.
TEST(RankExit, OomKillAndExitCodeOfPythonRanks) {
  ARGUS_REQUIRE_ROOT();
  const std::string py = "/usr/bin/python3.11";
  if (!fs::exists(py)) {
    if (ci()) FAIL() << "CI=true and no " << py;
    GTEST_SKIP() << "no " << py;
  }
  if (!fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes")) {
    if (ci()) FAIL() << "CI=true and no v1 memory controller at /sys/fs/cgroup/memory";
    GTEST_SKIP() << "no v1 memory controller at /sys/fs/cgroup/memory";
  }
  const fs::path dir = make_temp_dir("oom");
  const fs::path script = dir / "rank.py";
  std::ofstream(script) << kRankScript;
  MemoryCgroup cg("argus-oom-test-" + std::to_string(getpid()));
  ASSERT_TRUE(cg.ok()) << "cannot make " << cg.dir();
  const std::string cg_path = "/" + cg.dir().filename().string();

  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string job = "oom-job";
  const fs::path flag0 = dir / "r0", flag1 = dir / "r1";
  // Rank 0 joins the cgroup before it execs Python: the agent finds it there.
  Child r0({"/bin/sh", "-c",
            "echo $$ > " + (cg.dir() / "cgroup.procs").string() + " && exec " + py + " " + script.string() + " " +
                flag0.string() + " oom"},
           dir / "r0.log", rank_env(job, 0, 2));
  Child r1({py, script.string(), flag1.string(), "exit"}, dir / "r1.log", rank_env(job, 1, 2));
  std::string m;
  ASSERT_TRUE(eventually(
      [&] {
        m = agent.get_text("/metrics");
        return metric_value(m, "argus_python_info", {{"job_id", job}, {"rank", "0"}}) == 1 &&
               metric_value(m, "argus_python_info", {{"job_id", job}, {"rank", "1"}}) == 1;
      },
      20s))
      << m << agent.log();
  const int pid0 = r0.pid(), pid1 = r1.pid();
  std::ofstream(flag0.string() + ".go").put('1');
  std::ofstream(flag1.string() + ".go").put('1');

  json oom, ex;
  ASSERT_TRUE(eventually(
      [&] {
        oom = first_event(agent, "rank_exit", job, 0);
        ex = first_event(agent, "rank_exit", job, 1);
        return !oom.is_null() && !ex.is_null();
      },
      30s))
      << agent.log() << read_text(dir / "r0.log");
  auto st0 = r0.wait_for(5s);
  ASSERT_TRUE(st0 && WIFSIGNALED(*st0) && WTERMSIG(*st0) == SIGKILL) << read_text(dir / "r0.log");

  const json& o = oom["evidence"];
  EXPECT_EQ(o["pid"], pid0);
  EXPECT_EQ(o["reason"], "oom") << oom.dump();
  EXPECT_EQ(o["signal_name"], "SIGKILL");
  EXPECT_EQ(o["sender"]["pid"], 0);              // the kernel sent it
  EXPECT_EQ(o["oom"]["source"], "mark_victim");  // the probe saw it (the cgroup count is the fallback)
  EXPECT_EQ(o["oom"]["cgroup"], cg_path);
  EXPECT_EQ(o["oom"]["cgroup_version"], 1);
  EXPECT_EQ(o["oom"]["limit_bytes"], 64u << 20);
  EXPECT_GE(o["oom"]["oom_kills"].get<int>(), 1);
  EXPECT_GT(o["oom"]["peak_bytes"].get<double>(), 32.0 * (1 << 20));
  EXPECT_EQ(oom["summary"], "rank 0 of job " + job + " (pid " + std::to_string(pid0) +
                                ") was killed by the OOM killer: memory cgroup " + cg_path + " at its 64 MiB limit");
  // Its newest sampled Python stack: in the allocating loop.
  ASSERT_TRUE(o["last_python_stack"].is_object()) << oom.dump();
  EXPECT_NE(o["last_python_stack"]["frames"].dump().find("hog (" + script.string()), std::string::npos) << oom.dump();

  const json& x = ex["evidence"];
  EXPECT_EQ(x["pid"], pid1);
  EXPECT_EQ(x["reason"], "exit");
  EXPECT_EQ(x["code"], 3);
  EXPECT_TRUE(x["signal"].is_null());
  EXPECT_EQ(ex["summary"], "rank 1 of job " + job + " (pid " + std::to_string(pid1) + ") exited with code 3");

  m = agent.get_text("/metrics");
  EXPECT_NE(m.find(exits_series(job, 0, "oom")), std::string::npos) << m;
  EXPECT_NE(m.find(exits_series(job, 1, "exit")), std::string::npos) << m;
  EXPECT_EQ(metric_value(m, "argus_agent_kernel_probe_up", {{"probe", "mark_victim"}}), 1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace argus::itest
