// Python ranks (real interpreters that load the real NCCL, as PyTorch does) seen
// by the agent: the python-stacks route, `argusctl stacks JOB` grouping the
// ranks by identical stack, and py-spy, dumping the same process, agreeing.
#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

const std::string kRealNccl = std::string(ARGUS_CUDA_ROOT) + "/lib/libnccl.so.2";
const std::string kPySpy = "/var/cache/argus/tools-venv/bin/py-spy";

const char* kRankScript = R"PY(import ctypes, os, sys, threading, time
ctypes.CDLL(sys.argv[1])

def inner():
    time.sleep(600)

def middle():
    inner()

def outer():
    middle()

def save_checkpoint():
    time.sleep(600)

class Loader:
    def run(self):
        time.sleep(600)

threading.Thread(target=Loader().run, daemon=True).start()
print("ready", flush=True)
if sys.argv[2] == "checkpoint":
    save_checkpoint()
else:
    outer()
)PY";

std::string find_python(const std::string& minor) {
  std::string root = std::getenv("PYENV_ROOT") ? std::getenv("PYENV_ROOT") : "/root/.pyenv";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root + "/versions", ec)) {
    std::string n = e.path().filename().string();
    std::string exe = e.path().string() + "/bin/python" + minor;
    if (n.rfind(minor + ".", 0) == 0 && fs::exists(exe)) return exe;
  }
  return "";
}

// Function names of the thread whose innermost frame is `innermost`.
std::vector<std::string> names_of(const json& threads, const std::string& key, const std::string& innermost,
                                  long* tid, const std::string& tid_key) {
  for (const auto& t : threads) {
    if (!t.contains("frames") || t["frames"].empty() || t["frames"][0].value(key, "") != innermost) continue;
    std::vector<std::string> out;
    for (const auto& f : t["frames"]) out.push_back(f.value(key, "") + ":" + std::to_string(f.value("line", 0)));
    *tid = t.value(tid_key, 0L);
    return out;
  }
  return {};
}

TEST(PythonStacks, RouteArgusctlGroupingAndPySpyAgree) {
  ARGUS_REQUIRE_ROOT();
  const std::string py312 = find_python("3.12");
  std::string other = "/usr/bin/python3.11";
  if (!fs::exists(other)) other = find_python("3.10");
  if (!fs::exists(kRealNccl) || py312.empty() || other.empty()) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true")
      FAIL() << "CI=true but NCCL or the interpreters are missing";
    GTEST_SKIP() << "needs " << kRealNccl << ", pyenv 3.12 and a second interpreter";
  }
  const auto dir = make_temp_dir("pystacks");
  const fs::path script = dir / "rank.py";
  std::ofstream(script) << kRankScript;

  Agent agent(dir, {"--debug-routes"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  auto env = [](int rank) {
    return std::vector<std::string>{"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank),
                                    "WORLD_SIZE=3", "LOCAL_WORLD_SIZE=3", "TORCHELASTIC_RUN_ID=pyjob"};
  };
  // Ranks 0 and 1 on 3.12 in the same place; rank 2 on another interpreter, elsewhere.
  Child r0({py312, "-u", script.string(), kRealNccl, "train"}, dir / "r0.log", env(0));
  Child r1({py312, "-u", script.string(), kRealNccl, "train"}, dir / "r1.log", env(1));
  Child r2({other, "-u", script.string(), kRealNccl, "checkpoint"}, dir / "r2.log", env(2));

  int seen = 0;
  for (int i = 0; i < 100 && seen < 3; ++i) {
    seen = 0;
    if (auto d = agent.get_json("/api/v1/ranks")) {
      for (const auto& r : (*d)["ranks"])
        if (r.value("job_id", json()) == "pyjob" && r.value("state", "") == "running") ++seen;
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_EQ(seen, 3) << agent.log();
  // The ranks print "ready" once their threads exist.
  for (int i = 0; i < 100; ++i) {
    if (read_text(dir / "r0.log").find("ready") != std::string::npos &&
        read_text(dir / "r1.log").find("ready") != std::string::npos &&
        read_text(dir / "r2.log").find("ready") != std::string::npos)
      break;
    std::this_thread::sleep_for(50ms);
  }

  // One rank through the route.
  auto doc = agent.get_json("/api/v1/ranks/pyjob/0/python-stacks");
  ASSERT_TRUE(doc.has_value()) << agent.get_text("/api/v1/ranks/pyjob/0/python-stacks");
  EXPECT_EQ((*doc)["pid"], r0.pid());
  EXPECT_EQ((*doc)["python_version"].get<std::string>().rfind("3.12.", 0), 0u);
  long our_tid = 0;
  auto ours = names_of((*doc)["threads"], "qualname", "inner", &our_tid, "native_thread_id");
  ASSERT_EQ(ours.size(), 4u) << doc->dump();  // inner, middle, outer, <module>
  EXPECT_EQ(ours[3].rfind("<module>:", 0), 0u);
  EXPECT_EQ(our_tid, r0.pid());
  EXPECT_EQ(agent.get_text("/api/v1/ranks/pyjob/7/python-stacks").find("no such rank") != std::string::npos, true);

  // The whole job, grouped.
  auto all = run_command({bin("argusctl"), "stacks", "pyjob", "--agent", agent.url("")}, dir);
  EXPECT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find("ranks 0-1 (2 ranks):"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("rank 2 (1 rank):"), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("save_checkpoint ("), std::string::npos) << all.output;
  EXPECT_NE(all.output.find("Loader.run ("), std::string::npos) << all.output;
  auto js = run_command({bin("argusctl"), "stacks", "pyjob", "--json", "--agent", agent.url("")}, dir);
  ASSERT_EQ(js.exit_code, 0) << js.output;
  auto grouped = json::parse(js.output, nullptr, false);
  ASSERT_TRUE(grouped.is_object()) << js.output;
  ASSERT_EQ(grouped["groups"].size(), 2u) << js.output;
  EXPECT_EQ(grouped["groups"][0]["ranks"], json::array({0, 1}));
  EXPECT_EQ(grouped["groups"][1]["ranks"], json::array({2}));
  auto one = run_command({bin("argusctl"), "stacks", "pyjob", "2", "--agent", agent.url("")}, dir);
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("job pyjob rank 2 (pid " + std::to_string(r2.pid())), std::string::npos) << one.output;

  // The peer: py-spy's function and line sequence for the same thread is ours.
  if (!fs::exists(kPySpy)) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true") FAIL() << "CI=true and no " << kPySpy;
    return;  // the checks above ran; the peer is optional off CI
  }
  auto spy = run_command({kPySpy, "dump", "--json", "--pid", std::to_string(r0.pid())}, dir, 30s);
  ASSERT_EQ(spy.exit_code, 0) << spy.output;
  auto spy_doc = json::parse(spy.output, nullptr, false);
  ASSERT_TRUE(spy_doc.is_array()) << spy.output;
  long spy_tid = 0;
  auto theirs = names_of(spy_doc, "name", "inner", &spy_tid, "os_thread_id");
  EXPECT_EQ(ours, theirs) << spy.output;
  EXPECT_EQ(our_tid, spy_tid);
  long our_loader = 0, spy_loader = 0;
  EXPECT_EQ(names_of((*doc)["threads"], "qualname", "Loader.run", &our_loader, "native_thread_id"),
            names_of(spy_doc, "name", "Loader.run", &spy_loader, "os_thread_id"));
  EXPECT_EQ(our_loader, spy_loader);
}

// A pod without hostPID: the agent in a PID namespace of its own, reading the
// node's /proc. The pids it tracks are the node's, which process_vm_readv would
// take for pids of its own namespace (there: none, or the wrong process); the
// stacks must still be the rank's.
TEST(PythonStacks, AgentInItsOwnPidNamespaceDumpsTheRightProcess) {
  ARGUS_REQUIRE_ROOT();
  const std::string py312 = find_python("3.12");
  if (!fs::exists(kRealNccl) || py312.empty()) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true")
      FAIL() << "CI=true but NCCL or pyenv 3.12 is missing";
    GTEST_SKIP() << "needs " << kRealNccl << " and pyenv 3.12";
  }
  const auto dir = make_temp_dir("pystacks-pidns");
  const fs::path script = dir / "rank.py";
  std::ofstream(script) << kRankScript;
  Agent agent(dir, {"--debug-routes"}, {"unshare", "--pid", "--fork", "--kill-child"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  Child r0({py312, "-u", script.string(), kRealNccl, "train"}, dir / "r0.log",
           {"RANK=0", "LOCAL_RANK=0", "WORLD_SIZE=1", "TORCHELASTIC_RUN_ID=nsjob"});
  std::optional<json> doc;
  for (int i = 0; i < 150; ++i) {
    if (read_text(dir / "r0.log").find("ready") != std::string::npos) {
      doc = agent.get_json("/api/v1/ranks/nsjob/0/python-stacks");
      if (doc && doc->contains("threads")) break;
    }
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(doc.has_value() && doc->contains("threads"))
      << agent.get_text("/api/v1/ranks/nsjob/0/python-stacks") << agent.log();
  EXPECT_EQ((*doc)["pid"], r0.pid());
  long tid = 0;
  auto ours = names_of((*doc)["threads"], "qualname", "inner", &tid, "native_thread_id");
  ASSERT_EQ(ours.size(), 4u) << doc->dump();  // inner, middle, outer, <module>
  EXPECT_EQ(tid, r0.pid());
}

}  // namespace
}  // namespace argus::itest
