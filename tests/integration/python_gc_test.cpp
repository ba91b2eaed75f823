// Python GC pauses for real, as root: one agent, one rank per interpreter here
// (pyenv 3.10-3.13: gc_collect_main; Debian's python3.11: the USDT pair; a copy
// of it without its USDT notes: the call in PyGC_Collect). Each rank calls
// gc.collect(0/1/2) a known number of times and allocates enough to trigger
// automatic collections; the agent's counts must equal gc.get_stats() exactly.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

// The rank's work, after the test says go (its probes are configured by then):
// writes gc.get_stats() before and after, then disables the collector so that
// nothing moves while the test reads the agent.
constexpr const char* kGcScript = R"PY(
import gc, json, os, sys, time
out = sys.argv[1]
def stats():
    return [s["collections"] for s in gc.get_stats()]
open(out + ".ready", "w").close()
while not os.path.exists(out + ".go"):
    time.sleep(0.01)
before = stats()
for _ in range(7): gc.collect(0)
for _ in range(5): gc.collect(1)
for _ in range(3): gc.collect(2)
junk = []
for i in range(60000):
    junk.append([i])
    if len(junk) > 3000:
        junk = []
after = stats()
gc.disable()
with open(out + ".tmp", "w") as f:
    json.dump({"before": before, "after": after}, f)
os.rename(out + ".tmp", out)
while not os.path.exists(out + ".stop"):
    time.sleep(0.05)
)PY";

std::string pyenv_root() {
  if (const char* r = std::getenv("PYENV_ROOT"); r && *r) return r;
  if (const char* h = std::getenv("HOME"); h && fs::exists(std::string(h) + "/.pyenv")) return std::string(h) + "/.pyenv";
  return "/root/.pyenv";
}

// The newest installed pyenv X.Y, or "".
std::string pyenv_python(const std::string& minor) {
  std::string best;
  const fs::path versions = fs::path(pyenv_root()) / "versions";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(versions, ec)) {
    const std::string v = e.path().filename().string();
    if (v.rfind(minor + ".", 0) != 0 || v.find_first_not_of("0123456789.", 0) != std::string::npos) continue;
    const fs::path py = e.path() / "bin" / "python3";
    if (fs::exists(py) && v > best) best = v;
  }
  return best.empty() ? "" : (versions / best / "bin" / "python3").string();
}


struct Interp {
  std::string name;    // label in messages
  std::string path;    // the interpreter
  std::string anchor;  // the GC anchor the agent must probe
};

// Every interpreter this test needs; missing ones skip (fail under CI=true).
std::vector<Interp> interpreters(const fs::path& dir, std::vector<std::string>* missing) {
  std::vector<Interp> out;
  for (const std::string minor : {"3.10", "3.11", "3.12", "3.13"}) {
    const std::string py = pyenv_python(minor);
    if (py.empty())
      missing->push_back("pyenv " + minor);
    else
      out.push_back({"pyenv-" + minor, py, "gc_collect_main"});
  }
  const std::string deb = "/usr/bin/python3.11";
  if (!fs::exists(deb)) {
    missing->push_back(deb);
    return out;
  }
  out.push_back({"debian-3.11", deb, "usdt"});
  // The same binary without its USDT notes: the collector is found through PyGC_Collect.
  const fs::path copy = dir / "python3.11-nonotes";
  auto r = run_command({"objcopy", "--remove-section=.note.stapsdt", deb, copy.string()}, dir, 30s);
  if (r.exit_code == 0 && fs::exists(copy)) {
    fs::permissions(copy, fs::perms::owner_all, fs::perm_options::add);
    out.push_back({"debian-3.11-nonotes", copy.string(), "pygc_collect_call"});
  } else {
    missing->push_back("objcopy (" + r.output + ")");
  }
  return out;
}

std::vector<std::string> rank_env(const std::string& job, int rank, int world) {
  return {"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world), "LOCAL_RANK=" + std::to_string(rank),
          "TORCHELASTIC_RUN_ID=" + job};
}

// Waits until `pred` holds or `timeout` passes.

using Labels = std::map<std::string, std::string>;

// The agent's series for one rank: exact label match (metric_value matches
// `rank="1"` inside `local_rank="1"` too, harmless here: no rank_info is read).
double series(const std::string& text, const std::string& name, const std::string& job, int rank,
              Labels extra = {}) {
  extra["job_id"] = job;
  extra["rank"] = std::to_string(rank);
  return metric_value(text, name, extra);
}

struct Ranks {
  std::vector<std::unique_ptr<Child>> children;
  std::vector<fs::path> outs;
  void start(const fs::path& dir, const fs::path& script, const std::string& job, const std::vector<Interp>& interps) {
    for (size_t i = 0; i < interps.size(); ++i) {
      const fs::path out = dir / ("rank-" + std::to_string(i) + ".json");
      outs.push_back(out);
      children.push_back(std::make_unique<Child>(
          std::vector<std::string>{interps[i].path, script.string(), out.string()},
          dir / ("rank-" + std::to_string(i) + ".log"),
          rank_env(job, static_cast<int>(i), static_cast<int>(interps.size()))));
    }
  }
  void touch_all(const std::string& suffix) {
    for (const auto& o : outs) std::ofstream(o.string() + suffix).put('1');
  }
  ~Ranks() { touch_all(".stop"); }
};

// The exact check on every interpreter, one agent for all of them.
TEST(PythonGc, ExactPerGenerationOnEveryInterpreter) {
  ARGUS_REQUIRE_ROOT();
  const fs::path dir = make_temp_dir("pygc");
  std::vector<std::string> missing;
  const auto interps = interpreters(dir, &missing);
  if (!missing.empty()) {
    std::string what;
    for (const auto& m : missing) what += " " + m;
    if (ci()) FAIL() << "CI=true and interpreters missing:" << what;
    if (interps.empty()) GTEST_SKIP() << "no interpreter here:" << what;
    std::cerr << "[  NOTE    ] not covered here:" << what << "\n";
  }
  const fs::path script = dir / "gcwork.py";
  std::ofstream(script) << kGcScript;

  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string job = "pygc-job";
  Ranks ranks;
  ranks.start(dir, script, job, interps);
  // A plain Python with no launcher environment: never a rank.
  const fs::path plain_out = dir / "plain.json";
  Child plain({interps.front().path, script.string(), plain_out.string()}, dir / "plain.log");

  // Ready once the agent follows each rank's interpreter (its probes attached
  // and its py_procs entry written: argus_python_info appears only then).
  std::string metrics;
  const bool followed = eventually(
      [&] {
        metrics = agent.get_text("/metrics");
        for (size_t i = 0; i < interps.size(); ++i)
          if (series(metrics, "argus_python_info", job, static_cast<int>(i), {{"gc_anchor", interps[i].anchor}}) != 1)
            return false;
        return true;
      },
      15s);
  ASSERT_TRUE(followed) << metrics << agent.log();
  ranks.touch_all(".go");

  std::vector<json> truth(interps.size());
  ASSERT_TRUE(eventually(
      [&] {
        for (const auto& o : ranks.outs)
          if (!fs::exists(o)) return false;
        return true;
      },
      15s));
  for (size_t i = 0; i < interps.size(); ++i) truth[i] = json::parse(read_text(ranks.outs[i]));

  // Exact: the agent's counters equal gc.get_stats() once a stats pass read them.
  auto all_equal = [&] {
    metrics = agent.get_text("/metrics");
    for (size_t i = 0; i < interps.size(); ++i)
      for (int g = 0; g < 3; ++g)
        if (series(metrics, "argus_python_gc_collections_total", job, static_cast<int>(i),
                   {{"generation", std::to_string(g)}}) != truth[i]["after"][g].get<double>())
          return false;
    return true;
  };
  eventually(all_equal, 10s);
  for (size_t i = 0; i < interps.size(); ++i) {
    SCOPED_TRACE(interps[i].name + " " + interps[i].path);
    const int r = static_cast<int>(i);
    const json& before = truth[i]["before"];
    const json& after = truth[i]["after"];
    double ran = 0;
    for (int g = 0; g < 3; ++g) {
      EXPECT_EQ(series(metrics, "argus_python_gc_collections_total", job, r, {{"generation", std::to_string(g)}}),
                after[g].get<double>())
          << "generation " << g;
      ran += after[g].get<double>() - before[g].get<double>();
    }
    // The script's own: 7 + 5 + 3 explicit, and automatic ones from its allocations.
    EXPECT_GE(after[0].get<double>() - before[0].get<double>(), 7 + 1) << "no automatic collection ran";
    EXPECT_GE(after[2].get<double>() - before[2].get<double>(), 3);
    // Every collection after go was timed by the probes: one pause each.
    EXPECT_EQ(series(metrics, "argus_python_gc_pause_seconds_count", job, r), ran);
    EXPECT_GT(series(metrics, "argus_python_gc_seconds_total", job, r), 0);
    EXPECT_EQ(series(metrics, "argus_python_gc_pause_seconds_sum", job, r),
              series(metrics, "argus_python_gc_seconds_total", job, r));
    EXPECT_EQ(series(metrics, "argus_python_info", job, r, {{"gc_anchor", interps[i].anchor}}), 1);
  }
  EXPECT_EQ(metric_value(metrics, "argus_agent_python_gc_unprobed_files_total", {}), 0);
  EXPECT_EQ(metric_value(metrics, "argus_agent_probe_attach_errors_total", {{"library", "python"}}), 0);
  EXPECT_NE(agent.log().find("attached Python 3.11.2 GC probes (usdt"), std::string::npos);

  // The plain Python was never tracked.
  auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc.has_value());
  EXPECT_TRUE(agent_rank_by_pid(*doc, plain.pid()).is_null()) << doc->dump();
  std::ofstream(plain_out.string() + ".stop").put('1');
  fs::remove_all(dir);
}

// Probes off: the counts still come, exact, from polling the interpreter's
// counters; no GC seconds are claimed.
TEST(PythonGc, PollingOnlyCountsAreExact) {
  ARGUS_REQUIRE_ROOT();
  const std::string py = pyenv_python("3.12");
  if (py.empty()) {
    if (ci()) FAIL() << "CI=true and no pyenv 3.12";
    GTEST_SKIP() << "no pyenv 3.12 here";
  }
  const fs::path dir = make_temp_dir("pygc-poll");
  const fs::path script = dir / "gcwork.py";
  std::ofstream(script) << kGcScript;
  Agent agent(dir, {"--python-gc-probes", "off"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string job = "pygc-poll";
  Ranks ranks;
  ranks.start(dir, script, job, {{"pyenv-3.12", py, "none"}});
  std::string metrics;
  ASSERT_TRUE(eventually(
      [&] {
        metrics = agent.get_text("/metrics");
        return series(metrics, "argus_python_info", job, 0, {{"gc_anchor", "none"}}) == 1;
      },
      15s))
      << metrics << agent.log();
  ranks.touch_all(".go");
  ASSERT_TRUE(eventually([&] { return fs::exists(ranks.outs[0]); }, 15s));
  const json truth = json::parse(read_text(ranks.outs[0]));
  eventually(
      [&] {
        metrics = agent.get_text("/metrics");
        return series(metrics, "argus_python_gc_collections_total", job, 0, {{"generation", "0"}}) ==
               truth["after"][0].get<double>();
      },
      10s);
  for (int g = 0; g < 3; ++g)
    EXPECT_EQ(series(metrics, "argus_python_gc_collections_total", job, 0, {{"generation", std::to_string(g)}}),
              truth["after"][g].get<double>())
        << "generation " << g;
  EXPECT_EQ(series(metrics, "argus_python_gc_seconds_total", job, 0), -1) << "no GC time without probes";
  EXPECT_EQ(metric_value(metrics, "argus_agent_probes_attached", {{"library", "python"}}), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace argus::itest
