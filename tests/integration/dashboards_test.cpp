// The shipped Grafana dashboards (helm/argus/dashboards/*.json) against a real
// Prometheus, as root: an InfiniBand sysfs fixture with one sick link
// (argus-sim --ib-fixture --ib-only --degrade), one agent reading it
// (--sysfs-root) and following the kernel log, a simulated 4-rank job with a
// host straggler (GPU records from the sim's libcuda), an Xid line written to
// /dev/kmsg, and the Debian /usr/bin/prometheus scraping the agent every
// second (with the `node` label the chart's ServiceMonitor adds) and
// evaluating the shipped rules.
//
// Two more jobs: one whose rank exits (its peers then hang), and a Python rank.
// The straggler job's ranks run in a pod (a kubelet-shaped cgroup and log dirs)
// where the machine has a cgroup v2 tree.
//
// Every query of every dashboard (panel targets, rows' nested panels included,
// Prometheus annotations, query variables as `group by (label) (EXPR)`) runs
// through /api/v1/query, and graphs and annotations also through
// /api/v1/query_range, with the Grafana variables substituted by the values
// the jobs really have; each must parse, and every argus name in it must be a
// family the live agent exports or a name the rules record. The core panels
// (core_checks()) must return data, and where the simulator recorded a truth
// (its straggler, the rank that exited, the link it degraded, its ports, the
// NICs next to each rank's GPU, the ranks' pids, the pod) show exactly that.
// One file because it is one test: one costly scenario (the fixture, an agent,
// three jobs, a Prometheus) that every helper and check here reads.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <tuple>

#include "tests/dashboards.h"
#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

namespace dash = argus::dashboards;

const fs::path kRules = fs::path(ARGUS_SOURCE_DIR) / "helm/argus/rules/argus-rules.yaml";

// A Python rank (its interpreter and launcher environment make it one) that collects garbage.
constexpr const char* kGcLoop = "import gc, time\nwhile True:\n    gc.collect(0)\n    time.sleep(0.05)\n";

// Removes a tree at the end: the fixture (on tmpfs) always, the test's folder
// (logs, Prometheus' config) unless the test failed.
struct RemoveTree {
  fs::path path;
  bool keep_on_failure = false;
  ~RemoveTree() {
    std::error_code ec;
    if (!path.empty() && !(keep_on_failure && ::testing::Test::HasFailure())) fs::remove_all(path, ec);
  }
};

// A pod as the kubelet and containerd lay it out with the systemd cgroup driver
// on the v2 tree: the cgroup its container's processes run in, and the log
// directories the agent names pods by (--pod-logs-dir, --container-logs-dir).
// The cgroups are emptied back into the root and removed, innermost first.
class KubePod {
 public:
  KubePod(const fs::path& v2, const fs::path& logs, const std::string& tag)
      : root_(v2), ns_("team-dash"), pod_("trainer-" + tag), container_("trainer") {
    char uid[37];
    std::snprintf(uid, sizeof(uid), "%08x-d0d0-4a5b-8c9d-0e1f2a3b4c5d", static_cast<unsigned>(::getpid()));
    std::string slice_uid = uid;
    std::replace(slice_uid.begin(), slice_uid.end(), '-', '_');
    const std::string id = std::string(56, 'd') + [] {
      char h[9];
      std::snprintf(h, sizeof(h), "%08x", static_cast<unsigned>(::getpid()));
      return std::string(h);
    }();
    fs::path p = root_;
    for (const auto& part :
         {std::string("kubepods.slice"), "kubepods-pod" + slice_uid + ".slice", "cri-containerd-" + id + ".scope"}) {
      p /= part;
      if (!fs::exists(p)) {
        fs::create_directory(p);
        made_.push_back(p);
      }
    }
    cgroup_ = p;
    pod_logs_ = logs / "pods";
    container_logs_ = logs / "containers";
    const fs::path dir = pod_logs_ / (ns_ + "_" + pod_ + "_" + uid) / container_;
    fs::create_directories(dir);
    fs::create_directories(container_logs_);
    std::ofstream(dir / "0.log") << "started\n";
    fs::create_symlink(dir / "0.log", container_logs_ / (pod_ + "_" + ns_ + "_" + container_ + "-" + id + ".log"));
  }
  ~KubePod() {
    std::istringstream procs(read_text(cgroup_ / "cgroup.procs"));
    for (std::string pid; procs >> pid;) std::ofstream(root_ / "cgroup.procs") << pid;
    for (auto it = made_.rbegin(); it != made_.rend(); ++it)
      for (int i = 0; i < 50 && fs::exists(*it); ++i) {
        if (::rmdir(it->c_str()) == 0) break;
        std::this_thread::sleep_for(100ms);
      }
  }
  KubePod(const KubePod&) = delete;
  KubePod& operator=(const KubePod&) = delete;

  // A command line that joins the container's cgroup, then execs argv (its
  // children, the ranks, are born there).
  std::vector<std::string> run_inside(const std::vector<std::string>& argv) const {
    std::string cmd = "echo $$ > '" + (cgroup_ / "cgroup.procs").string() + "' && exec";
    for (const auto& a : argv) cmd += " '" + a + "'";
    return {"/bin/sh", "-c", cmd};
  }
  std::vector<std::string> agent_args() const {
    return {"--pod-logs-dir", pod_logs_.string(), "--container-logs-dir", container_logs_.string()};
  }
  const std::string& ns() const { return ns_; }
  const std::string& pod() const { return pod_; }
  const std::string& container() const { return container_; }

 private:
  fs::path root_, cgroup_, pod_logs_, container_logs_;
  std::string ns_, pod_, container_;
  std::vector<fs::path> made_;
};

// The cgroup v2 tree: /sys/fs/cgroup (unified) or /sys/fs/cgroup/unified (hybrid); "" without one.
fs::path cgroup_v2_root() {
  for (const char* p : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
    if (fs::exists(fs::path(p) / "cgroup.controllers") || fs::exists(fs::path(p) / "cgroup.max.depth")) return p;
  return "";
}

std::string set_text(const std::set<std::string>& s) {
  std::string out = "{";
  for (const auto& v : s) out += (out.size() > 1 ? "," : "") + v;
  return out + "}";
}

// What the simulator and its fixture recorded (never the agent's output).
struct Truth {
  std::string job, node;
  std::map<std::string, int> pid;                      // rank -> pid (job.json)
  std::map<std::string, int> local_rank;               // rank -> local rank (its GPU index)
  std::set<std::string> ranks, stragglers;             // stragglers: a "straggler" fault fired
  std::set<std::string> ports;                         // "device:port", every port of the fixture
  std::set<std::string> degraded;                      // "device:port:reason" injected
  std::map<std::string, std::set<std::string>> rails;  // rank -> "device:port" next to its GPU
  std::string xid_bus, xid_code = "13";                // the Xid line the test wrote
  std::string pod;  // "namespace/pod/container" of every rank ("" where no cgroup v2 tree lets the test make one)
  // A second job whose rank exits (its peers then hang), and a Python rank.
  std::string exit_job, py_job;
  std::set<std::string> exit_ranks, exited;  // exited: an "exit" fault fired
};

std::string pod_of(const json& m) {
  return m.value("namespace", "") + "/" + m.value("pod", "") + "/" + m.value("container", "");
}

// Every series names the ranks' pod (the argus_rank_info join); nothing to
// check where the test could make no pod.
std::string pods_named(const json& r, const Truth& t, bool with_container) {
  if (t.pod.empty()) return "";
  std::string bad;
  for (const auto& s : r) {
    if (s.at("metric").value("job_id", "") != t.job) continue;
    std::string got = pod_of(s.at("metric")), want = t.pod;
    if (!with_container) {
      got.resize(got.rfind('/'));
      want.resize(want.rfind('/'));
    }
    if (got != want) bad += " rank " + s.at("metric").value("rank", "") + " pod '" + got + "', want '" + want + "'";
  }
  return bad;
}

std::string port_key(const json& m) { return m.value("device", "") + ":" + m.value("port", ""); }

// The fixture's ports, its injected faults and each GPU's rails.
std::string read_fixture_truth(const fs::path& sys, Truth& t, std::map<int, std::set<std::string>>& gpu_rails) {
  const json f = json::parse(read_text(sys / "argus-sim-ib-truth.json"), nullptr, false);
  if (f.is_discarded()) return "fixture truth unreadable";
  std::map<std::string, std::vector<int>> device_ports;
  for (const auto& d : f.at("devices"))
    for (const auto& p : d.at("ports")) {
      device_ports[d.at("name").get<std::string>()].push_back(p.at("port").get<int>());
      t.ports.insert(d.at("name").get<std::string>() + ":" + std::to_string(p.at("port").get<int>()));
    }
  for (const auto& i : f.at("degrade")) {
    if (!i.value("injected", false)) return "fault not injected yet";
    t.degraded.insert(i.at("device").get<std::string>() + ":" + std::to_string(i.at("port").get<int>()) + ":" +
                      i.at("expected_reason").get<std::string>());
  }
  for (const auto& g : f.at("gpus"))
    for (const auto& r : g.at("rails"))
      for (int p : device_ports[r.get<std::string>()])
        gpu_rails[g.at("index").get<int>()].insert(r.get<std::string>() + ":" + std::to_string(p));
  // The driver names a GPU by domain:bus:device ("0000:14:00"), its PCI address less the function.
  const std::string pci = f.at("gpus").at(1).at("pci").get<std::string>();
  t.xid_bus = pci.substr(0, pci.rfind('.'));
  return "";
}

// The job's ranks and pids (job.json) and its stragglers (rank-N.json faults).
std::string read_job_truth(const fs::path& out, Truth& t) {
  if (!fs::exists(out / "job.json")) return "no job.json yet";
  const json j = json::parse(read_text(out / "job.json"), nullptr, false);
  if (j.is_discarded()) return "job.json unreadable";
  for (const auto& r : j.at("ranks")) {
    const std::string rank = std::to_string(r.at("rank").get<int>());
    t.ranks.insert(rank);
    t.pid[rank] = r.at("pid").get<int>();
    t.local_rank[rank] = r.at("local_rank").get<int>();
  }
  t.stragglers.clear();
  for (const auto& [rank, rj] : read_truth(out))
    for (const auto& f : rj.value("faults", json::array()))
      if (f.value("kind", "") == "straggler") t.stragglers.insert(std::to_string(rank));
  return t.stragglers.empty() ? "no straggler fault fired yet" : "";
}

// The metric families the agent exports (its TYPE lines) and the names the
// shipped rules record: every argus name a dashboard uses must be one of them
// (a misspelt name parses, and shows nothing, forever).
std::set<std::string> known_names(const std::string& metrics_text) {
  std::set<std::string> out;
  std::istringstream in(metrics_text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream w(line);
    std::string hash, type, name;
    if (w >> hash >> type >> name && hash == "#" && type == "TYPE") out.insert(name);
  }
  std::istringstream rules(read_text(kRules));
  for (std::string line; std::getline(rules, line);) {
    const auto at = line.find("- record:");
    if (at == std::string::npos || line.find_first_not_of(' ') != at) continue;
    std::istringstream w(line.substr(at + 9));
    std::string name;
    if (w >> name) out.insert(name);
  }
  return out;
}

// A range query's whole answer over the last `seconds` (as a graph panel or an
// annotation runs it), errors included.
json query_range_answer(const Prometheus& prom, const std::string& promql, int seconds, int step) {
  const long long now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto r = cli::http_get(
      prom.url("/api/v1/query_range?query=" + url_encode(promql) + "&start=" + std::to_string(now - seconds) +
               "&end=" + std::to_string(now) + "&step=" + std::to_string(step)),
      10s);
  if (!r.ok()) return json{{"status", "error"}, {"error", r.error()}};
  json doc = json::parse(r->body, nullptr, false);
  return doc.is_discarded() ? json{{"status", "error"}, {"error", "not JSON"}} : doc;
}

// The exit job's ranks (job.json) and the ranks whose exit fired (rank-N.json
// faults: a rank writes its file when a fault fires or when it ends).
std::string read_exit_truth(const fs::path& out, Truth& t) {
  t.exit_ranks.clear();
  t.exited.clear();
  if (!fs::exists(out / "job.json")) return "no job.json yet";
  const json j = json::parse(read_text(out / "job.json"), nullptr, false);
  if (j.is_discarded()) return "job.json unreadable";
  for (const auto& r : j.at("ranks")) t.exit_ranks.insert(std::to_string(r.at("rank").get<int>()));
  for (const auto& [rank, rj] : read_truth(out)) {
    for (const auto& f : rj.value("faults", json::array()))
      if (f.value("kind", "") == "exit") t.exited.insert(std::to_string(rank));
  }
  return t.exited.empty() ? "no exit fired yet" : "";
}

// The series of an instant query's answer.
json result_of(const json& answer) {
  if (answer.value("status", "") != "success") return json::array();
  const json data = answer.value("data", json::object());
  return data.value("result", json::array());
}

std::set<std::string> label_set(const json& result, const std::string& label) {
  std::set<std::string> out;
  for (const auto& s : result) out.insert(s.at("metric").value(label, ""));
  return out;
}

// The ranks of one job among the series.
std::set<std::string> ranks_of(const json& result, const std::string& job) {
  std::set<std::string> out;
  for (const auto& s : result)
    if (s.at("metric").value("job_id", "") == job) out.insert(s.at("metric").value("rank", ""));
  return out;
}

std::set<std::string> port_set(const json& result, bool with_reason = false) {
  std::set<std::string> out;
  for (const auto& s : result)
    out.insert(port_key(s.at("metric")) + (with_reason ? ":" + s.at("metric").value("reason", "") : ""));
  return out;
}

double value_of(const json& series) { return std::stod(series.at("value").at(1).get<std::string>()); }

// The rank of the largest value ("" when empty).
std::string rank_of_max(const json& result) {
  std::string best;
  double v = -1;
  for (const auto& s : result)
    if (value_of(s) > v) {
      v = value_of(s);
      best = s.at("metric").value("rank", "");
    }
  return best;
}

std::string expect_eq(const std::string& what, const std::set<std::string>& got, const std::set<std::string>& want) {
  return got == want ? "" : what + " " + set_text(got) + ", want " + set_text(want);
}

// A core panel (or annotation, or variable): it must return data, and
// `check` ("" = fine) compares it with the truth.
// Which job a check picks in $job_id (the cluster dashboard: the straggler
// job and the exit job together, as a multi-value selection).
enum class Pick { Main, Exit, Python };

struct Core {
  std::string uid;
  dash::Kind kind;
  std::string title, ref_id;
  std::function<std::string(const json& result, const Truth& t)> check;
  Pick pick = Pick::Main;
};

std::vector<Core> core_checks() {
  using K = dash::Kind;
  auto ranks_are_all = [](const json& r, const Truth& t) { return expect_eq("ranks", label_set(r, "rank"), t.ranks); };
  auto some = [](const json&, const Truth&) { return std::string(); };
  return {
      {"argus-cluster", K::Panel, "Ranks per job", "A",
       [](const json& r, const Truth& t) {
         for (const auto& s : r)
           if (s.at("metric").value("job_id", "") == t.job)
             return value_of(s) == static_cast<double>(t.ranks.size())
                        ? std::string()
                        : "job has " + std::to_string(value_of(s)) + " ranks, want " + std::to_string(t.ranks.size());
         return std::string("no row for the job");
       }},
      {"argus-cluster", K::Panel, "Ranks per job", "A",
       [](const json& r, const Truth& t) {
         for (const auto& s : r)
           if (s.at("metric").value("job_id", "") == t.exit_job)
             return value_of(s) == static_cast<double>(t.exit_ranks.size()) ? std::string() : "exit job: wrong count";
         return std::string("no row for the exit job");
       }},
      {"argus-cluster", K::Panel, "Ranks per job", "B",
       [](const json& r, const Truth& t) {
         std::string bad;
         for (const auto& job : {t.job, t.exit_job}) {
           bool one = false;
           for (const auto& s : r) one = one || (s.at("metric").value("job_id", "") == job && value_of(s) == 1);
           if (!one) bad += " job " + job + " not on 1 node";
         }
         return bad;
       }},
      {"argus-cluster", K::Panel, "Stragglers (across nodes)", "A",
       [](const json& r, const Truth& t) {
         return expect_eq("stragglers", ranks_of(r, t.job), t.stragglers) +
                expect_eq(" exit job's stragglers", ranks_of(r, t.exit_job), {}) + pods_named(r, t, false);
       }},
      {"argus-cluster", K::Panel, "Stragglers (node-local verdict)", "A",
       [](const json& r, const Truth& t) { return expect_eq("stragglers", ranks_of(r, t.job), t.stragglers); }},
      {"argus-cluster", K::Panel, "Rank deaths", "A",
       [](const json& r, const Truth& t) {
         std::string bad = expect_eq("dead", ranks_of(r, t.exit_job), t.exited) +
                           expect_eq(" dead in the straggler job", ranks_of(r, t.job), {});
         for (const auto& s : r)
           if (s.at("metric").value("reason", "") != "exit") bad += " reason " + s.at("metric").value("reason", "");
         return bad;
       }},
      {"argus-cluster", K::Panel, "Missing ranks", "A",
       [](const json& r, const Truth& t) {
         return expect_eq("missing", ranks_of(r, t.exit_job), t.exited) +
                expect_eq(" missing in the straggler job", ranks_of(r, t.job), {});
       }},
      {"argus-job", K::Annotation, "Rank exits", "",
       [](const json& r, const Truth& t) { return expect_eq("annotated", label_set(r, "rank"), t.exited); },
       Pick::Exit},
      {"argus-job", K::Annotation, "Hang: missing ranks", "",
       [](const json& r, const Truth& t) { return expect_eq("annotated", label_set(r, "rank"), t.exited); },
       Pick::Exit},
      {"argus-job", K::Panel, "Exited ranks", "A",
       [](const json& r, const Truth& t) {
         return value_of(r.at(0)) == static_cast<double>(t.exited.size()) ? "" : std::string("wrong count");
       },
       Pick::Exit},
      {"argus-job", K::Panel, "GC collections", "A",
       [](const json& r, const Truth&) { return expect_eq("ranks", label_set(r, "rank"), {"0"}); }, Pick::Python},
      {"argus-cluster", K::Panel, "Sick links", "A",
       [](const json& r, const Truth& t) { return expect_eq("sick links", port_set(r, true), t.degraded); }},
      {"argus-cluster", K::Panel, "GPU Xid errors", "A",
       [](const json& r, const Truth& t) {
         for (const auto& s : r)
           if (s.at("metric").value("pci_bus_id", "") == t.xid_bus && s.at("metric").value("xid", "") == t.xid_code &&
               value_of(s) >= 1)
             return std::string();
         return "no Xid " + t.xid_code + " on " + t.xid_bus;
       }},
      {"argus-cluster", K::Panel, "Argus alerts firing", "A",
       [](const json& r, const Truth& t) {
         for (const auto& s : r)
           if (s.at("metric").value("alertname", "") == "ArgusGpuXid" &&
               s.at("metric").value("pci_bus_id", "") == t.xid_bus)
             return std::string();
         return "ArgusGpuXid not firing for " + t.xid_bus;
       }},
      {"argus-cluster", K::Panel, "Tracked processes", "A", some},
      {"argus-cluster", K::Variable, "node", "",
       [](const json& r, const Truth& t) {
         return label_set(r, "node").count(t.node) ? "" : "node " + t.node + " missing";
       }},
      {"argus-job", K::Variable, "job_id", "",
       [](const json& r, const Truth& t) {
         return label_set(r, "job_id").count(t.job) ? "" : "job " + t.job + " missing";
       }},
      {"argus-job", K::Variable, "rank", "", ranks_are_all},
      {"argus-job", K::Panel, "Ranks", "A",
       [](const json& r, const Truth& t) {
         std::string bad = expect_eq("ranks", label_set(r, "rank"), t.ranks);
         for (const auto& s : r) {
           const auto& m = s.at("metric");
           if (m.value("node", "") != t.node) bad += " rank " + m.value("rank", "") + " on node " + m.value("node", "");
           const auto it = t.pid.find(m.value("rank", ""));
           if (it == t.pid.end() || m.value("pid", "") != std::to_string(it->second))
             bad += " rank " + m.value("rank", "") + " pid " + m.value("pid", "");
         }
         return bad + pods_named(r, t, true);
       }},
      {"argus-job", K::Panel, "Arrival lag per rank", "A",
       [](const json& r, const Truth& t) {
         std::string bad = expect_eq("ranks", label_set(r, "rank"), t.ranks);
         // The pod join keeps the rank's node.
         if (label_set(r, "node") != std::set<std::string>{t.node}) bad += " node " + set_text(label_set(r, "node"));
         if (t.stragglers.size() == 1 && rank_of_max(r) != *t.stragglers.begin())
           bad += " the latest rank is " + rank_of_max(r) + ", the straggler " + *t.stragglers.begin();
         return bad + pods_named(r, t, false);
       }},
      {"argus-job", K::Panel, "Straggler score", "A",
       [](const json& r, const Truth& t) {
         return t.stragglers.size() == 1 && rank_of_max(r) == *t.stragglers.begin()
                    ? std::string()
                    : "highest score: rank " + rank_of_max(r);
       }},
      {"argus-job", K::Panel, "Collective wait", "A", ranks_are_all},
      {"argus-job", K::Panel, "Synchronize wait", "A", ranks_are_all},
      {"argus-job", K::Panel, "GPU busy", "A", ranks_are_all},
      {"argus-job", K::Panel, "NCCL kernel share", "A", ranks_are_all},
      {"argus-job", K::Panel, "Collective calls by op", "A", ranks_are_all},
      {"argus-job", K::Panel, "Off-CPU by reason", "A", ranks_are_all},
      {"argus-job", K::Panel, "CPU", "A", ranks_are_all},
      {"argus-job", K::Annotation, "Stragglers", "",
       [](const json& r, const Truth& t) { return expect_eq("annotated", label_set(r, "rank"), t.stragglers); }},
      {"argus-node", K::Variable, "node", "",
       [](const json& r, const Truth& t) {
         return label_set(r, "node").count(t.node) ? "" : "node " + t.node + " missing";
       }},
      {"argus-node", K::Panel, "Degraded links", "A",
       [](const json& r, const Truth& t) { return expect_eq("degraded", port_set(r, true), t.degraded); }},
      {"argus-node", K::Panel, "Link up", "A",
       [](const json& r, const Truth& t) { return expect_eq("ports", port_set(r), t.ports); }},
      {"argus-node", K::Panel, "Receive bytes", "A",
       [](const json& r, const Truth& t) { return expect_eq("ports", port_set(r), t.ports); }},
      {"argus-node", K::Panel, "Transmit bytes", "A",
       [](const json& r, const Truth& t) { return expect_eq("ports", port_set(r), t.ports); }},
      {"argus-node", K::Panel, "Link utilisation", "A", some},
      {"argus-node", K::Panel, "Port errors by counter", "A",
       [](const json& r, const Truth& t) {
         std::string bad;
         for (const auto& d : t.degraded) {
           const std::string port = d.substr(0, d.rfind(':'));
           if (!port_set(r).count(port)) bad += " no errors on " + port;
         }
         return bad;
       }},
      {"argus-node", K::Panel, "Ranks per NIC", "A",
       [](const json& r, const Truth& t) {
         std::map<std::string, std::set<std::string>> got;
         for (const auto& s : r)
           if (s.at("metric").value("job_id", "") == t.job)
             got[s.at("metric").value("rank", "")].insert(port_key(s.at("metric")));
         std::string bad;
         for (const auto& rank : t.ranks) {
           const auto it = t.rails.find(rank);
           const std::set<std::string> want = it == t.rails.end() ? std::set<std::string>{} : it->second;
           if (got[rank] != want) bad += " rank " + rank + " " + set_text(got[rank]) + ", want " + set_text(want);
         }
         return bad + pods_named(r, t, false);
       }},
      {"argus-node", K::Panel, "Xid errors per GPU", "A",
       [](const json& r, const Truth& t) {
         return label_set(r, "pci_bus_id").count(t.xid_bus) ? "" : "no Xid on " + t.xid_bus;
       }},
      {"argus-node", K::Panel, "Events received", "A", some},  // in a collapsed row
  };
}

struct Dashboard {
  std::string uid;
  json doc;
  std::vector<dash::Query> queries;
  size_t panels = 0;
};

std::vector<Dashboard> load_dashboards() {
  std::vector<Dashboard> out;
  for (const auto& [file, uid] : dash::shipped()) {
    Dashboard d;
    d.uid = uid;
    d.doc = json::parse(read_text(fs::path(dash::dir()) / file), nullptr, false);
    if (d.doc.is_discarded()) continue;
    d.queries = dash::queries(d.doc);
    for (const json* p : dash::all_panels(d.doc))
      if (!dash::is_row(*p)) ++d.panels;
    out.push_back(std::move(d));
  }
  return out;
}

// The PromQL Grafana would send: variables substituted; a query variable's
// label_values(EXPR, label) as the series whose label values it lists.
std::string promql_of(const dash::Query& q, const std::map<std::string, std::string>& values) {
  std::string expr = q.expr;
  if (q.kind == dash::Kind::Variable) {
    if (auto lv = dash::parse_label_values(q.expr)) expr = "group by (" + lv->second + ") (" + lv->first + ")";
  }
  return dash::substitute(expr, values);
}

const dash::Query* find_query(const std::vector<Dashboard>& ds, const Core& c) {
  for (const auto& d : ds)
    if (d.uid == c.uid)
      for (const auto& q : d.queries)
        if (q.kind == c.kind && q.title == c.title && q.ref_id == c.ref_id) return &q;
  return nullptr;
}

TEST(Dashboards, EveryQueryRunsOnPrometheusAndCorePanelsShowTheTruth) {
  ARGUS_REQUIRE_ROOT();
  require_prometheus();
  if (HasFatalFailure() || IsSkipped()) return;
  const auto t0 = std::chrono::steady_clock::now();
  auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  const std::vector<Dashboard> dashboards = load_dashboards();
  ASSERT_EQ(dashboards.size(), dash::shipped().size()) << "a dashboard is not valid JSON";
  std::vector<Core> core = core_checks();
  for (const auto& c : core)
    ASSERT_NE(find_query(dashboards, c), nullptr) << c.uid << ": no " << c.title << " " << c.ref_id;

  const fs::path dir = make_temp_dir("dashboards");
  RemoveTree remove_dir{dir, true};  // declared first: removed after every process has stopped
  const std::string tag = std::to_string(::getpid());
  Truth truth;
  truth.job = "dash-" + tag;
  truth.node = "dash-node-" + tag;

  // The fixture first: the agent reads it as its --sysfs-root from the start.
  const fs::path sys = fs::path("/dev/shm") / ("argus-dashboards-" + tag);
  RemoveTree remove_sys{sys};
  Child fixture({bin("argus-sim"), "--ib-fixture", sys.string(), "--ib-only", "--ranks", "8", "--steps", "0",
                 "--step-ms", "100", "--degrade", "mlx5_1:1:errors@1", "--quiet"},
                dir / "fixture.log");
  ASSERT_TRUE(eventually([&] { return fs::exists(sys / "argus-sim-ib-truth.json"); }, 30s))
      << read_text(dir / "fixture.log");

  // The ranks run in a pod (cgroup and log dirs) where a cgroup v2 tree lets the test make one.
  std::unique_ptr<KubePod> pod;
  if (const fs::path v2 = cgroup_v2_root(); !v2.empty()) {
    pod = std::make_unique<KubePod>(v2, dir / "logs", tag);
    truth.pod = pod->ns() + "/" + pod->pod() + "/" + pod->container();
  } else {
    std::printf("[ dashboards ] no cgroup v2 tree: the ranks run in no pod, the pod join is not checked\n");
  }

  // Only this test's ranks (their launcher's environment), as one node.
  const std::string only = "ARGUS_DASHBOARDS_TEST=" + tag;
  std::vector<std::string> agent_args = {"--sysfs-root", sys.string(), "--window",   "5",
                                         "--node",       truth.node,   "--only-env", only};
  if (pod)
    for (const auto& a : pod->agent_args()) agent_args.push_back(a);
  Agent agent(dir, agent_args);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  Prometheus prom(dir, {address_of(agent)}, kRules, {{"node", truth.node}});
  ASSERT_TRUE(prom.wait_ready()) << prom.log();
  ASSERT_EQ(prom.rule_health(), "");
  const auto job_argv = sim_args(dir / "truth", truth.job, 4, 0, {"--straggler", "2:3"});
  Child sim(pod ? pod->run_inside(job_argv) : job_argv, dir / "sim.log", {only});
  const double job_started = since();
  // A job whose rank 1 exits at step 20 (its peers then hang in the next
  // collective), and a Python rank that collects garbage.
  truth.exit_job = "dash-exit-" + tag;
  truth.py_job = "dash-py-" + tag;
  Child exits(sim_args(dir / "truth-exit", truth.exit_job, 3, 0, {"--exit", "1:20"}), dir / "exit.log", {only});
  std::unique_ptr<Child> python;
  const std::string py = "/usr/bin/python3.11";
  if (fs::exists(py)) {
    python = std::make_unique<Child>(std::vector<std::string>{py, "-c", kGcLoop}, dir / "python.log",
                                     std::vector<std::string>{only, "RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0",
                                                              "TORCHELASTIC_RUN_ID=" + truth.py_job});
  } else {
    if (ci()) FAIL() << "CI=true and " << py << " missing";
    std::printf("[ dashboards ] no %s: the GC panels are not checked for data\n", py.c_str());
    core.erase(std::remove_if(core.begin(), core.end(), [](const Core& c) { return c.pick == Pick::Python; }),
               core.end());
  }

  std::map<int, std::set<std::string>> gpu_rails;
  std::string why;
  ASSERT_TRUE(eventually([&] { return (why = read_fixture_truth(sys, truth, gpu_rails)).empty(); }, 15s)) << why;
  ASSERT_TRUE(eventually([&] { return (why = read_job_truth(dir / "truth", truth)).empty(); }, 20s))
      << why << "\n"
      << read_text(dir / "sim.log");
  ASSERT_TRUE(eventually([&] { return (why = read_exit_truth(dir / "truth-exit", truth)).empty(); }, 20s))
      << why << "\n"
      << read_text(dir / "exit.log");
  for (const auto& [rank, local] : truth.local_rank) truth.rails[rank] = gpu_rails[local];

  // An Xid on GPU 1, as the driver writes it (the agent counts lines after its start).
  ASSERT_TRUE(write_kmsg("NVRM: Xid (PCI:" + truth.xid_bus + "): " + truth.xid_code +
                         ", pid=" + std::to_string(truth.pid["1"]) +
                         ", name=argus-sim, Graphics SM Warp Exception (dashboards test " + tag + ")"));

  auto regex_of = [](const std::set<std::string>& vs) {
    std::string s;
    for (const auto& v : vs) s += (s.empty() ? "" : "|") + v;
    return "(" + s + ")";
  };
  // As Grafana fills them in: the job picked (on the cluster dashboard, both
  // jobs: a multi-value regex), its node, every rank of it; $__rate_interval
  // at 10 s (Grafana's floor is 4 scrape intervals, here 4 s).
  auto values_for = [&](const std::string& uid, Pick pick) {
    std::map<std::string, std::string> v = {{"node", truth.node},       {"datasource", "prometheus"},
                                            {"__rate_interval", "10s"}, {"__interval", "2s"},
                                            {"__interval_ms", "2000"},  {"__range", "1m"},
                                            {"__range_s", "60"},        {"__range_ms", "60000"}};
    if (pick == Pick::Exit) {
      v["job_id"] = truth.exit_job;
      v["rank"] = regex_of(truth.exit_ranks);
    } else if (pick == Pick::Python) {
      v["job_id"] = truth.py_job;
      v["rank"] = "(0)";
    } else {
      v["job_id"] = uid == "argus-cluster" ? regex_of({truth.job, truth.exit_job}) : truth.job;
      v["rank"] = regex_of(truth.ranks);
    }
    return v;
  };

  // The core panels, until each shows the truth (the agent's window is 5 s,
  // the rules evaluate every second).
  auto core_failures = [&] {
    std::string all;
    for (const auto& c : core) {
      const dash::Query* q = find_query(dashboards, c);
      const auto values = values_for(c.uid, c.pick);
      const json r = result_of(prom.query_answer(promql_of(*q, values)));
      const std::string bad = r.empty() ? "no data" : c.check(r, truth);
      if (!bad.empty())
        all += "  " + c.uid + ": " + dash::describe(*q) + ": " + bad + "\n    " + promql_of(*q, values) + "\n";
    }
    return all;
  };
  std::string failures;
  while (since() < job_started + 40) {
    ASSERT_TRUE(sim.running()) << read_text(dir / "sim.log");
    failures = core_failures();
    if (failures.empty()) break;
    std::this_thread::sleep_for(1s);
  }
  const double core_at = since() - job_started;
  EXPECT_EQ(failures, "") << "core panels not showing the truth " << core_at << " s after the job started (files in "
                          << dir.string() << ")\nrule errors: " << prom.rule_health() << "\nsim log:\n"
                          << read_text(dir / "sim.log");

  // Every argus name is one the agent really exports or the rules record.
  const std::set<std::string> known = known_names(agent.get_text("/metrics"));
  EXPECT_GE(known.size(), 80u) << "the agent's /metrics has too few families";
  std::set<std::string> used;
  for (const auto& d : dashboards)
    for (const auto& q : d.queries)
      for (const auto& name : dash::argus_names(q.expr)) {
        used.insert(name);
        EXPECT_TRUE(known.count(name)) << d.uid << ": " << dash::describe(q) << " uses " << name
                                       << ", which the agent does not export and no rule records";
      }

  // Every query of every dashboard parses and runs.
  size_t total = 0, with_data = 0, panels = 0, ranged = 0;
  std::string empty_list;
  for (const auto& d : dashboards) {
    const auto values = values_for(d.uid, Pick::Main);
    size_t n = 0, data = 0;
    for (const auto& q : d.queries) {
      const std::string promql = promql_of(q, values);
      const auto left = dash::referenced_variables(promql);
      EXPECT_TRUE(left.empty()) << d.uid << ": " << dash::describe(q) << ": variable $" << *left.begin()
                                << " not substituted in " << promql;
      const json answer = prom.query_answer(promql);
      EXPECT_EQ(answer.value("status", ""), "success")
          << d.uid << ": " << dash::describe(q) << " does not run: " << answer.value("errorType", "") << " "
          << answer.value("error", "") << "\n  " << promql;
      if (q.range) {
        ++ranged;
        const json over_time = query_range_answer(prom, promql, 30, 2);
        EXPECT_EQ(over_time.value("status", ""), "success")
            << d.uid << ": " << dash::describe(q) << " does not run over a range: " << over_time.value("error", "")
            << "\n  " << promql;
      }
      ++n;
      if (!result_of(answer).empty()) {
        ++data;
      } else {
        empty_list += "    " + d.uid + ": " + dash::describe(q) + "\n";
      }
    }
    std::printf("[ dashboards ] %s: %zu panels, %zu queries, %zu returned data\n", d.uid.c_str(), d.panels, n, data);
    total += n;
    with_data += data;
    panels += d.panels;
  }
  std::printf(
      "[ dashboards ] %zu panels, %zu queries (%zu also over a range), %zu with data; %zu core checks %s "
      "%.1f s after the job started (agent and Prometheus ready at %.1f s; ranks in pod '%s'); %zu argus "
      "names, all exported or recorded. Empty with the straggler job's values (no such fault, layer or "
      "exporter here; the exit and Python jobs' panels are core checks):\n%s",
      panels, total, ranged, with_data, core.size(), failures.empty() ? "all true" : "NOT all true", core_at,
      job_started, truth.pod.c_str(), used.size(), empty_list.c_str());
  EXPECT_EQ(prom.rule_health(), "");

  sim.terminate();
  std::printf("[ dashboards ] %.1f s so far (the agent's teardown follows)\n", since());
}

}  // namespace
}  // namespace argus::itest
