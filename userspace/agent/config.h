// Everything argus-agent is told at start, in one struct. Each part is the
// options of the component it configures, declared with its defaults next to
// that component (userspace/common/defaults.h holds the ones several share, the
// paths among them); the flags bind straight into these fields
// (config_flags.cpp), and the runtime hands each part to its component.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "userspace/attach/attach_plan.h"
#include "userspace/common/defaults.h"
#include "userspace/detect/detectors.h"
#include "userspace/pods/pod_resolver.h"
#include "userspace/probes/bpf_loader.h"

namespace argus {

struct AgentConfig {
  std::string node;  // --node (the hostname unless set)
  std::string log_level = "info";

  // Where the host is read from (fake trees in tests). The BPF object's BTF is bpf.btf_path.
  struct Paths {
    std::string proc_root = kDefaultProcRoot;
    std::string sysfs_root = kDefaultSysfsRoot;  // also where fs/cgroup is (memory cgroups, CPU throttling)
    std::string kmsg = kDefaultKmsgPath;         // followed for GPU Xid lines; "off": not followed
  } paths;

  // The HTTP API.
  struct Http {
    std::string listen = kDefaultListen;
    std::string auth_token_file;  // "": no token required
    std::string tls_cert, tls_key;
    bool debug_routes = false;  // serve the routes that reveal process internals
  } http;

  // Which processes are ranks, and which probes they get.
  struct Discovery {
    ProbeSet probes = ProbeSet::Default;
    double scan_interval_seconds = 1;
    // With no rank to watch, /proc is scanned this often instead (new processes
    // still come at once through exec events; only rechecks wait longer).
    double idle_scan_interval_seconds = 2;
    double probe_release_seconds = kDefaultProbeReleaseSeconds;
    std::string only_env;  // KEY=VALUE: track only processes whose environment has it; "" for all
  } discovery;

  LoaderOptions bpf;  // the BPF object: BTF, ring buffer, tracepoint flavour, uprobe links, thresholds
  bool offcpu = true;  // the scheduler probes (off-CPU time, CPU stealers)

  struct Python {
    bool gc_probes = true;  // false: GC counts by polling only
    uint32_t sample_hz = kDefaultPythonSampleHz;  // 0: no stack sampling
  } python;

  // The ranks' Kubernetes identity.
  struct Pods {
    pods::PodInfoMode mode = pods::PodInfoMode::kLogs;
    std::string logs_dir = kDefaultPodLogsDir;
    std::string container_logs_dir = kDefaultContainerLogsDir;
    std::string api, token_file, ca_file;  // --pod-info apiserver ("": in-cluster defaults)
  } pods;

  // The analysis: its window, how long an exited rank stays, the detectors' settings.
  struct Detection {
    double window_seconds = kDefaultWindowSeconds;
    double exit_grace_seconds = kDefaultExitGraceSeconds;
    StragglerOptions straggler;
    HangOptions hang;
  } detection;

  double stats_interval_seconds = 1;  // the stats pass: aggregates, collectors, detection
  std::map<std::string, bool> capabilities;  // held at start (CAP_BPF, ...), for /metrics
};

}  // namespace argus
