// A rank's Kubernetes identity end to end, as root: simulated ranks run in
// cgroups shaped as the kubelet and containerd make them (cgroupfs driver on a
// v1 hierarchy; systemd driver on the v2 one), next to a /var/log/pods and
// /var/log/containers fixture. The agent must put exactly the namespace, pod and
// container the fixture lays out on argus_rank_info, and on no other series.
#include "tests/integration/harness.h"

#include <httplib.h>

#include <fstream>
#include <set>

#include "tests/support/tls_cert.h"

#include "userspace/procfs/capabilities.h"

namespace argus::itest {
namespace {

const std::string kIdTrainer = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90";
const std::string kIdSidecar = "0000c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e0000";
const std::string kIdWorker = "ffffc3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7effff";

// A cgroup the test makes (with its parents), emptied back into the root and
// removed, innermost first, at the end.
class KubeCgroup {
 public:
  KubeCgroup(fs::path root, const fs::path& rel) : root_(std::move(root)) {
    fs::path p = root_;
    for (const auto& part : rel) {
      p /= part;
      if (!fs::exists(p)) {
        fs::create_directory(p);
        made_.push_back(p);
      }
    }
    dir_ = p;
  }
  ~KubeCgroup() {
    std::istringstream procs(read_text(dir_ / "cgroup.procs"));
    std::string pid;
    while (procs >> pid) std::ofstream(root_ / "cgroup.procs") << pid;
    for (auto it = made_.rbegin(); it != made_.rend(); ++it)
      for (int i = 0; i < 50 && fs::exists(*it); ++i) {
        if (::rmdir(it->c_str()) == 0) break;
        std::this_thread::sleep_for(100ms);
      }
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path root_, dir_;
  std::vector<fs::path> made_;
};

void pod_fixture(const fs::path& logs, const std::string& ns, const std::string& pod, const std::string& uid,
                 const std::vector<std::pair<std::string, std::string>>& containers) {
  const fs::path pod_dir = logs / "pods" / (ns + "_" + pod + "_" + uid);
  fs::create_directories(logs / "containers");
  for (const auto& [name, id] : containers) {
    fs::create_directories(pod_dir / name);
    std::ofstream(pod_dir / name / "0.log") << "started\n";
    fs::create_symlink(pod_dir / name / "0.log",
                       logs / "containers" / (pod + "_" + ns + "_" + name + "-" + id + ".log"));
  }
}

std::string shell_quote_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "'" : " '") + a + "'";
  return out;
}

// The sim started inside `cgroup` (it joins before it execs, so its ranks are born there).
std::unique_ptr<Child> sim_in(const fs::path& cgroup, const std::vector<std::string>& args, const fs::path& log,
                              const std::string& tag) {
  const std::string cmd = "echo $$ > '" + (cgroup / "cgroup.procs").string() + "' && exec " + shell_quote_join(args);
  return std::make_unique<Child>(std::vector<std::string>{"/bin/sh", "-c", cmd}, log,
                                 std::vector<std::string>{"ARGUS_POD_TEST=" + tag});
}

// The value of one label in a series line, "" when absent.
std::string label_of(const std::string& line, const std::string& name) {
  const std::string key = name + "=\"";
  size_t at = line.find("{" + key);
  if (at == std::string::npos) at = line.find("," + key);
  if (at == std::string::npos) return "";
  at += key.size() + 1;
  return line.substr(at, line.find('"', at) - at);
}

TEST(PodIdentity, RankInfoCarriesThePodTheCgroupAndLogDirsName) {
  ARGUS_REQUIRE_ROOT();
  const fs::path v1 = "/sys/fs/cgroup/pids", v2 = "/sys/fs/cgroup/unified";
  if (!fs::exists(v1 / "cgroup.procs") || !fs::exists(v2 / "cgroup.procs")) {
    if (ci()) FAIL() << "CI=true and no v1 pids hierarchy at " << v1 << " or v2 tree at " << v2;
    GTEST_SKIP() << "needs a v1 pids hierarchy at " << v1 << " and the v2 tree at " << v2;
  }
  const fs::path dir = make_temp_dir("pods");
  const std::string tag = std::to_string(getpid());
  // Unique per run: a leftover cgroup of an aborted run cannot collide.
  char uid_a[37], uid_b[37];
  std::snprintf(uid_a, sizeof(uid_a), "%08x-1a2b-4c3d-8e9f-0a1b2c3d4e5f", static_cast<unsigned>(getpid()));
  std::snprintf(uid_b, sizeof(uid_b), "%08x-5555-4666-8777-888899990000", static_cast<unsigned>(getpid()));
  std::string uid_b_slice = uid_b;
  std::replace(uid_b_slice.begin(), uid_b_slice.end(), '-', '_');

  // Pod A: cgroupfs driver, Burstable, on v1 pids; two containers, the ranks in "trainer".
  // Pod B: systemd driver with containerd, Guaranteed, on v2; one container, no links for it.
  const fs::path logs = dir / "logs";
  pod_fixture(logs, "team-a", "trainer-0", uid_a, {{"trainer", kIdTrainer}, {"sidecar", kIdSidecar}});
  fs::create_directories(logs / "pods" / ("team-b_worker-7_" + std::string(uid_b)) / "worker");
  fs::create_directories(logs / "pods" / "junk_without_uid");  // counted, skipped
  KubeCgroup cg_a(v1, fs::path("kubepods") / "burstable" / ("pod" + std::string(uid_a)) / kIdTrainer);
  KubeCgroup cg_b(v2, fs::path("kubepods.slice") / ("kubepods-pod" + uid_b_slice + ".slice") /
                          ("cri-containerd-" + kIdWorker + ".scope"));

  const std::string job_a = "pods-a-" + tag, job_b = "pods-b-" + tag;
  auto sim_a = sim_in(cg_a.dir(), sim_args(dir / "truth-a", job_a, 2, 0), dir / "sim-a.log", tag);
  auto sim_b = sim_in(cg_b.dir(), sim_args(dir / "truth-b", job_b, 1, 0), dir / "sim-b.log", tag);

  Agent agent(dir, {"--only-env", "ARGUS_POD_TEST=" + tag, "--pod-logs-dir", (logs / "pods").string(),
                    "--container-logs-dir", (logs / "containers").string()});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();

  // Every rank named, in /api/v1/ranks.
  auto pods_of = [&]() {
    std::map<std::pair<std::string, int>, json> out;
    if (auto doc = agent.get_json("/api/v1/ranks"))
      for (const auto& r : (*doc)["ranks"])
        if (r["job_id"].is_string() && r["rank"].is_number() && !r["pod"].is_null())
          out[{r["job_id"], r["rank"]}] = r["pod"];
    return out;
  };
  ASSERT_TRUE(eventually(
      [&] {
        const auto p = pods_of();
        return p.size() == 3 && p.at({job_b, 0})["container"].is_string();
      },
      60s))
      << agent.log();
  const auto pods = pods_of();
  for (int rank : {0, 1})
    EXPECT_EQ(pods.at({job_a, rank}), (json{{"namespace", "team-a"},
                                            {"pod", "trainer-0"},
                                            {"container", "trainer"},
                                            {"pod_uid", uid_a},
                                            {"container_id", kIdTrainer},
                                            {"source", "logs"}}));
  // No link for pod B's container: named by its only container dir.
  EXPECT_EQ(pods.at({job_b, 0}), (json{{"namespace", "team-b"},
                                       {"pod", "worker-7"},
                                       {"container", "worker"},
                                       {"pod_uid", uid_b},
                                       {"container_id", kIdWorker},
                                       {"source", "logs"}}));

  // On /metrics: exactly these labels on argus_rank_info, on no other series.
  const std::string text = agent.get_text("/metrics");
  std::istringstream in(text);
  std::map<std::pair<std::string, std::string>, std::string> info;
  size_t rank_series = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const std::string job = label_of(line, "job_id");
    if (line.rfind("argus_rank_info{", 0) == 0) {
      if (job != job_a && job != job_b) continue;
      info[{job, label_of(line, "rank")}] =
          label_of(line, "namespace") + "/" + label_of(line, "pod") + "/" + label_of(line, "container");
      continue;
    }
    if (job != job_a && job != job_b) continue;
    ++rank_series;
    EXPECT_EQ(label_of(line, "namespace"), "") << line;
    EXPECT_EQ(label_of(line, "pod"), "") << line;
    EXPECT_EQ(label_of(line, "container"), "") << line;
  }
  EXPECT_GT(rank_series, 10u);  // the ranks' other series are there, without the labels
  EXPECT_EQ(info,
            (std::map<std::pair<std::string, std::string>, std::string>{{{job_a, "0"}, "team-a/trainer-0/trainer"},
                                                                        {{job_a, "1"}, "team-a/trainer-0/trainer"},
                                                                        {{job_b, "0"}, "team-b/worker-7/worker"}}))
      << text;
  EXPECT_GE(metric_value(text, "argus_agent_pod_lookups_total", {{"result", "found"}}), 3);
  EXPECT_GE(metric_value(text, "argus_agent_pod_source_skips_total", {{"reason", "pod_dir_malformed"}}), 1);
  std::error_code ec;
  if (!::testing::Test::HasFailure()) fs::remove_all(dir, ec);  // kept for a failed test's logs
}

// The agent in a cgroup namespace of its own, as a container on cgroup v2 gets
// one: read from there, a rank's /proc/PID/cgroup is "/../kubepods/...". The
// agent joins the node's cgroup namespace at start, so the rank's pod is named
// and its cgroup found under the node's mount (cpu.stat read).
TEST(PodIdentity, AgentInItsOwnCgroupNamespaceNamesThePodAndReadsItsCgroup) {
  ARGUS_REQUIRE_ROOT();
  const fs::path cpu = "/sys/fs/cgroup/cpu", v2 = "/sys/fs/cgroup/unified";
  if (!fs::exists(cpu / "cgroup.procs") || !fs::exists(v2 / "cgroup.procs")) {
    if (ci()) FAIL() << "CI=true and no v1 cpu hierarchy at " << cpu << " or v2 tree at " << v2;
    GTEST_SKIP() << "needs a v1 cpu hierarchy at " << cpu << " and the v2 tree at " << v2;
  }
  const fs::path dir = make_temp_dir("pods-cgns");
  const std::string tag = std::to_string(getpid());
  char uid[37];
  std::snprintf(uid, sizeof(uid), "%08x-7777-4888-8999-aaaabbbbcccc", static_cast<unsigned>(getpid()));
  const fs::path logs = dir / "logs";
  pod_fixture(logs, "team-c", "trainer-3", uid, {{"trainer", kIdTrainer}});
  const fs::path pod_rel = fs::path("kubepods") / "burstable" / ("pod" + std::string(uid)) / kIdTrainer;
  KubeCgroup cg_rank(cpu, pod_rel);
  KubeCgroup agent_cpu(cpu, "argus-agent-" + tag), agent_v2(v2, "argus-agent-" + tag);

  const std::string job = "pods-c-" + tag;
  auto sim = sim_in(cg_rank.dir(), sim_args(dir / "truth", job, 1, 0), dir / "sim.log", tag);
  // The agent joins its own cgroups, then unshares a cgroup namespace rooted there.
  const std::string enter = "echo $$ > '" + (agent_cpu.dir() / "cgroup.procs").string() + "' && echo $$ > '" +
                            (agent_v2.dir() / "cgroup.procs").string() + "' && exec unshare --cgroup \"$@\"";
  Agent agent(dir,
              {"--only-env", "ARGUS_POD_TEST=" + tag, "--pod-logs-dir", (logs / "pods").string(),
               "--container-logs-dir", (logs / "containers").string()},
              {"/bin/sh", "-c", enter, "sh"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  // sh execs unshare, which execs the agent: one pid, in the agent's cgroup.
  EXPECT_NE(read_text(agent_cpu.dir() / "cgroup.procs").find(std::to_string(agent.child().pid())), std::string::npos);

  json rank;
  ASSERT_TRUE(eventually(
      [&] {
        if (auto doc = agent.get_json("/api/v1/ranks"))
          for (const auto& r : (*doc)["ranks"])
            if (r["job_id"] == job && !r["pod"].is_null() && r["offcpu"].is_object() &&
                r["offcpu"]["cgroup_cpu"].is_object()) {
              rank = r;
              return true;
            }
        return false;
      },
      60s))
      << agent.log();
  EXPECT_EQ(rank["pod"]["namespace"], "team-c");
  EXPECT_EQ(rank["pod"]["pod"], "trainer-3");
  EXPECT_EQ(rank["pod"]["container"], "trainer");
  EXPECT_EQ(rank["pod"]["container_id"], kIdTrainer);
  EXPECT_EQ(rank["offcpu"]["cgroup_cpu"]["path"], "/" + pod_rel.string()) << rank.dump();
  EXPECT_NE(agent.log().find("cgroup namespace: joined the node's"), std::string::npos) << agent.log();
  std::error_code ec;
  if (!::testing::Test::HasFailure()) fs::remove_all(dir, ec);
}

// A fake apiserver for one pod: a PodList naming its container by id, then a
// watch that stays open (quiet) until the test ends.
class OnePodApiserver {
 public:
  OnePodApiserver(const testing_support::TlsFiles& tls, json pod) : svr_(tls.cert.c_str(), tls.key.c_str()) {
    svr_.Get("/api/v1/pods", [this, pod](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard lock(mu_);
        selectors_.insert(req.get_param_value("fieldSelector"));
      }
      if (req.get_param_value("watch") != "1") {
        res.set_content(json{{"kind", "PodList"}, {"metadata", {{"resourceVersion", "7"}}}, {"items", {pod}}}.dump(),
                        "application/json");
        return;
      }
      res.set_chunked_content_provider("application/json", [this](size_t, httplib::DataSink& sink) {
        while (!done_) std::this_thread::sleep_for(50ms);
        sink.done();
        return true;
      });
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~OnePodApiserver() {
    done_ = true;
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }
  std::set<std::string> selectors() {
    std::lock_guard lock(mu_);
    return selectors_;
  }

 private:
  httplib::SSLServer svr_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::set<std::string> selectors_;
};

// --pod-info apiserver end to end: the ranks' pod named from a list+watch over
// HTTPS with a bearer token and a CA (a local fake apiserver, not a real one).
TEST(PodIdentity, ApiserverModeNamesRanksFromTheWatch) {
  ARGUS_REQUIRE_ROOT();
  const fs::path v1 = "/sys/fs/cgroup/pids";
  if (!fs::exists(v1 / "cgroup.procs")) {
    if (ci()) FAIL() << "CI=true and no v1 pids hierarchy at " << v1;
    GTEST_SKIP() << "needs a v1 pids hierarchy at " << v1;
  }
  const fs::path dir = make_temp_dir("podapi");
  testing_support::TlsFiles tls;
  ASSERT_TRUE(testing_support::make_self_signed(dir.string(), tls)) << "openssl failed";
  std::ofstream(dir / "token") << "sa-token\n";
  const std::string tag = std::to_string(getpid());
  char uid[37];
  std::snprintf(uid, sizeof(uid), "%08x-7777-4888-8999-aaaabbbbcccc", static_cast<unsigned>(getpid()));
  const json pod = {{"kind", "Pod"},
                    {"metadata", {{"uid", uid}, {"namespace", "ml"}, {"name", "llama-0"}, {"resourceVersion", "6"}}},
                    {"status",
                     {{"containerStatuses",
                       {{{"name", "sidecar"}, {"containerID", "containerd://" + kIdSidecar}},
                        {{"name", "pytorch"}, {"containerID", "containerd://" + kIdTrainer}}}}}}};
  OnePodApiserver api(tls, pod);
  KubeCgroup cg(v1, fs::path("kubepods") / ("pod" + std::string(uid)) / kIdTrainer);
  const std::string job = "podapi-" + tag;
  auto sim = sim_in(cg.dir(), sim_args(dir / "truth", job, 1, 0), dir / "sim.log", tag);
  Agent agent(dir,
              {"--only-env", "ARGUS_POD_TEST=" + tag, "--node", "gpu-node-9", "--pod-info", "apiserver", "--kube-api",
               api.url(), "--kube-token-file", (dir / "token").string(), "--kube-ca-file", tls.cert});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  std::string line;
  ASSERT_TRUE(eventually(
      [&] {
        std::istringstream in(agent.get_text("/metrics"));
        for (std::string l; std::getline(in, l);)
          if (l.rfind("argus_rank_info{", 0) == 0 && label_of(l, "job_id") == job && !label_of(l, "container").empty())
            line = l;
        return !line.empty();
      },
      60s))
      << agent.log();
  EXPECT_EQ(label_of(line, "namespace"), "ml") << line;
  EXPECT_EQ(label_of(line, "pod"), "llama-0") << line;
  EXPECT_EQ(label_of(line, "container"), "pytorch") << line;
  const auto doc = agent.get_json("/api/v1/ranks");
  ASSERT_TRUE(doc);
  size_t named = 0;
  for (const auto& r : (*doc)["ranks"]) {
    if (r["job_id"] != job) continue;
    EXPECT_EQ(r["pod"]["source"], "apiserver") << r.dump();
    ++named;
  }
  EXPECT_EQ(named, 1u);
  EXPECT_EQ(api.selectors(), (std::set<std::string>{"spec.nodeName=gpu-node-9"}));
  std::error_code ec;
  if (!::testing::Test::HasFailure()) fs::remove_all(dir, ec);
}

// Opt-in apiserver mode with nowhere to connect: one line, exit 1 (not a silent blind agent).
TEST(AgentCli, PodInfoApiserverWithoutAnApiserver) {
  ARGUS_REQUIRE_ROOT();  // checked after the privilege check
  const auto dir = make_temp_dir("kubeapi");
  auto r = run_command({"/usr/bin/env", "-u", "KUBERNETES_SERVICE_HOST", bin("argus-agent"), "--pod-info", "apiserver",
                        "--listen", "127.0.0.1:" + std::to_string(free_port())},
                       dir, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--pod-info apiserver needs --kube-api URL or KUBERNETES_SERVICE_HOST"), std::string::npos)
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  auto bad = run_command({bin("argus-agent"), "--pod-info", "sometimes"}, dir, 30s);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--pod-info"), std::string::npos) << bad.output;
}

// The list the chart's capabilities mode must grant: the one the agent checks at start.
TEST(AgentCli, ListCapabilitiesPrintsTheCheckedList) {
  const auto dir = make_temp_dir("caps");
  auto r = run_command({bin("argus-agent"), "--list-capabilities"}, dir, 30s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> names;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);) {
    const size_t t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    ASSERT_NE(t2, std::string::npos) << "not NAME<TAB>LAYER<TAB>WITHOUT: " << line;
    EXPECT_EQ(line.find('\t', t2 + 1), std::string::npos) << line;
    EXPECT_EQ(line.rfind("CAP_", 0), 0u) << line;
    EXPECT_GT(line.size(), t2 + 1) << "no blindness named: " << line;
    names.push_back(line.substr(0, t1));
  }
  std::vector<std::string> want;
  for (const auto& c : check_capabilities(0).checks) want.push_back(c.name);
  EXPECT_EQ(names, want);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());  // no name twice
}

}  // namespace
}  // namespace argus::itest
