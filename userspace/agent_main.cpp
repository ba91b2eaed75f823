// argus-agent: the node daemon. Flags per CONTRACT.md; each also reads an
// ARGUS_* environment variable. Bad input exits non-zero with one clear line.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <thread>

#include "common/clock.h"
#include "exporters/http_server.h"
#include "exporters/json_api.h"
#include "exporters/trace_export.h"
#include "exporters/prometheus_exporter.h"
#include "exporters/rdma_metrics.h"
#include "rdma/rdma_monitor.h"
#include "rdma/topology.h"
#include "probes/agent_runtime.h"
#include "procfs/procfs.h"

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

int fail(const std::string& line, int code = 1) {
  std::cerr << "argus-agent: " << line << "\n";
  return code;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

bool is_dir(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A procfs has /self or at least one numeric entry with a stat file.
std::string check_proc_root(const std::string& root) {
  if (!is_dir(root)) return "--proc-root " + root + " is not a directory";
  for (int pid : argus::procfs::list_pids(root)) {
    if (argus::procfs::read_stat(root, pid).ok()) return "";
  }
  return "--proc-root " + root + " holds no readable process entries (is it a procfs?)";
}

// Effective capabilities from /proc/self/status: root, or CAP_BPF + CAP_PERFMON
// (with CAP_SYS_ADMIN for the uprobe PMU on older kernels).
bool has_bpf_privileges() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
    auto has = [&](int cap) { return (caps >> cap) & 1u; };
    constexpr int kSysAdmin = 21, kPerfmon = 38, kBpf = 39;
    return has(kSysAdmin) || (has(kBpf) && has(kPerfmon));
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"argus-agent: eBPF observability for GPU training ranks on this node"};
  std::string listen = "0.0.0.0:9745";
  std::string node = hostname();
  std::string proc_root = "/proc";
  std::string sysfs_root = "/sys";
  std::string probes = "default";
  double window = 10;
  double exit_grace = 300;
  std::string log_level = "info";
  std::string btf = "/sys/kernel/btf/vmlinux";
  uint32_t ringbuf_kb = 4096;

  app.add_option("--listen", listen, "HTTP address for /metrics and /api/v1 (ADDR:PORT)")->envname("ARGUS_LISTEN");
  app.add_option("--node", node, "node name in labels (default: hostname)")->envname("ARGUS_NODE");
  app.add_option("--proc-root", proc_root, "procfs root")->envname("ARGUS_PROC_ROOT");
  app.add_option("--sysfs-root", sysfs_root, "sysfs root")->envname("ARGUS_SYSFS_ROOT");
  app.add_option("--probes", probes, "probe set: default, or deep (adds per-launch counting)")
      ->envname("ARGUS_PROBES")
      ->check(CLI::IsMember({"default", "deep"}));
  app.add_option("--window", window, "analysis window in seconds")
      ->envname("ARGUS_WINDOW")
      ->check(CLI::Range(0.5, 3600.0));
  app.add_option("--exit-grace", exit_grace, "seconds an exited rank stays visible")
      ->envname("ARGUS_EXIT_GRACE")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->envname("ARGUS_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
  std::string only_env;
  app.add_option("--only-env", only_env,
                 "track only processes whose environment has KEY=VALUE (e.g. one agent per simulated node)")
      ->envname("ARGUS_ONLY_ENV")
      ->check([](const std::string& v) {
        return v.find('=') == std::string::npos || v.front() == '=' ? std::string("expected KEY=VALUE") : std::string();
      });
  app.add_option("--btf", btf, "kernel BTF file")->envname("ARGUS_BTF");
  app.add_option("--ringbuf-kb", ringbuf_kb, "ring buffer size in KiB")
      ->envname("ARGUS_RINGBUF_KB")
      ->check(CLI::Range(64u, 1048576u));

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(e.what(), 2);
  }

  auto logger = spdlog::stderr_color_mt("argus");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  // Cheap checks first, each one line: the operator fixes the flag and retries.
  if (auto why = check_proc_root(proc_root); !why.empty()) return fail(why);
  if (!is_dir(sysfs_root)) return fail("--sysfs-root " + sysfs_root + " is not a directory");
  if (access(btf.c_str(), R_OK) != 0)
    return fail("no kernel BTF at " + btf + " (" + std::strerror(errno) +
                "): the agent needs a kernel built with CONFIG_DEBUG_INFO_BTF");
  if (!has_bpf_privileges())
    return fail("needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN) to load eBPF programs");
  auto listen_addr = argus::parse_listen_address(listen);
  if (!listen_addr.ok()) return fail(listen_addr.error());

  argus::AgentOptions opts;
  opts.node = node;
  opts.proc_root = proc_root;
  opts.btf_path = btf;
  opts.probes = probes == "deep" ? argus::ProbeSet::Deep : argus::ProbeSet::Default;
  opts.window_seconds = window;
  opts.exit_grace_seconds = exit_grace;
  opts.ringbuf_bytes = ringbuf_kb * 1024u;
  opts.only_env = only_env;

  argus::SystemClock clock;
  auto runtime = argus::AgentRuntime::create(opts, clock);
  if (!runtime.ok()) return fail(runtime.error());
  auto& rt = **runtime;

  // The RDMA layer: link health of every InfiniBand/RoCE port under --sysfs-root,
  // polled once a second on its own thread, mapped to the ranks next to each NIC.
  argus::rdma::RdmaMonitor rdma(sysfs_root, argus::rdma::MonitorOptions{}, clock);
  std::mutex rdma_mu;
  std::vector<std::pair<double, nlohmann::json>> rdma_events;  // (unix time, event)
  auto rank_gpus = [&](const argus::Snapshot& snap) {
    std::vector<argus::rdma::RankGpu> out;
    auto set = [](const std::string& v) { return v.empty() ? std::nullopt : std::optional<std::string>(v); };
    for (const auto& r : snap.ranks) {
      if (!r.identified() || r.exited) continue;
      const auto local = r.local_rank >= 0 ? std::optional<std::string>(std::to_string(r.local_rank)) : std::nullopt;
      out.push_back({r.job_id, r.rank,
                     argus::rdma::gpu_index_from_env(set(r.cuda_visible_devices), local, set(r.nvidia_visible_devices)),
                     ""});
    }
    return out;
  };
  argus::HttpServer http;
  http.route("GET", "/metrics", [&](const argus::HttpRequest&) {
    argus::HttpResponse r;
    r.content_type = argus::kPrometheusContentType;
    const auto snap = rt.snapshot();
    auto families = argus::collect_metrics(snap);
    for (auto& f : argus::collect_rdma_metrics(rdma.snapshot(), rank_gpus(snap))) families.push_back(std::move(f));
    r.body = argus::serialize_metrics(families);
    return r;
  });
  http.route("GET", "/api/v1/ranks", [&](const argus::HttpRequest&) {
    return argus::HttpResponse::json(200, argus::render_ranks_json(rt.snapshot()));
  });
  http.route("GET", "/api/v1/events", [&](const argus::HttpRequest& req) {
    double since = 0;
    if (auto it = req.query.find("since"); it != req.query.end()) {
      char* end = nullptr;
      since = std::strtod(it->second.c_str(), &end);
      if (it->second.empty() || end == nullptr || *end != '\0' || !std::isfinite(since))
        return argus::HttpResponse::json(400, R"({"error":"since must be UNIX seconds"})");
    }
    std::vector<std::pair<double, nlohmann::json>> merged;
    for (const auto& ev : rt.events_since(since)) merged.emplace_back(ev.time, argus::event_to_json(ev));
    {
      std::lock_guard lock(rdma_mu);
      for (const auto& [t, j] : rdma_events)
        if (t >= since) merged.emplace_back(t, j);
    }
    std::stable_sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    nlohmann::json list = nlohmann::json::array();
    for (auto& [t, j] : merged) list.push_back(std::move(j));
    return argus::HttpResponse::json(200, argus::dump_json({{"events", list}}));
  });
  http.route("GET", "/api/v1/comms", [&](const argus::HttpRequest&) {
    return argus::HttpResponse::json(200, argus::dump_json(argus::comms_json(rt.snapshot())));
  });
  http.route("GET", "/api/v1/trace", [&](const argus::HttpRequest& req) {
    auto it = req.query.find("seconds");
    const auto secs = argus::parse_trace_seconds(it == req.query.end() ? "" : it->second, it != req.query.end());
    if (!secs.ok) return argus::HttpResponse::json(400, argus::dump_json({{"error", secs.error}}));
    argus::TraceRequest tr;
    tr.seconds = secs.seconds;
    auto spans = rt.trace(secs.seconds, &tr.end_ns);
    tr.end_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto snap = rt.snapshot();
    return argus::HttpResponse::json(
        200, argus::dump_json(argus::trace_json(spans, snap.ranks, rt.events_since(tr.end_unix - tr.seconds), tr)));
  });
  http.route("GET", "/api/v1/ranks/{job_id}/{rank}/gpu-steps", [&](const argus::HttpRequest& req) {
    const std::string& job = req.params.at("job_id");
    const std::string& rank_text = req.params.at("rank");
    char* end = nullptr;
    const long rank = std::strtol(rank_text.c_str(), &end, 10);
    if (rank_text.empty() || end == nullptr || *end != '\0' || rank < 0 || rank > (1 << 24))
      return argus::HttpResponse::json(400, argus::dump_json({{"error", "rank must be a non-negative integer"}}));
    long last = 20;
    if (auto it = req.query.find("last"); it != req.query.end()) {
      last = std::strtol(it->second.c_str(), &end, 10);
      if (it->second.empty() || end == nullptr || *end != '\0' || last < 1 || last > 600)
        return argus::HttpResponse::json(400, argus::dump_json({{"error", "last must be 1..600"}}));
    }
    // The running process of that rank, else the newest one.
    const argus::RankSnapshot* best = nullptr;
    const auto snap = rt.snapshot();
    for (const auto& r : snap.ranks) {
      if (r.job_id != job || r.rank != rank) continue;
      if (!best || (best->exited && !r.exited) || (best->exited == r.exited && r.first_seen_unix > best->first_seen_unix))
        best = &r;
    }
    if (!best) return argus::HttpResponse::json(404, argus::dump_json({{"error", "no such rank on this node"}}));
    const auto hist = rt.gpu_steps(best->pid, static_cast<size_t>(last));
    const double now_unix =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const double offset = now_unix - static_cast<double>(rt.monotonic_ns()) / 1e9;
    return argus::HttpResponse::json(
        200, argus::dump_json(argus::gpu_steps_json(job, static_cast<int>(rank), best->pid, hist.steps, hist.names, offset)));
  });
  http.route("GET", "/healthz", [&](const argus::HttpRequest&) {
    const double age = rt.seconds_since_heartbeat();
    if (age > 5) return argus::HttpResponse::text(503, "event loop stalled for " + std::to_string(age) + " s\n");
    return argus::HttpResponse::text(200, "ok\n");
  });
  auto port = http.start(listen);
  if (!port.ok()) return fail(port.error());

  std::atomic<bool> rdma_stop{false};
  std::thread rdma_thread([&] {
    while (!rdma_stop) {
      const auto ranks = rank_gpus(rt.snapshot());
      rdma.set_ranks(ranks);
      rdma.poll();
      const auto snap = rdma.snapshot();
      for (const auto& ev : rdma.drain_events()) {
        if (!ev.raised) continue;
        spdlog::warn("link {}:{} degraded ({}): {}", ev.device, ev.port, ev.reason, ev.detail);
        std::lock_guard lock(rdma_mu);
        for (auto& j : argus::link_degraded_events(ev, snap, ranks)) rdma_events.emplace_back(ev.time_unix, std::move(j));
        while (rdma_events.size() > 10000) rdma_events.erase(rdma_events.begin());
      }
      for (int i = 0; i < 10 && !rdma_stop; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });


  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  rt.start();
  spdlog::info("argus-agent {} on node {}: probes={}, listening on {} (port {})", ARGUS_VERSION, node, probes, listen,
               *port);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  spdlog::info("stopping");
  http.stop();
  rdma_stop = true;
  rdma_thread.join();
  rt.stop();
  return 0;
}
