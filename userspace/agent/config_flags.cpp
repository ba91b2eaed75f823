#include "userspace/agent/config_flags.h"

#include <map>
#include <string>

namespace argus {
namespace {

// "on"/"off" flags into a bool.
CLI::CheckedTransformer on_off() { return CLI::CheckedTransformer(std::map<std::string, bool>{{"on", true}, {"off", false}}); }

void bind_paths(CLI::App& app, AgentConfig& cfg) {
  app.add_option("--node", cfg.node, "node name in labels (default: hostname)")->envname("ARGUS_NODE");
  app.add_option("--proc-root", cfg.paths.proc_root, "procfs root")->envname("ARGUS_PROC_ROOT");
  app.add_option("--sysfs-root", cfg.paths.sysfs_root, "sysfs root")->envname("ARGUS_SYSFS_ROOT");
  app.add_option("--btf", cfg.bpf.btf_path, "kernel BTF file")->envname("ARGUS_BTF");
  app.add_option("--kmsg", cfg.paths.kmsg, "kernel log to follow for GPU Xid lines (a /dev/kmsg device), or \"off\"")
      ->envname("ARGUS_KMSG");
  app.add_option("--log-level", cfg.log_level, "trace, debug, info, warn, error or off")
      ->envname("ARGUS_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}));
}

void bind_http(CLI::App& app, AgentConfig::Http& http) {
  app.add_option("--listen", http.listen, "HTTP address for /metrics and /api/v1 (ADDR:PORT)")->envname("ARGUS_LISTEN");
  app.add_option("--auth-token-file", http.auth_token_file,
                 "file holding a bearer token that every route but /healthz then requires")
      ->envname("ARGUS_AUTH_TOKEN_FILE");
  app.add_option("--tls-cert", http.tls_cert, "serve HTTPS with this PEM certificate (chain); needs --tls-key")
      ->envname("ARGUS_TLS_CERT");
  app.add_option("--tls-key", http.tls_key, "the PEM private key of --tls-cert")->envname("ARGUS_TLS_KEY");
  app.add_flag("--debug-routes", http.debug_routes,
               "serve the routes that reveal process internals (trace, comms, python-stacks, profile)")
      ->envname("ARGUS_DEBUG_ROUTES");
}

void bind_discovery(CLI::App& app, AgentConfig::Discovery& d) {
  app.add_option("--probes", d.probes, "probe set: default, or deep (adds per-launch counting)")
      ->envname("ARGUS_PROBES")
      ->transform(CLI::CheckedTransformer(std::map<std::string, ProbeSet>{{"default", ProbeSet::Default},
                                                                          {"deep", ProbeSet::Deep}}));
  app.add_option("--scan-interval", d.scan_interval_seconds,
                 "seconds between /proc scans while ranks are tracked (new processes are found at once from exec "
                 "and dlopen hints; the scan is the safety net for hints lost)")
      ->envname("ARGUS_SCAN_INTERVAL")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--probe-release-seconds", d.probe_release_seconds,
                 "seconds a library's probes stay after the last process that maps it is gone")
      ->envname("ARGUS_PROBE_RELEASE_SECONDS")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--only-env", d.only_env,
                 "track only processes whose environment has KEY=VALUE (e.g. one agent per simulated node)")
      ->envname("ARGUS_ONLY_ENV")
      ->check([](const std::string& v) {
        return v.find('=') == std::string::npos || v.front() == '=' ? std::string("expected KEY=VALUE") : std::string();
      });
}

void bind_bpf(CLI::App& app, AgentConfig& cfg) {
  LoaderOptions& bpf = cfg.bpf;
  app.add_option("--usdt-spec-slots", bpf.usdt_spec_slots,
                 "size of libbpf's USDT spec table: GPU-activity producer files attached at once need 2 each")
      ->envname("ARGUS_USDT_SPEC_SLOTS")
      ->check(CLI::Range(4u, 65536u));
  app.add_option("--ringbuf-kb", bpf.ringbuf_kib, "ring buffer size in KiB")
      ->envname("ARGUS_RINGBUF_KB")
      ->check(CLI::Range(64u, 1048576u));
  app.add_option("--tp-flavour", bpf.force_raw_tp,
                 "kernel tracepoint programs: auto (tp_btf, else raw_tp) or raw_tp (as on a kernel that refuses "
                 "tp_btf)")
      ->envname("ARGUS_TP_FLAVOUR")
      ->transform(CLI::CheckedTransformer(std::map<std::string, bool>{{"auto", false}, {"raw_tp", true}}));
  app.add_option("--span-min-us", bpf.span_min_us,
                 "a collective's or synchronize's return is sent (to the trace, and a late rank's synchronize share) "
                 "only when it failed or took this long; shorter calls still count in full")
      ->envname("ARGUS_SPAN_MIN_US")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1000000}));
  using Links = LoaderOptions::UprobeLinks;
  app.add_option("--uprobe-links", bpf.uprobe_links,
                 "how uprobes attach: auto (uprobe_multi links where the kernel has them, 6.6+, else one perf event "
                 "per probe), multi (required) or perf (one perf event per probe)")
      ->envname("ARGUS_UPROBE_LINKS")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Links>{{"auto", Links::kAuto}, {"multi", Links::kMulti}, {"perf", Links::kPerf}}));
  app.add_option("--offcpu", cfg.offcpu,
                 "scheduler probes: the ranks' off-CPU time by reason, CPU time and who took their CPU")
      ->envname("ARGUS_OFFCPU")
      ->transform(on_off());
}

void bind_python(CLI::App& app, AgentConfig::Python& py) {
  app.add_option("--python-gc-probes", py.gc_probes,
                 "probe Python interpreters' garbage collectors (off: GC counts by polling only)")
      ->envname("ARGUS_PYTHON_GC_PROBES")
      ->transform(on_off());
  app.add_option("--python-sample-hz", py.sample_hz,
                 "Python stack samples per second and CPU for the profile route and straggler evidence (0: off)")
      ->envname("ARGUS_PYTHON_SAMPLE_HZ")
      ->check(CLI::Range(0u, 1000u));
}

void bind_pods(CLI::App& app, AgentConfig::Pods& pods) {
  using Mode = pods::PodInfoMode;
  app.add_option("--pod-info", pods.mode,
                 "where ranks' namespace, pod and container names come from: logs (the kubelet's log dirs), "
                 "apiserver (a watch of this node's pods; needs RBAC), or off")
      ->envname("ARGUS_POD_INFO")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, Mode>{{"logs", Mode::kLogs}, {"apiserver", Mode::kApiserver}, {"off", Mode::kOff}}));
  app.add_option("--pod-logs-dir", pods.logs_dir, "the kubelet's pod log dir (<namespace>_<pod>_<uid>/<container>/)")
      ->envname("ARGUS_POD_LOGS_DIR");
  app.add_option("--container-logs-dir", pods.container_logs_dir,
                 "the kubelet's container log links (<pod>_<namespace>_<container>-<id>.log)")
      ->envname("ARGUS_CONTAINER_LOGS_DIR");
  app.add_option("--kube-api", pods.api,
                 "apiserver URL for --pod-info apiserver (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
      ->envname("ARGUS_KUBE_API");
  app.add_option("--kube-token-file", pods.token_file,
                 "bearer token file for the apiserver (default: the pod's service account token)")
      ->envname("ARGUS_KUBE_TOKEN_FILE");
  app.add_option("--kube-ca-file", pods.ca_file,
                 "CA bundle the apiserver's certificate must chain to (default: the service account's ca.crt)")
      ->envname("ARGUS_KUBE_CA_FILE");
}

void bind_detection(CLI::App& app, AgentConfig::Detection& d) {
  app.add_option("--window", d.window_seconds, "analysis window in seconds")
      ->envname("ARGUS_WINDOW")
      ->check(CLI::Range(0.5, 3600.0));
  app.add_option("--hang-threshold", d.hang.min_stall_seconds,
                 "seconds a collective or point-to-point operation may wait before it is a hang (at least; it grows "
                 "with the step and with the longest stall the job recovered from)")
      ->envname("ARGUS_HANG_THRESHOLD")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--exit-grace", d.exit_grace_seconds, "seconds an exited rank stays visible")
      ->envname("ARGUS_EXIT_GRACE")
      ->check(CLI::Range(0.0, 86400.0));
}

}  // namespace

void bind_agent_flags(CLI::App& app, AgentConfig& cfg, bool& list_capabilities) {
  bind_paths(app, cfg);
  bind_http(app, cfg.http);
  bind_discovery(app, cfg.discovery);
  bind_bpf(app, cfg);
  bind_python(app, cfg.python);
  bind_pods(app, cfg.pods);
  bind_detection(app, cfg.detection);
  app.add_flag("--list-capabilities", list_capabilities,
               "print the capabilities the agent checks at start (name, what needs it, what goes blind without it) "
               "and exit");
}

}  // namespace argus
