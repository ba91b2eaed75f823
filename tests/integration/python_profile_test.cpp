// Sampled Python profiles for real: one agent samples a CPU-bound rank on each
// interpreter here (pyenv 3.10-3.13, Debian's static /usr/bin/python3.11) and
// the profile route answers folded stacks with outer;middle;inner at their
// lines, for each.
#include <regex>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

const std::string kRealNccl = std::string(ARGUS_CUDA_ROOT) + "/lib/libnccl.so.2";

// Lines matter: the test expects <module> at 23, outer at 17, middle at 13, inner at 7 or 8.
constexpr const char* kScript = R"(import ctypes, sys, time
ctypes.CDLL(sys.argv[2])  # the real NCCL: the agent's discovery finds the rank by it


def inner(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def middle(n):
    return inner(n)


def outer(n):
    return middle(n)


print("ready", flush=True)
end = time.time() + float(sys.argv[1])
while time.time() < end:
    outer(20000)
)";

// Deeper than the sampler keeps (96 frames): its stacks must come marked.
constexpr const char* kDeepScript = R"(import ctypes, sys, time
ctypes.CDLL(sys.argv[2])


def spin():
    s = 0
    for i in range(20000):
        s += i
    return s


def rec(n):
    return rec(n - 1) if n else spin()


end = time.time() + float(sys.argv[1])
while time.time() < end:
    rec(150)
)";

std::string pyenv_root() {
  if (const char* r = std::getenv("PYENV_ROOT"); r && *r) return r;
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.pyenv";
  return "/root/.pyenv";
}

struct Interp {
  std::string name;  // the job id too
  std::string path;
};

TEST(PythonProfile, FoldedStacksOnEveryInterpreter) {
  ARGUS_REQUIRE_ROOT();
  const bool ci = std::getenv("CI") && std::string(std::getenv("CI")) == "true";
  if (!fs::exists(kRealNccl)) {
    if (ci) FAIL() << "CI=true but the real NCCL is missing at " << kRealNccl;
    GTEST_SKIP() << "CUDA toolkit (NCCL) not installed";
  }
  std::vector<Interp> interps;
  std::vector<std::string> missing;
  for (const auto& [minor, full] : std::vector<std::pair<std::string, std::string>>{
           {"3.10", "3.10.13"}, {"3.11", "3.11.7"}, {"3.12", "3.12.1"}, {"3.13", "3.13.0"}}) {
    const std::string path = pyenv_root() + "/versions/" + full + "/bin/python" + minor;
    if (fs::exists(path))
      interps.push_back({"pyenv-" + minor, path});
    else
      missing.push_back(path);
  }
  if (fs::exists("/usr/bin/python3.11"))
    interps.push_back({"debian-3.11", "/usr/bin/python3.11"});
  else
    missing.push_back("/usr/bin/python3.11");
  if (!missing.empty() && ci) FAIL() << "CI=true but an interpreter is missing: " << missing.front();
  if (interps.empty()) GTEST_SKIP() << "no interpreter found (pyenv 3.10-3.13, /usr/bin/python3.11)";

  const auto dir = make_temp_dir("pyprof");
  const auto script = dir / "work.py";
  std::ofstream(script) << kScript;
  const auto deep_script = dir / "deep.py";
  std::ofstream(deep_script) << kDeepScript;
  Agent agent(dir, {"--debug-routes", "--python-sample-hz", "199"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  std::vector<std::unique_ptr<Child>> ranks;
  for (const auto& in : interps)
    ranks.push_back(std::make_unique<Child>(
        std::vector<std::string>{in.path, script.string(), "60", kRealNccl}, dir / (in.name + ".log"),
        std::vector<std::string>{"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=" + in.name}));

  Child deep(std::vector<std::string>{interps.front().path, deep_script.string(), "60", kRealNccl}, dir / "deep.log",
             std::vector<std::string>{"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=deep"});

  const std::string f = std::regex_replace(script.string(), std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)");
  const std::regex want("<module> \\(" + f + ":23\\);outer \\(" + f + ":17\\);middle \\(" + f + ":13\\);inner \\(" +
                        f + ":[78]\\) ([0-9]+)\n");
  std::map<std::string, std::string> answers;
  std::set<std::string> done;
  const auto deadline = std::chrono::steady_clock::now() + 25s;
  while (done.size() < interps.size() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(500ms);
    for (const auto& in : interps) {
      if (done.count(in.name)) continue;
      answers[in.name] = agent.get_text("/api/v1/ranks/" + in.name + "/0/profile?seconds=30");
      std::smatch m;
      // Enough samples that the stack is no accident of one read.
      int total = 0;
      for (auto it = std::sregex_iterator(answers[in.name].begin(), answers[in.name].end(), want);
           it != std::sregex_iterator(); ++it)
        total += std::stoi((*it)[1]);
      if (total >= 20) done.insert(in.name);
    }
  }
  // The deep rank: every stack that reaches spin() is cut to the innermost 96
  // frames under a "[truncated]" root, never shown as if complete.
  std::string deep_answer;
  for (int i = 0; i < 20; ++i) {
    deep_answer = agent.get_text("/api/v1/ranks/deep/0/profile?seconds=30");
    if (deep_answer.find("spin (") != std::string::npos) break;
    std::this_thread::sleep_for(500ms);
  }
  int deep_lines = 0;
  std::istringstream deep_in(deep_answer);
  for (std::string line; std::getline(deep_in, line);) {
    if (line.find("spin (") == std::string::npos) continue;
    ++deep_lines;
    EXPECT_EQ(line.rfind("[truncated];", 0), 0u) << line.substr(0, 200);
    EXPECT_EQ(std::count(line.begin(), line.end(), ';'), 96) << line.substr(0, 200);
  }
  EXPECT_GT(deep_lines, 0) << deep_answer.substr(0, 2000);

  for (const auto& in : interps)
    EXPECT_TRUE(done.count(in.name)) << in.name << " (" << in.path << ") answered:\n" << answers[in.name];

  // The route's contract: text/plain folded stacks; a bad `seconds` is a 400
  // that says why; an unknown rank a 404.
  auto ok = cli::http_get(agent.url("/api/v1/ranks/" + interps.front().name + "/0/profile"), 5s);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->status, 200);
  auto bad = cli::http_get(agent.url("/api/v1/ranks/" + interps.front().name + "/0/profile?seconds=abc"), 5s);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("seconds must be"), std::string::npos) << bad->body;
  auto none = cli::http_get(agent.url("/api/v1/ranks/no-such-job/0/profile"), 5s);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->status, 404);
  // Lost samples are exported (zero here), never silent.
  EXPECT_NE(agent.get_text("/metrics").find("argus_agent_bpf_errors_total{error=\"py_samples_lost\"}"),
            std::string::npos);
}

}  // namespace
}  // namespace argus::itest
