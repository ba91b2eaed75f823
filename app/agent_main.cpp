// argus-agent: the node daemon. Flags per CONTRACT.md; each also reads an
// ARGUS_* environment variable. Bad input exits non-zero with one clear line.
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cmath>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <iterator>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "userspace/common/thread_name.h"
#include "userspace/procfs/capabilities.h"
#include "userspace/common/clock.h"
#include "userspace/common/defaults.h"
#include "exporters/api_routes.h"
#include "exporters/http_server.h"
#include "exporters/kernel_metrics.h"
#include "exporters/rdma_metrics.h"
#include "rdma/rdma_monitor.h"
#include "rdma/topology.h"
#include "userspace/kmsg/xid_monitor.h"
#include "userspace/agent/agent_runtime.h"
#include "userspace/pods/apiserver_pods.h"
#include "userspace/procfs/cgroup.h"
#include "userspace/procfs/procfs.h"

namespace {

std::atomic<bool> g_stop{false};
int g_stop_fd = -1;  // an eventfd the main thread blocks on until a signal writes it
void on_signal(int) {
  g_stop = true;
  if (g_stop_fd >= 0) {
    const uint64_t one = 1;
    (void)!write(g_stop_fd, &one, sizeof(one));  // async-signal-safe
  }
}

// Blocks until SIGINT/SIGTERM: no periodic wakeups (a 100 ms poll without an eventfd).
void wait_for_stop() {
  while (!g_stop) {
    uint64_t n = 0;
    if (g_stop_fd < 0 || (read(g_stop_fd, &n, sizeof(n)) < 0 && errno != EINTR))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int fail(const std::string& line, int code = 1) {
  std::cerr << "argus-agent: " << line << "\n";
  return code;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// The bearer token of --auth-token-file: the file's text less trailing whitespace.
// Unreadable, empty or multi-line: one line saying so.
argus::Result<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return argus::make_error("cannot read --auth-token-file " + path + ": " + std::strerror(errno));
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return argus::make_error("cannot read --auth-token-file " + path + ": " + std::strerror(errno));
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) return argus::make_error("--auth-token-file " + path + " is empty");
  for (char c : token) {
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
      return argus::make_error("--auth-token-file " + path +
                               " must hold one token without spaces or control characters");
  }
  return token;
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

// Each probe holds a file descriptor: take the whole open-file allowance, and
// more where CAP_SYS_RESOURCE allows it.
void raise_open_file_limit(bool sys_resource) {
  constexpr rlim_t kWanted = 1 << 16;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  rlimit want = lim;
  if (sys_resource && lim.rlim_max != RLIM_INFINITY && lim.rlim_max < kWanted) want.rlim_max = kWanted;
  want.rlim_cur = want.rlim_max;
  if (want.rlim_cur != lim.rlim_cur && setrlimit(RLIMIT_NOFILE, &want) != 0)
    spdlog::warn("cannot raise the open-file limit from {}: {}", lim.rlim_cur, std::strerror(errno));
}

// One line per capability the agent runs without, naming what goes blind.
void report_missing_capabilities(const argus::CapabilityReport& caps) {
  for (const auto& c : caps.checks)
    if (!c.held) spdlog::warn("running without {} ({}): {}", c.name, c.layer, c.without);
}

// Where the agent reads other processes' cgroups from (join_node_cgroup_namespace).
void report_cgroup_namespace(const argus::procfs::CgroupNamespaceJoin& j) {
  using Outcome = argus::procfs::CgroupNamespaceJoin::Outcome;
  switch (j.outcome) {
    case Outcome::kJoined: return spdlog::info("cgroup namespace: {}", j.detail);
    case Outcome::kAlreadyThere: return spdlog::debug("cgroup namespace: {}", j.detail);
    case Outcome::kUnknown: return spdlog::debug("cgroup namespace: not checked: {}", j.detail);
    case Outcome::kFailed:
      return spdlog::warn("cgroup namespace: {}; other pods' cgroups read relative to the agent's own: pods are "
                          "named, but their cgroup CPU throttling and memory (OOM) figures are not read",
                          j.detail);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"argus-agent: eBPF observability for GPU training ranks on this node"};
  std::string listen = "0.0.0.0:9745";
  std::string node = hostname();
  std::string proc_root = "/proc";
  std::string sysfs_root = "/sys";
  std::string probes = "default";
  double window = argus::kDefaultWindowSeconds;
  double exit_grace = argus::kDefaultExitGraceSeconds;
  double scan_interval = 1;
  double probe_release = argus::kDefaultProbeReleaseSeconds;
  unsigned usdt_slots = argus::kUsdtSpecSlots;
  std::string log_level = "info";
  std::string btf = "/sys/kernel/btf/vmlinux";
  uint32_t ringbuf_kb = argus::kDefaultRingbufKiB;
  unsigned python_sample_hz = argus::kDefaultPythonSampleHz;
  std::string kmsg_path = "/dev/kmsg";

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
  app.add_option("--scan-interval", scan_interval,
                 "seconds between /proc scans while ranks are tracked (new processes are found at once from exec "
                 "and dlopen hints; the scan is the safety net for hints lost)")
      ->envname("ARGUS_SCAN_INTERVAL")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--probe-release-seconds", probe_release,
                 "seconds a library's probes stay after the last process that maps it is gone")
      ->envname("ARGUS_PROBE_RELEASE_SECONDS")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--usdt-spec-slots", usdt_slots,
                 "size of libbpf's USDT spec table: GPU-activity producer files attached at once need 2 each")
      ->envname("ARGUS_USDT_SPEC_SLOTS")
      ->check(CLI::Range(4u, 65536u));
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
  std::string python_gc_probes = "on";
  app.add_option("--python-gc-probes", python_gc_probes,
                 "probe Python interpreters' garbage collectors (off: GC counts by polling only)")
      ->envname("ARGUS_PYTHON_GC_PROBES")
      ->check(CLI::IsMember({"on", "off"}));
  std::string offcpu = "on";
  app.add_option("--offcpu", offcpu,
                 "scheduler probes: the ranks' off-CPU time by reason, CPU time and who took their CPU")
      ->envname("ARGUS_OFFCPU")
      ->check(CLI::IsMember({"on", "off"}));
  std::string tp_flavour = "auto";
  app.add_option("--tp-flavour", tp_flavour,
                 "kernel tracepoint programs: auto (tp_btf, else raw_tp) or raw_tp (as on a kernel that refuses "
                 "tp_btf)")
      ->envname("ARGUS_TP_FLAVOUR")
      ->check(CLI::IsMember({"auto", "raw_tp"}));
  std::string uprobe_links = "auto";
  app.add_option("--uprobe-links", uprobe_links,
                 "how uprobes attach: auto (uprobe_multi links where the kernel has them, 6.6+, else one perf event "
                 "per probe), multi (required) or perf (one perf event per probe)")
      ->envname("ARGUS_UPROBE_LINKS")
      ->check(CLI::IsMember({"auto", "multi", "perf"}));
  app.add_option("--btf", btf, "kernel BTF file")->envname("ARGUS_BTF");
  app.add_option("--ringbuf-kb", ringbuf_kb, "ring buffer size in KiB")
      ->envname("ARGUS_RINGBUF_KB")
      ->check(CLI::Range(64u, 1048576u));
  app.add_option("--kmsg", kmsg_path,
                 "kernel log to follow for GPU Xid lines (a /dev/kmsg device), or \"off\"")
      ->envname("ARGUS_KMSG");
  app.add_option("--python-sample-hz", python_sample_hz,
                 "Python stack samples per second and CPU for the profile route and straggler evidence (0: off)")
      ->envname("ARGUS_PYTHON_SAMPLE_HZ")
      ->check(CLI::Range(0u, 1000u));

  std::string pod_info = "logs", pod_logs_dir = "/var/log/pods", container_logs_dir = "/var/log/containers";
  app.add_option("--pod-info", pod_info,
                 "where ranks' namespace, pod and container names come from: logs (the kubelet's log dirs), "
                 "apiserver (a watch of this node's pods; needs RBAC), or off")
      ->envname("ARGUS_POD_INFO")
      ->check(CLI::IsMember({"logs", "apiserver", "off"}));
  app.add_option("--pod-logs-dir", pod_logs_dir, "the kubelet's pod log dir (<namespace>_<pod>_<uid>/<container>/)")
      ->envname("ARGUS_POD_LOGS_DIR");
  app.add_option("--container-logs-dir", container_logs_dir,
                 "the kubelet's container log links (<pod>_<namespace>_<container>-<id>.log)")
      ->envname("ARGUS_CONTAINER_LOGS_DIR");
  std::string kube_api, kube_token_file, kube_ca_file;
  app.add_option("--kube-api", kube_api,
                 "apiserver URL for --pod-info apiserver (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
      ->envname("ARGUS_KUBE_API");
  app.add_option("--kube-token-file", kube_token_file,
                 "bearer token file for the apiserver (default: the pod's service account token)")
      ->envname("ARGUS_KUBE_TOKEN_FILE");
  app.add_option("--kube-ca-file", kube_ca_file, "CA bundle the apiserver's certificate must chain to (default: the "
                                                 "service account's ca.crt)")
      ->envname("ARGUS_KUBE_CA_FILE");
  bool list_capabilities = false;
  app.add_flag("--list-capabilities", list_capabilities,
               "print the capabilities the agent checks at start (name, what needs it, what goes blind without it) "
               "and exit");

  std::string auth_token_file, tls_cert, tls_key;
  bool debug_routes = false;
  app.add_option("--auth-token-file", auth_token_file,
                 "file holding a bearer token that every route but /healthz then requires")
      ->envname("ARGUS_AUTH_TOKEN_FILE");
  app.add_option("--tls-cert", tls_cert, "serve HTTPS with this PEM certificate (chain); needs --tls-key")
      ->envname("ARGUS_TLS_CERT");
  app.add_option("--tls-key", tls_key, "the PEM private key of --tls-cert")->envname("ARGUS_TLS_KEY");
  app.add_flag("--debug-routes", debug_routes,
               "serve the routes that reveal process internals (trace, comms, python-stacks, profile)")
      ->envname("ARGUS_DEBUG_ROUTES");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(e.what(), 2);
  }

  if (list_capabilities) {
    // The very list check_own_capabilities() checks at start: one source of truth.
    for (const auto& c : argus::check_capabilities(0).checks) std::cout << c.name << '\t' << c.layer << '\t' << c.without << '\n';
    return 0;
  }

  auto logger = spdlog::stderr_color_mt("argus");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  // Cheap checks first, each one line: the operator fixes the flag and retries.
  argus::HttpServerOptions http_opts;
  if (!auth_token_file.empty()) {
    auto token = read_token_file(auth_token_file);
    if (!token.ok()) return fail(token.error());
    http_opts.auth_token = *token;
  }
  if (!tls_cert.empty() || !tls_key.empty()) {
    if (auto tls = argus::check_tls_files(tls_cert, tls_key); !tls.ok()) return fail(tls.error());
    http_opts.tls_cert_file = tls_cert;
    http_opts.tls_key_file = tls_key;
  }
  if (auto why = check_proc_root(proc_root); !why.empty()) return fail(why);
  if (!is_dir(sysfs_root)) return fail("--sysfs-root " + sysfs_root + " is not a directory");
  if (access(btf.c_str(), R_OK) != 0)
    return fail("no kernel BTF at " + btf + " (" + std::strerror(errno) +
                "): the agent needs a kernel built with CONFIG_DEBUG_INFO_BTF");
  const argus::CapabilityReport caps = argus::check_own_capabilities();
  if (!caps.can_load_bpf)
    return fail("needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN) to load eBPF programs");
  auto listen_addr = argus::parse_listen_address(listen);
  if (!listen_addr.ok()) return fail(listen_addr.error());

  argus::AgentOptions opts;
  opts.node = node;
  opts.proc_root = proc_root;
  opts.sysfs_root = sysfs_root;
  opts.btf_path = btf;
  opts.probes = probes == "deep" ? argus::ProbeSet::Deep : argus::ProbeSet::Default;
  opts.window_seconds = window;
  opts.exit_grace_seconds = exit_grace;
  opts.scan_interval_seconds = scan_interval;
  opts.probe_release_seconds = probe_release;
  opts.usdt_spec_slots = usdt_slots;
  opts.ringbuf_bytes = ringbuf_kb * 1024u;
  opts.only_env = only_env;
  opts.python_gc_probes = python_gc_probes == "on";
  opts.offcpu = offcpu == "on";
  opts.force_raw_tp = tp_flavour == "raw_tp";
  opts.uprobe_links = uprobe_links == "multi"  ? argus::LoaderOptions::UprobeLinks::kMulti
                      : uprobe_links == "perf" ? argus::LoaderOptions::UprobeLinks::kPerf
                                               : argus::LoaderOptions::UprobeLinks::kAuto;
  opts.python_sample_hz = python_sample_hz;
  opts.pod_info = *argus::pods::parse_pod_info_mode(pod_info);  // checked by IsMember
  opts.pod_logs_dir = pod_logs_dir;
  opts.container_logs_dir = container_logs_dir;
  for (const auto& c : caps.checks) opts.capabilities[c.name] = c.held;

  raise_open_file_limit(opts.capabilities["CAP_SYS_RESOURCE"]);
  // Before any thread: the threads started later inherit the namespace.
  const auto cgroup_ns = argus::procfs::join_node_cgroup_namespace(proc_root);
  // --pod-info apiserver: this node's pods listed and watched on their own thread.
  std::shared_ptr<argus::pods::ApiserverPods> kube_pods;
  if (opts.pod_info == argus::pods::PodInfoMode::kApiserver) {
    auto kube = argus::pods::in_cluster_options(kube_api, kube_token_file, kube_ca_file, node);
    if (!kube.ok()) return fail(kube.error());
    kube_pods = std::make_shared<argus::pods::ApiserverPods>(*kube);
  }

  argus::SystemClock clock;
  auto runtime = argus::AgentRuntime::create(opts, clock);
  if (!runtime.ok()) return fail(runtime.error());
  auto& rt = **runtime;
  if (kube_pods) {
    rt.set_pod_name_source(kube_pods);
    kube_pods->start();
  }

  // The RDMA layer: link health of every InfiniBand/RoCE port under --sysfs-root,
  // polled once a second on its own thread, mapped to the ranks next to each NIC.
  argus::rdma::RdmaMonitor rdma(sysfs_root, argus::rdma::MonitorOptions{}, clock);
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
  argus::HttpServer http(http_opts);
  argus::ApiOptions api;
  api.debug_routes = debug_routes;
  // GPU Xid lines from the kernel log: counted, and each an xid event naming the
  // ranks on that GPU (by the line's pid, else by the rank's GPU index).
  argus::kmsg::XidMonitor xids(kmsg_path);
  api.extra_metrics = [&](const argus::Snapshot& snap) {
    auto families = argus::collect_rdma_metrics(rdma.snapshot(), rank_gpus(snap));
    for (auto& f : argus::xid_metrics(xids.counts(), xids.following())) families.push_back(std::move(f));
    return families;
  };
  argus::register_api_routes(http, rt, api);
  signal(SIGPIPE, SIG_IGN);  // before serving: OpenSSL writes to sockets without MSG_NOSIGNAL
  auto port = http.start(listen);
  if (!port.ok()) return fail(port.error());

  std::atomic<bool> rdma_stop{false};
  std::mutex rdma_mu;
  std::condition_variable rdma_cv;  // wakes the poller at once on stop
  std::thread rdma_thread([&] {
    argus::name_this_thread("argus-rdma");
    std::vector<argus::rdma::RankGpu> ranks;
    while (!rdma_stop) {
      rdma.poll();
      const auto snap = rdma.snapshot();
      // The ranks' GPUs matter only where there are ports to map them to: a node
      // without InfiniBand/RoCE ports skips building the agent's snapshot each
      // second. (The next poll uses them for imbalance; this one's events now.)
      if (!snap.ports.empty()) {
        ranks = rank_gpus(rt.snapshot());
        rdma.set_ranks(ranks);
      }
      for (const auto& ev : rdma.drain_events()) {
        if (!ev.raised) continue;
        spdlog::warn("link {}:{} degraded ({}): {}", ev.device, ev.port, ev.reason, ev.detail);
        for (auto& e : argus::link_degraded_events(ev, snap, ranks)) rt.add_event(std::move(e));
      }
      // No port to poll: look for one (a driver loaded after the agent) every 10 s.
      const auto pause = snap.ports.empty() ? std::chrono::seconds(10) : std::chrono::seconds(1);
      std::unique_lock lock(rdma_mu);
      rdma_cv.wait_for(lock, pause, [&] { return rdma_stop.load(); });
    }
  });


  g_stop_fd = eventfd(0, EFD_CLOEXEC);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  // Hang events say what the links show (a stuck collective with nobody missing is
  // often a dead link): every port's state and its degraded reasons.
  rt.set_link_state_provider([&rdma] {
    nlohmann::json ports = nlohmann::json::array();
    for (const auto& p : rdma.snapshot().ports)
      ports.push_back({{"device", p.device},
                       {"port", p.port},
                       {"up", p.up},
                       {"state", p.state},
                       {"degraded", std::vector<std::string>(p.degraded.begin(), p.degraded.end())}});
    return ports;
  });
  rt.start();
  spdlog::info("argus-agent {} on node {}: probes={}, listening on {} (port {}, {}{}{})", ARGUS_VERSION, node, probes,
               listen, *port, http.tls() ? "https" : "http", http_opts.auth_token.empty() ? "" : ", bearer token",
               debug_routes ? ", debug routes on" : "");
  report_missing_capabilities(caps);  // once it runs: a start-up failure stays one line
  report_cgroup_namespace(cgroup_ns);
  if (kmsg_path != "off") {
    argus::kmsg::XidMonitorHooks hooks;
    hooks.ranks = [&] {
      std::vector<argus::kmsg::XidRank> out;
      const auto snap = rt.snapshot();
      for (const auto& g : rank_gpus(snap)) out.push_back({g.job_id, g.rank, 0, g.gpu_index});
      for (auto& x : out)  // the pid of each (job_id, rank)'s running process
        for (const auto& r : snap.ranks)
          if (!r.exited && r.job_id == x.job_id && r.rank == x.rank) x.pid = r.pid;
      return out;
    };
    hooks.gpu_by_bus = [&sysfs_root] {
      std::map<std::string, int> out;
      for (const auto& g : argus::rdma::read_topology(sysfs_root).gpus)
        if (auto bus = argus::kmsg::driver_bus_id(g.pci_address); !bus.empty()) out[bus] = g.index;
      return out;
    };
    hooks.event = [&rt](argus::DetectedEvent ev) { rt.add_event(std::move(ev)); };
    hooks.now_unix = [&clock] { return clock.unix_seconds(); };
    if (auto why = xids.start(std::move(hooks)); !why.empty())
      spdlog::warn("GPU Xid lines are not followed: {}", why);
  }
  wait_for_stop();
  spdlog::info("stopping");
  http.stop();
  xids.stop();
  {
    std::lock_guard lock(rdma_mu);
    rdma_stop = true;
  }
  rdma_cv.notify_all();
  rdma_thread.join();
  rt.stop();
  if (kube_pods) kube_pods->stop();
  return 0;
}
