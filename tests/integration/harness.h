// Shared pieces of the integration tests: real processes (the agent, the
// simulated job), the agent's HTTP API, and the sim's recorded truth.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "userspace/net/http_client.h"

namespace argus::itest {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

inline std::string bin(const std::string& name) { return std::string(ARGUS_BUILD_DIR) + "/bin/" + name; }
inline std::string lib(const std::string& name) { return std::string(ARGUS_BUILD_DIR) + "/lib/" + name; }

// Privileged tests skip when not root, except under CI=true, where a skip would
// hide that the eBPF path never ran: there it fails.
#define ARGUS_REQUIRE_ROOT()                                                              \
  do {                                                                                    \
    if (geteuid() != 0) {                                                                 \
      const char* ci = std::getenv("CI");                                                 \
      if (ci != nullptr && std::string(ci) == "true") FAIL() << "CI=true and not root";   \
      GTEST_SKIP() << "needs root to load eBPF programs";                                 \
    }                                                                                     \
  } while (0)

// True under CI=true, where a privileged test that would skip fails instead.
inline bool ci() {
  const char* c = std::getenv("CI");
  return c != nullptr && std::string(c) == "true";
}

// Polls pred every 100 ms until it holds or the timeout passes; its last answer.
inline bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(100ms);
  }
  return pred();
}

// Whether the running kernel is at least major.minor (uname's release).
inline bool kernel_at_least(int major, int minor) {
  struct utsname u {};
  if (uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}

inline fs::path make_temp_dir(const std::string& tag) {
  std::string tmpl = (fs::temp_directory_path() / ("argus-" + tag + "-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

inline uint16_t free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// A child process with stdout+stderr to a file; killed (TERM, then KILL) on destruction.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const fs::path& log, const std::vector<std::string>& extra_env = {}) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      for (const auto& kv : extra_env) putenv(strdup(kv.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() { terminate(); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  // Waits up to timeout; returns the wait status, or nullopt while running.
  std::optional<int> wait_for(std::chrono::milliseconds timeout) {
    if (status_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = st;
        return status_;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(20ms);
    }
  }
  bool running() { return !wait_for(0ms).has_value(); }
  void terminate() {
    if (pid_ <= 0 || status_) return;
    kill(pid_, SIGTERM);
    if (!wait_for(10s)) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      // An agent releases each uprobe after an RCU grace period, even when
      // killed; while it does, new attaches by the next test's agent stall.
      // So the next test starts only once this one is really gone.
      wait_for(120s);
    }
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes one record into the kernel log, as the GPU driver writes its Xid lines.
// One record per open: /dev/kmsg rate-limits each open file to a burst of 10.
// The newline ends the record, as the driver's do: without it the kernel keeps
// the record open for a continuation and readers see it only with the next one.
inline bool write_kmsg(const std::string& text) {
  const int fd = ::open("/dev/kmsg", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const std::string line = text + "\n";
  const bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::close(fd);
  return ok;
}

// Runs a command to completion: exit code and combined output.
struct RunResult {
  int exit_code = -1;
  std::string output;
};
inline RunResult run_command(const std::vector<std::string>& argv, const fs::path& dir,
                             std::chrono::milliseconds timeout = 120s) {
  const fs::path log = dir / "run.log";
  Child c(argv, log);
  auto st = c.wait_for(timeout);
  RunResult r;
  if (st && WIFEXITED(*st)) r.exit_code = WEXITSTATUS(*st);
  r.output = read_text(log);
  return r;
}

// The agent on a private loopback port, ready when /healthz answers.
class Agent {
 public:
  // `launcher`: a command the agent runs under (e.g. setpriv with a capability set).
  explicit Agent(const fs::path& dir, std::vector<std::string> extra_args = {}, std::vector<std::string> launcher = {})
      : port_(free_port()) {
    std::vector<std::string> argv = launcher;
    for (const std::string& a : {bin("argus-agent"), std::string("--listen"), "127.0.0.1:" + std::to_string(port_),
                                 std::string("--log-level"), std::string("debug"), std::string("--exit-grace"),
                                 std::string("600")})
      argv.push_back(a);
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    log_ = dir / "agent.log";
    child_ = std::make_unique<Child>(argv, log_);
  }
  bool wait_ready(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!child_->running()) return false;
      auto r = cli::http_get(url("/healthz"), 1s);
      if (r.ok() && r->status == 200) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::optional<json> get_json(const std::string& path) const {
    auto r = cli::http_get(url(path), 5s);
    if (!r.ok() || r->status != 200) return std::nullopt;
    return json::parse(r->body, nullptr, false);
  }
  std::string get_text(const std::string& path) const {
    auto r = cli::http_get(url(path), 5s);
    return r.ok() ? r->body : "";
  }
  std::string log() const { return read_text(log_); }
  Child& child() { return *child_; }

 private:
  uint16_t port_;
  fs::path log_;
  std::unique_ptr<Child> child_;
};

// The sim's recorded truth: one JSON per rank.
inline std::map<int, json> read_truth(const fs::path& out_dir) {
  std::map<int, json> truth;
  for (const auto& e : fs::directory_iterator(out_dir)) {
    const auto name = e.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || e.path().extension() != ".json") continue;
    json j = json::parse(read_text(e.path()));
    truth[j.at("rank").get<int>()] = j;
  }
  return truth;
}

// The agent's record of the rank with this pid, or null.
inline json agent_rank_by_pid(const json& ranks_doc, int pid) {
  for (const auto& r : ranks_doc.at("ranks"))
    if (r.at("pid").get<int>() == pid) return r;
  return json();
}

// Differences between the sim's truth and the agent's figures for one rank:
// "" when every compared figure is equal.
inline std::string diff_rank(const json& truth, const json& agent, bool launches) {
  std::ostringstream d;
  if (agent.is_null()) return "rank missing from the agent";
  if (agent.value("job_id", json()) != truth.at("job_id")) d << " job_id " << agent.value("job_id", json());
  if (agent.value("rank", json()) != truth.at("rank")) d << " rank " << agent.value("rank", json());
  const json& tn = truth.at("nccl");
  const json an = agent.value("nccl", json::object());
  for (const auto& [op, v] : tn.items()) {
    const json a = an.value(op, json::object());
    if (a.value("calls", 0ull) != v.at("calls").get<uint64_t>())
      d << " " << op << ".calls " << a.value("calls", 0ull) << "!=" << v.at("calls");
    if (a.value("bytes", 0ull) != v.at("bytes").get<uint64_t>())
      d << " " << op << ".bytes " << a.value("bytes", 0ull) << "!=" << v.at("bytes");
  }
  for (const auto& [op, a] : an.items())
    if (!tn.contains(op) && a.value("calls", 0ull) != 0) d << " unexpected op " << op;
  const json& tc = truth.at("cuda");
  const json ac = agent.value("cuda", json::object());
  const json t_sync = tc.value("sync", json::object());
  const json a_sync = ac.value("sync", json::object());
  for (const auto& [api, n] : t_sync.items()) {
    const uint64_t got = a_sync.value(api, json::object()).value("calls", 0ull);
    if (got != n.get<uint64_t>()) d << " sync." << api << " " << got << "!=" << n;
  }
  std::map<std::pair<std::string, std::string>, uint64_t> errs;
  const json a_errors = ac.value("errors", json::array());
  for (const auto& e : a_errors)
    errs[{e.at("api").get<std::string>(), e.at("code").get<std::string>()}] = e.at("count").get<uint64_t>();
  const json t_errors = tc.value("errors", json::object());
  for (const auto& [api, codes] : t_errors.items())
    for (const auto& [code, n] : codes.items())
      if (errs[{api, code}] != n.get<uint64_t>()) d << " error " << api << "/" << code << " " << errs[{api, code}] << "!=" << n;
  if (launches) {
    const json got = ac.value("kernel_launches", json());
    if (got != tc.at("kernel_launches")) d << " launches " << got << "!=" << tc.at("kernel_launches");
  }
  return d.str();
}

// Polls /api/v1/ranks until `diff(truth, agent rank)` is empty for every rank of
// the truth (final aggregates are read at exit), or the deadline passes; returns
// the last differences.
inline std::string wait_for_truth(const Agent& agent, const std::map<int, json>& truth,
                                  const std::function<std::string(const json&, const json&)>& diff,
                                  std::chrono::milliseconds timeout = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  while (true) {
    last.clear();
    auto doc = agent.get_json("/api/v1/ranks");
    if (!doc || doc->is_discarded()) {
      last = "no /api/v1/ranks answer";
    } else {
      for (const auto& [rank, t] : truth) {
        const json a = agent_rank_by_pid(*doc, t.at("pid").get<int>());
        const std::string d = a.is_null() ? std::string("rank missing from the agent") : diff(t, a);
        if (!d.empty()) last += "rank " + std::to_string(rank) + ":" + d + "\n";
      }
    }
    if (last.empty() || std::chrono::steady_clock::now() >= deadline) return last;
    std::this_thread::sleep_for(250ms);
  }
}

// wait_for_truth on the NCCL/CUDA counts of diff_rank.
inline std::string wait_for_match(const Agent& agent, const std::map<int, json>& truth, bool launches,
                                  std::chrono::milliseconds timeout = 20s) {
  return wait_for_truth(
      agent, truth, [launches](const json& t, const json& a) { return diff_rank(t, a, launches); }, timeout);
}

// Value of one sample line in the Prometheus text (name, then labels including
// these), or -1 when there is none.
inline double metric_value(const std::string& text, const std::string& name,
                           const std::map<std::string, std::string>& labels) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all = all && line.find(k + "=\"" + v + "\"") != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// The agent's events of one kind for one job, oldest first.
inline json events_of(const Agent& agent, const std::string& kind, const std::string& job) {
  json out = json::array();
  if (auto doc = agent.get_json("/api/v1/events?since=0"))
    for (const auto& e : (*doc)["events"])
      if (e.value("kind", "") == kind && e.value("job_id", json()) == job) out.push_back(e);
  return out;
}

inline std::vector<std::string> sim_args(const fs::path& out, const std::string& job, int ranks, int steps,
                                         std::vector<std::string> extra = {}) {
  std::vector<std::string> a = {bin("argus-sim"), "--ranks", std::to_string(ranks), "--steps", std::to_string(steps),
                                "--step-ms", "20", "--init-ms", "1500", "--job-id", job, "--out", out.string(),
                                "--quiet"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// Runs the simulated job to its end (two minutes at most) and returns the truth
// each rank recorded; empty when it failed (its log is in dir/sim.log).
inline std::map<int, json> run_sim_job(const fs::path& dir, const std::string& job, int ranks, int steps,
                                       std::vector<std::string> extra = {}) {
  const auto out = dir / ("truth-" + job);
  Child sim(sim_args(out, job, ranks, steps, std::move(extra)), dir / "sim.log");
  auto st = sim.wait_for(120s);
  if (!st || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0) return {};
  return read_truth(out);
}

// ---- A real Prometheus (the Debian package's /usr/bin/prometheus, or
// ARGUS_PROMETHEUS) on a private loopback port: cross_node_prometheus_test.cpp,
// dashboards_test.cpp.

inline std::string prometheus_binary() {
  const char* env = std::getenv("ARGUS_PROMETHEUS");
  return env != nullptr && *env != '\0' ? env : "/usr/bin/prometheus";
}

// Skips without the binary, except under CI=true, where it fails.
inline void require_prometheus() {
  if (access(prometheus_binary().c_str(), X_OK) == 0) return;
  if (ci()) FAIL() << "CI=true and no " << prometheus_binary();
  GTEST_SKIP() << "no " << prometheus_binary() << " (Debian package prometheus)";
}

// Prometheus API query values.
inline std::string url_encode(const std::string& s) { return cli::percent_encode(s); }

// "127.0.0.1:PORT" of an agent.
inline std::string address_of(const Agent& a) { return a.url("").substr(std::string("http://").size()); }

// A Prometheus server on a private loopback port with its own TSDB, scraping
// `targets` and evaluating `rules` every second; killed (TERM, then KILL) with
// its data removed on destruction. `target_labels` are added to every scraped
// series with honor_labels (as the chart's ServiceMonitor adds `node`: a label
// the agent exports itself keeps its value).
class Prometheus {
 public:
  Prometheus(const fs::path& dir, const std::vector<std::string>& targets, const fs::path& rules,
             const std::map<std::string, std::string>& target_labels = {})
      : port_(free_port()), data_(dir / "prometheus-data") {
    std::ofstream cfg(dir / "prometheus.yml");
    cfg << "global:\n"
           "  scrape_interval: 1s\n"
           "  scrape_timeout: 1s\n"
           "  evaluation_interval: 1s\n"
           "rule_files:\n"
           "  - '"
        << rules.string()
        << "'\n"
           "scrape_configs:\n"
           "  - job_name: argus\n";
    if (!target_labels.empty()) cfg << "    honor_labels: true\n";
    cfg << "    static_configs:\n"
           "      - targets: [";
    for (size_t i = 0; i < targets.size(); ++i) cfg << (i ? ", " : "") << "'" << targets[i] << "'";
    cfg << "]\n";
    if (!target_labels.empty()) {
      cfg << "        labels:\n";
      for (const auto& [k, v] : target_labels) cfg << "          " << k << ": '" << v << "'\n";
    }
    cfg.close();
    log_ = dir / "prometheus.log";
    child_ = std::make_unique<Child>(
        std::vector<std::string>{prometheus_binary(), "--config.file=" + (dir / "prometheus.yml").string(),
                                 "--storage.tsdb.path=" + data_.string(),
                                 "--web.listen-address=127.0.0.1:" + std::to_string(port_),
                                 "--storage.tsdb.retention.time=1h", "--log.level=warn"},
        log_);
  }
  ~Prometheus() {
    child_->terminate();
    std::error_code ec;
    fs::remove_all(data_, ec);
  }
  Prometheus(const Prometheus&) = delete;
  Prometheus& operator=(const Prometheus&) = delete;

  bool wait_ready(std::chrono::milliseconds timeout = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (!child_->running()) return false;
      auto r = cli::http_get(url("/-/ready"), 1s);
      if (r.ok() && r->status == 200) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::string log() const { return read_text(log_); }

  // GET /api/v1/<path>: the "data" member, or null on any failure.
  json api(const std::string& path) const {
    auto r = cli::http_get(url("/api/v1/" + path), 5s);
    if (!r.ok() || r->status != 200) return json();
    json doc = json::parse(r->body, nullptr, false);
    if (doc.is_discarded() || doc.value("status", "") != "success") return json();
    return doc.value("data", json());
  }
  // An instant query's whole answer, errors included (Prometheus answers a
  // query it cannot parse with 400 and {"status":"error","error":...}); a
  // transport failure reads {"status":"error","error":"<why>"}.
  json query_answer(const std::string& promql) const {
    auto r = cli::http_get(url("/api/v1/query?query=" + url_encode(promql)), 10s);
    if (!r.ok()) return json{{"status", "error"}, {"error", r.error()}};
    json doc = json::parse(r->body, nullptr, false);
    if (doc.is_discarded() || !doc.is_object())
      return json{{"status", "error"}, {"error", "HTTP " + std::to_string(r->status) + ", not JSON"}};
    return doc;
  }
  // An instant query's vector, [] when empty or on failure.
  json query(const std::string& promql) const {
    json d = api("query?query=" + url_encode(promql));
    if (!d.is_object() || !d.contains("result") || !d["result"].is_array()) return json::array();
    return d["result"];
  }
  // The values of `label` among the series an instant query returns.
  std::set<std::string> label_values(const std::string& promql, const std::string& label) const {
    std::set<std::string> out;
    for (const auto& s : query(promql)) out.insert(s.at("metric").value(label, ""));
    return out;
  }
  // Rule evaluation errors (a broken rule would silently record nothing).
  std::string rule_health() const {
    std::string bad;
    json d = api("rules");
    if (!d.is_object()) return "no /api/v1/rules answer";
    for (const auto& g : d.value("groups", json::array()))
      for (const auto& r : g.value("rules", json::array()))
        if (r.value("health", "") == "err") bad += r.value("name", "") + ": " + r.value("lastError", "") + "\n";
    return bad;
  }

 private:
  uint16_t port_;
  fs::path data_;
  fs::path log_;
  std::unique_ptr<Child> child_;
};

}  // namespace argus::itest
