// argus-agent: the node daemon. Flags per CONTRACT.md (userspace/agent/
// config_flags.cpp), each also read from an ARGUS_* environment variable; bad
// input exits non-zero with one clear line. main parses, checks, and starts: the
// runtime with the node's own collectors (RDMA ports, GPU Xid lines), then the
// HTTP server that serves what it sees.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "app/agent_startup.h"
#include "exporters/api_routes.h"
#include "exporters/http_server.h"
#include "exporters/kernel_metrics.h"
#include "exporters/rdma_metrics.h"
#include "rdma/rdma_collector.h"
#include "rdma/topology.h"
#include "userspace/agent/agent_runtime.h"
#include "userspace/agent/config_flags.h"
#include "userspace/common/clock.h"
#include "userspace/kmsg/xid_collector.h"
#include "userspace/pods/apiserver_pods.h"

namespace {

int fail(const std::string& line, int code = 1) {
  std::cerr << "argus-agent: " << line << "\n";
  return code;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

void set_up_logging(const std::string& level) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("argus"));
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
}

// The driver's PCI bus id of each GPU on the node ("0000:3b:00" -> CUDA index):
// which GPU an Xid line names.
std::map<std::string, int> gpus_by_bus(const std::string& sysfs_root) {
  std::map<std::string, int> out;
  for (const auto& g : argus::rdma::read_topology(sysfs_root).gpus)
    if (auto bus = argus::kmsg::driver_bus_id(g.pci_address); !bus.empty()) out[bus] = g.index;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  argus::AgentConfig cfg;
  cfg.node = hostname();
  bool list_capabilities = false;
  CLI::App app{"argus-agent: eBPF observability for GPU training ranks on this node"};
  argus::bind_agent_flags(app, cfg, list_capabilities);
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
  set_up_logging(cfg.log_level);

  auto startup = argus::check_startup(cfg);
  if (!startup.ok()) return fail(startup.error());
  for (const auto& c : startup->caps.checks) cfg.capabilities[c.name] = c.held;
  argus::raise_open_file_limit(cfg.capabilities["CAP_SYS_RESOURCE"]);
  argus::install_stop_handlers();
  // Before any thread: the threads started later inherit the namespace.
  const auto cgroup_ns = argus::procfs::join_node_cgroup_namespace(cfg.paths.proc_root);
  // --pod-info apiserver: this node's pods listed and watched on their own thread.
  std::shared_ptr<argus::pods::ApiserverPods> kube_pods;
  if (cfg.pods.mode == argus::pods::PodInfoMode::kApiserver) {
    auto kube = argus::pods::in_cluster_options(cfg.pods.api, cfg.pods.token_file, cfg.pods.ca_file, cfg.node);
    if (!kube.ok()) return fail(kube.error());
    kube_pods = std::make_shared<argus::pods::ApiserverPods>(*kube);
  }

  argus::SystemClock clock;
  auto runtime = argus::AgentRuntime::create(cfg, clock);
  if (!runtime.ok()) return fail(runtime.error());
  auto& rt = **runtime;
  if (kube_pods) {
    rt.set_pod_name_source(kube_pods);
    kube_pods->start();
  }
  auto* rdma = rt.add_collector(std::make_unique<argus::rdma::RdmaCollector>(cfg.paths.sysfs_root, clock, rt.ranks(),
                                                                              rt.events()));
  rt.set_link_state([rdma] { return rdma->link_state(); });
  auto* xids = rt.add_collector(std::make_unique<argus::kmsg::XidCollector>(
      cfg.paths.kmsg, rt.ranks(), rt.events(), [root = cfg.paths.sysfs_root] { return gpus_by_bus(root); }, clock));

  argus::HttpServer http(startup->http);
  argus::ApiOptions api;
  api.debug_routes = cfg.http.debug_routes;
  api.extra_metrics = [rdma, xids](const argus::Snapshot&) {
    auto families = argus::collect_rdma_metrics(rdma->links(), rdma->rank_gpus());
    for (auto& f : argus::xid_metrics(xids->counts(), xids->following())) families.push_back(std::move(f));
    return families;
  };
  argus::register_api_routes(http, rt, api);
  auto port = http.start(cfg.http.listen);
  if (!port.ok()) return fail(port.error());

  rt.start();
  spdlog::info("argus-agent {} on node {}: probes={}, listening on {} (port {}, {}{}{})", ARGUS_VERSION, cfg.node,
               cfg.discovery.probes == argus::ProbeSet::Deep ? "deep" : "default", cfg.http.listen, *port,
               http.tls() ? "https" : "http", startup->http.auth_token.empty() ? "" : ", bearer token",
               cfg.http.debug_routes ? ", debug routes on" : "");
  argus::report_missing_capabilities(startup->caps);  // once it runs: a start-up failure stays one line
  argus::report_cgroup_namespace(cgroup_ns);
  argus::wait_for_stop_signal();
  spdlog::info("stopping");
  http.stop();
  rt.stop();
  if (kube_pods) kube_pods->stop();
  return 0;
}
