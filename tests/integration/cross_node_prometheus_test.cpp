// Across nodes, end to end: two agents act as two nodes (each tracks only the
// ranks whose environment says ARGUS_SIM_NODE=node-<i>), a real Prometheus
// server (the Debian package's /usr/bin/prometheus, listening on 127.0.0.1
// only) scrapes both every second and evaluates helm/argus/rules/argus-rules.yaml
// every second, and a simulated job runs 8 ranks over the two nodes (ranks 0-3
// on node-0, 4-7 on node-1). Neither agent sees the whole job: only the rules
// compare all its ranks.
//
// The straggler test loads the shipped rules file unchanged. The hang test
// loads a copy in which the 60 s stall threshold is 5 s (it substitutes the
// text `job_id:argus_collective_stalled_seconds:max > 60`, which the rules
// file keeps in exactly that form), so that it runs in seconds.
//
// Set ARGUS_PROMETHEUS to use another prometheus binary (the Prometheus helper is
// in harness.h).
#include <sys/types.h>
#include <unistd.h>

#include <set>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

const fs::path kRules = fs::path(ARGUS_SOURCE_DIR) / "helm/argus/rules/argus-rules.yaml";

std::string set_text(const std::set<std::string>& s) {
  std::string out = "{";
  for (const auto& v : s) out += (out.size() > 1 ? "," : "") + v;
  return out + "}";
}

// A rules file with the hang threshold `job_id:argus_collective_stalled_seconds:max > 60`
// replaced by `> seconds` in every expression (comment lines left alone); the count
// of replacements, which must be 4 (the missing-rank recording three times, the
// alert once).
int write_rules_with_stall_threshold(const fs::path& out, int seconds) {
  const std::string from = "job_id:argus_collective_stalled_seconds:max > 60";
  const std::string to = "job_id:argus_collective_stalled_seconds:max > " + std::to_string(seconds);
  std::istringstream in(read_text(kRules));
  std::ofstream o(out);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(' ');
    if (first == std::string::npos || line[first] != '#') {
      for (size_t p = line.find(from); p != std::string::npos; p = line.find(from, p + to.size())) {
        line.replace(p, from.size(), to);
        ++n;
      }
    }
    o << line << "\n";
  }
  return n;
}

// Everything one test runs, declared in the order it is torn down in reverse:
// the job stops first, then Prometheus, then the agents.
struct CrossNodeRig {
  fs::path dir;
  std::unique_ptr<Agent> node0, node1;
  std::unique_ptr<Prometheus> prom;
  std::unique_ptr<Child> sim;
  std::string job;

  ~CrossNodeRig() {
    const auto t = std::chrono::steady_clock::now();
    sim.reset();
    const auto t_sim = std::chrono::steady_clock::now();
    prom.reset();
    const auto t_prom = std::chrono::steady_clock::now();
    // (An agent takes about 10 s to stop here, detaching its probes.)
    node0.reset();
    node1.reset();
    using secs = std::chrono::duration<double>;
    std::printf("[ cross-node ] teardown: job %.1f s, prometheus %.1f s, agents %.1f s\n",
                secs(t_sim - t).count(), secs(t_prom - t_sim).count(),
                secs(std::chrono::steady_clock::now() - t_prom).count());
    // Logs stay for a failed test (diagnostics() names the folder).
    std::error_code ec;
    if (!dir.empty() && !::testing::Test::HasFailure()) fs::remove_all(dir, ec);
  }

  // Two agents, one per simulated node, then Prometheus on them with the
  // shipped rules, or (stall_threshold_s > 0) a copy of them with that hang
  // threshold. Returns "" or what went wrong (the rules loaded with errors too).
  std::string start(const std::string& tag, int stall_threshold_s = 0) {
    const auto t0 = std::chrono::steady_clock::now();
    dir = make_temp_dir(tag);
    job = tag + "-" + std::to_string(getpid());
    fs::path rules = kRules;
    if (stall_threshold_s > 0) {
      rules = dir / "argus-rules-test-copy.yaml";
      const int n = write_rules_with_stall_threshold(rules, stall_threshold_s);
      if (n != 4)
        return "the hang threshold no longer reads `job_id:argus_collective_stalled_seconds:max > 60` 4 times in " +
               kRules.string() + " (" + std::to_string(n) + ")";
    }
    fs::create_directories(dir / "node-0");
    fs::create_directories(dir / "node-1");
    node0 = std::make_unique<Agent>(dir / "node-0", std::vector<std::string>{"--only-env", "ARGUS_SIM_NODE=node-0",
                                                                             "--node", "node-0", "--window", "5"});
    node1 = std::make_unique<Agent>(dir / "node-1", std::vector<std::string>{"--only-env", "ARGUS_SIM_NODE=node-1",
                                                                             "--node", "node-1", "--window", "5"});
    if (!node0->wait_ready()) return "agent node-0 not ready:\n" + node0->log();
    if (!node1->wait_ready()) return "agent node-1 not ready:\n" + node1->log();
    prom = std::make_unique<Prometheus>(dir, std::vector<std::string>{address_of(*node0), address_of(*node1)}, rules);
    if (!prom->wait_ready()) return "prometheus not ready:\n" + prom->log();
    if (const std::string health = prom->rule_health(); !health.empty()) return "rule errors: " + health;
    std::printf("[ cross-node ] agents and prometheus ready in %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return "";
  }

  void start_job(const std::vector<std::string>& faults) {
    std::vector<std::string> extra = {"--nodes", "2"};
    extra.insert(extra.end(), faults.begin(), faults.end());
    auto args = sim_args(dir / "truth", job, 8, 0, extra);
    sim = std::make_unique<Child>(args, dir / "sim.log");
  }

  // What to print when a check fails: both nodes' verdicts and every figure the rules used.
  std::string diagnostics() const {
    std::ostringstream d;
    d << "job " << job << ", files in " << dir.string() << "\n";
    const std::string sel = "{job_id=\"" + job + "\"}";
    for (const char* q : {"argus_collective_wait_ratio", "job_id:argus_collective_wait_ratio:median",
                          "job_id:argus_collective_wait_ratio:straggler_threshold", "argus:rank_slowness",
                          "argus:straggler", "argus_straggler", "argus_nccl_last_seq",
                          "instance_job_id:argus_nccl_last_seq:max", "argus_collective_stalled_seconds",
                          "job_id:argus_collective_stalled_seconds:max", "argus:hang_missing_rank",
                          "argus_hang_missing_rank", "job_id_node:argus_collective_wait_ratio:median",
                          "job_id_node:argus_collective_wait_ratio:max",
                          "job_id:argus_collective_wait_ratio:slow_node_threshold", "argus:slow_node", "ALERTS"}) {
      d << q << ":";
      for (const auto& s : prom->query(std::string(q) + sel)) {
        const auto& m = s.at("metric");
        d << " [";
        for (const char* l : {"instance", "node", "rank", "comm", "alertname", "alertstate"})
          if (m.contains(l)) d << l << "=" << m.at(l).get<std::string>() << " ";
        d << s.at("value").at(1).get<std::string>() << "]";
      }
      d << "\n";
    }
    d << "rule errors: " << prom->rule_health() << "\n";
    d << "sim log:\n" << read_text(dir / "sim.log") << "\nprometheus log:\n" << prom->log();
    return d.str();
  }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One slow rank (6, 3x host compute) on node-1; node-0 holds only healthy
// ranks, and the median is shared by both nodes. The rules, over both agents'
// series, must name rank 6 and nobody else: the recorded verdict
// argus:straggler within seconds, and the ArgusStraggler alert once its
// `for: 30s` has passed.
// Asynchronous NCCL (the sim's default, as real NCCL) on two simulated nodes:
// a host-slow rank is named by the wait rules (collective + synchronize), a
// GPU-slow one by the GPU layer's NCCL-kernel share.
struct CrossNodeCase {
  const char* name;
  std::vector<std::string> fault;
  const char* count_rule;  // how many ranks are judged
  const char* verdict;     // the recording that names the straggler
  const char* alert;
};
// gtest prints a case by its name (ctest lists the tests by it).
inline void PrintTo(const CrossNodeCase& c, std::ostream* os) { *os << c.name; }

class CrossNodeStraggler : public ::testing::TestWithParam<CrossNodeCase> {};

TEST_P(CrossNodeStraggler, PrometheusRulesNameStragglerOnOtherNode) {
  ARGUS_REQUIRE_ROOT();
  require_prometheus();
  if (HasFatalFailure() || IsSkipped()) return;
  const CrossNodeCase c = GetParam();
  CrossNodeRig rig;
  const std::string err = rig.start(std::string("x") + c.name);
  ASSERT_EQ(err, "");

  const auto t0 = std::chrono::steady_clock::now();
  rig.start_job(c.fault);
  const std::string sel = "{job_id=\"" + rig.job + "\"}";

  // The recording names rank 6 alone, and keeps naming it alone: no other rank
  // is named once every rank has been judged for a full window (5 s), nor ever
  // alerted on (firing; a pending alert is the recording itself). Then
  // ArgusStraggler fires (after its `for: 30s`) for rank 6 alone, with a
  // summary naming the rank and the job.
  std::set<std::string> named, firing, ever_named, wrongly_named, wrongly_alerted;
  std::string summary;
  double all_judged_at = -1, named_alone_at = -1, firing_at = -1;
  // (Bounded so that the test, with the agents' ~10-30 s teardown, stays under 90 s.)
  while (seconds_since(t0) < 55 && firing_at < 0) {
    std::this_thread::sleep_for(1s);
    ASSERT_TRUE(rig.sim->running()) << read_text(rig.dir / "sim.log");
    const auto judged = rig.prom->query(c.count_rule + sel);
    if (!judged.empty() && judged[0].at("value").at(1).get<std::string>() == "8" && all_judged_at < 0)
      all_judged_at = seconds_since(t0);
    named = rig.prom->label_values(c.verdict + sel, "rank");
    firing = rig.prom->label_values(
        std::string("ALERTS{alertname=\"") + c.alert + "\",alertstate=\"firing\",job_id=\"" + rig.job + "\"}", "rank");
    ever_named.insert(named.begin(), named.end());
    if (all_judged_at >= 0 && seconds_since(t0) > all_judged_at + 5)
      for (const auto& r : named)
        if (r != "6") wrongly_named.insert(r);
    for (const auto& r : firing)
      if (r != "6") wrongly_alerted.insert(r);
    if (named_alone_at < 0 && named == std::set<std::string>{"6"}) named_alone_at = seconds_since(t0);
    if (firing == std::set<std::string>{"6"}) {
      firing_at = seconds_since(t0);
      json doc = rig.prom->api("alerts");
      if (doc.is_object())
        for (const auto& a : doc.value("alerts", json::array()))
          if (a.at("labels").value("alertname", "") == c.alert && a.at("labels").value("job_id", "") == rig.job)
            summary = a.at("annotations").value("summary", "");
    }
  }
  std::printf("[ cross-node %s ] all 8 ranks judged at %.1f s, rank 6 named alone at %.1f s, %s firing at "
              "%.1f s; ever named %s\n",
              c.name, all_judged_at, named_alone_at, c.alert, firing_at, set_text(ever_named).c_str());
  EXPECT_GE(named_alone_at, 0) << "named " << set_text(named) << "\n" << rig.diagnostics();
  EXPECT_LE(named_alone_at, 60) << rig.diagnostics();
  EXPECT_GE(firing_at, 0) << "firing for " << set_text(firing) << "\n" << rig.diagnostics();
  EXPECT_EQ(named, std::set<std::string>{"6"}) << rig.diagnostics();
  EXPECT_TRUE(wrongly_named.empty()) << "also named " << set_text(wrongly_named) << "\n" << rig.diagnostics();
  EXPECT_TRUE(wrongly_alerted.empty()) << "also firing for " << set_text(wrongly_alerted) << "\n" << rig.diagnostics();
  EXPECT_NE(summary.find("Rank 6 of job " + rig.job + " is "), std::string::npos) << summary;

  // The rank is on the other node: node-1's agent exports it, node-0's does not.
  const auto where = rig.prom->label_values("argus_rank_info{job_id=\"" + rig.job + "\",rank=\"6\"}", "instance");
  EXPECT_EQ(where, std::set<std::string>{address_of(*rig.node1)}) << rig.diagnostics();
  // Its slowness is recorded with it: a 3x host slowdown reads clearly above 1.5x.
  const auto slow = rig.prom->query(c.verdict + sel);
  ASSERT_EQ(slow.size(), 1u) << rig.diagnostics();
  EXPECT_GT(std::stod(slow[0].at("value").at(1).get<std::string>()), 1.5) << rig.diagnostics();
  EXPECT_EQ(rig.prom->rule_health(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Async, CrossNodeStraggler,
    ::testing::Values(CrossNodeCase{"host", {"--straggler", "6:3"}, "job_id:argus_collective_wait_ratio:count",
                                    "argus:straggler", "ArgusStraggler"},
                      CrossNodeCase{"gpu", {"--gpu-slow", "6:3"}, "job_id:argus_gpu_nccl_kernel_ratio:count",
                                    "argus:gpu_straggler", "ArgusGpuStraggler"}),
    [](const auto& info) { return std::string(info.param.name); });

// Rank 5 on node-1 stops before a collective (--hang 5:STEP); every other rank,
// on both nodes, sits in it. With the stall threshold at 5 s (a test copy of
// the rules), argus:hang_missing_rank must name rank 5 alone and
// ArgusCollectiveHang must fire naming it.
TEST(CrossNode, PrometheusRulesNameHungRankOnOtherNode) {
  ARGUS_REQUIRE_ROOT();
  require_prometheus();
  if (HasFatalFailure() || IsSkipped()) return;
  CrossNodeRig rig;
  const std::string err = rig.start("xhang", 5);
  ASSERT_EQ(err, "");

  const auto t0 = std::chrono::steady_clock::now();
  rig.start_job({"--hang", "5:100"});
  const std::string sel = "{job_id=\"" + rig.job + "\"}";

  std::set<std::string> missing, firing, stragglers;
  std::string summary;
  int stable = 0;
  while (seconds_since(t0) < 45 && stable < 3) {
    std::this_thread::sleep_for(1s);
    missing = rig.prom->label_values("argus:hang_missing_rank" + sel, "rank");
    for (const auto& r : rig.prom->label_values("argus:straggler" + sel, "rank")) stragglers.insert(r);
    firing = rig.prom->label_values(
        "ALERTS{alertname=\"ArgusCollectiveHang\",alertstate=\"firing\",job_id=\"" + rig.job + "\"}", "job_id");
    summary.clear();
    json alerts = rig.prom->api("alerts");
    if (alerts.is_object())
      for (const auto& a : alerts.value("alerts", json::array()))
        if (a.at("labels").value("alertname", "") == "ArgusCollectiveHang" &&
            a.at("labels").value("job_id", "") == rig.job)
          summary = a.at("annotations").value("summary", "");
    const bool ok = missing == std::set<std::string>{"5"} && !firing.empty() &&
                    summary.size() >= 8 && summary.substr(summary.size() - 8) == ": rank 5";
    stable = ok ? stable + 1 : 0;
  }
  const double took = seconds_since(t0);
  std::printf("[ cross-node ] hung rank named alone after %.1f s (stall threshold 5 s); stragglers named meanwhile %s\n",
              took, set_text(stragglers).c_str());
  EXPECT_EQ(stable, 3) << "missing " << set_text(missing) << ", firing for " << set_text(firing) << ", summary '"
                       << summary << "'\n"
                       << rig.diagnostics();
  const auto where = rig.prom->label_values("argus_rank_info{job_id=\"" + rig.job + "\",rank=\"5\"}", "instance");
  EXPECT_EQ(where, std::set<std::string>{address_of(*rig.node1)}) << rig.diagnostics();
  EXPECT_EQ(rig.prom->rule_health(), "");
}

// A whole node slow: tensor parallel inside each node (TP 4: ranks 0-3 and
// 4-7), data parallel across them, and every rank of node-1 slow on its host
// (1.5x) or on its GPU (2x, NCCL-kernel shares from the sim's GPU records).
// Half the job is slow, so no rank stands out of the job's spread (the median
// falls between the halves) and node-1's agent sees only slow ranks: only the
// node rules can name it. The verdict must name node-1 alone, with the
// slowness the simulator injected, its alert must fire for it, and the
// per-rank alert for nobody.
struct SlowNodeCase {
  const char* name;
  const char* flag;        // the sim's fault, given to each rank of node-1
  const char* factor;
  const char* truth_kind;  // the fault's kind in the truth
  const char* verdict;
  const char* alert;
  const char* rank_alert;
  // Whether the slowness reads the injected factor (the host's compute is the
  // whole of a rank's time outside its waits), or only lies between 1.2 and it
  // (the GPU's time outside NCCL kernels holds idle gaps the fault does not
  // lengthen, only its compute kernels).
  bool reads_factor;
};
inline void PrintTo(const SlowNodeCase& c, std::ostream* os) { *os << c.name; }

class CrossNodeSlowNode : public ::testing::TestWithParam<SlowNodeCase> {};

TEST_P(CrossNodeSlowNode, PrometheusRulesNameTheWholeNode) {
  ARGUS_REQUIRE_ROOT();
  require_prometheus();
  if (HasFatalFailure() || IsSkipped()) return;
  const SlowNodeCase c = GetParam();
  CrossNodeRig rig;
  const std::string err = rig.start(std::string("xnode") + c.name);
  ASSERT_EQ(err, "");

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> faults = {"--tp", "4", "--jitter", "10"};
  for (int r : {4, 5, 6, 7}) faults.insert(faults.end(), {c.flag, std::to_string(r) + ":" + c.factor});
  rig.start_job(faults);
  const std::string sel = "{job_id=\"" + rig.job + "\"}";
  auto alerting = [&](const std::string& alert, const char* label) {
    return rig.prom->label_values(
        "ALERTS{alertname=\"" + alert + "\",alertstate=\"firing\",job_id=\"" + rig.job + "\"}", label);
  };

  std::set<std::string> slow, firing, ever_slow, rank_alerts;
  double named_at = -1, firing_at = -1;
  while (seconds_since(t0) < 60 && firing_at < 0) {
    std::this_thread::sleep_for(1s);
    ASSERT_TRUE(rig.sim->running()) << read_text(rig.dir / "sim.log");
    slow = rig.prom->label_values(c.verdict + sel, "node");
    ever_slow.insert(slow.begin(), slow.end());
    if (named_at < 0 && slow == std::set<std::string>{"node-1"}) named_at = seconds_since(t0);
    firing = alerting(c.alert, "node");
    for (const auto& r : alerting(c.rank_alert, "rank")) rank_alerts.insert(r);
    if (firing == std::set<std::string>{"node-1"}) firing_at = seconds_since(t0);
  }
  const auto value = rig.prom->query(c.verdict + sel);
  std::printf("[ cross-node %s ] slow node-1 named at %.1f s, %s firing at %.1f s; ever named %s; %s firing for %s\n",
              c.name, named_at, c.alert, firing_at, set_text(ever_slow).c_str(), c.rank_alert,
              set_text(rank_alerts).c_str());
  EXPECT_GE(named_at, 0) << "named " << set_text(slow) << "\n" << rig.diagnostics();
  EXPECT_GE(firing_at, 0) << "firing for " << set_text(firing) << "\n" << rig.diagnostics();
  EXPECT_EQ(ever_slow, std::set<std::string>{"node-1"}) << rig.diagnostics();
  EXPECT_TRUE(rank_alerts.empty()) << c.rank_alert << " for ranks " << set_text(rank_alerts) << "\n"
                                   << rig.diagnostics();
  ASSERT_EQ(value.size(), 1u) << rig.diagnostics();
  const double slowness = std::stod(value[0].at("value").at(1).get<std::string>());

  // The slowness against what the simulator injected (its truth, written as the job stops).
  rig.sim.reset();
  const auto truth = read_truth(rig.dir / "truth");
  std::set<double> factors;
  for (const auto& [rank, t] : truth)
    for (const auto& f : t.value("faults", json::array()))
      if (f.value("kind", "") == c.truth_kind) factors.insert(f.at("factor").get<double>());
  ASSERT_EQ(factors.size(), 1u) << "the truth's " << c.truth_kind << " factors";
  std::printf("[ cross-node %s ] node-1 slowness %.3f, injected %.2f\n", c.name, slowness, *factors.begin());
  if (c.reads_factor) {
    EXPECT_NEAR(slowness, *factors.begin(), 0.2) << rig.diagnostics();
  } else {
    EXPECT_GT(slowness, 1.2) << rig.diagnostics();
    EXPECT_LE(slowness, *factors.begin()) << rig.diagnostics();
  }
  EXPECT_EQ(rig.prom->rule_health(), "");
}

INSTANTIATE_TEST_SUITE_P(
    Async, CrossNodeSlowNode,
    ::testing::Values(SlowNodeCase{"host", "--straggler", "1.5", "straggler", "argus:slow_node", "ArgusSlowNode",
                                   "ArgusStraggler", true},
                      SlowNodeCase{"gpu", "--gpu-slow", "2", "gpu_slow", "argus:gpu_slow_node", "ArgusGpuSlowNode",
                                   "ArgusGpuStraggler", false}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace argus::itest
