// The simulator's InfiniBand fixtures read by RdmaMonitor: the layout and affinity it lays,
// each injected fault named alone with the right reason within a few polls, argus-sim's
// --ib-fixture/--degrade flags, and the PEER CHECK: the real prometheus-node-exporter on the
// same trees must report the same byte and error counters as Argus.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <prometheus/text_serializer.h>

#include "exporters/rdma_metrics.h"
#include "rdma/link_events.h"
#include "userspace/events/event_log.h"
#include "sim/ib_fixture.h"
#include "rdma/rdma_monitor.h"
#include "tests/unit/rdma_test_util.h"
#include "userspace/net/http_client.h"

extern char** environ;

namespace argus::rdma {
namespace {

using namespace testutil;
using sim::DegradeKind;
using sim::DegradeSpec;
using sim::IbFixture;
using sim::IbLayout;

const std::string kBuild = ARGUS_BUILD_DIR;
const char* kNodeExporter = "/usr/bin/prometheus-node-exporter";

MonitorOptions options() {
  MonitorOptions o;
  o.use_verbs = false;
  return o;
}

std::vector<RankGpu> eight_ranks(const std::string& job = "job") {
  std::vector<RankGpu> r;
  for (int i = 0; i < 8; i++) r.push_back({job, i, i, ""});
  return r;
}

// 300 MB/s of NCCL payload per rank: 1.2 GB/s per rail each way (2 ranks x 2).
std::vector<uint64_t> traffic(int ranks = 8) { return std::vector<uint64_t>(static_cast<std::size_t>(ranks), 300'000'000ULL); }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

const PortSnapshot* find_port(const LinkSnapshot& s, const std::string& dev, int port) {
  for (const auto& p : s.ports) {
    if (p.device == dev && p.port == port) return &p;
  }
  return nullptr;
}

TEST(IbFixture, StandardLayoutReadsBackExactly) {
  TempDir t;
  IbFixture fx(t.path, IbLayout::standard(), {});
  fx.lay_out();
  for (int i = 0; i < 3; i++) fx.advance(1.0, traffic());
  fx.write();
  ManualClock clock;
  RdmaMonitor m(t.path, options(), clock);
  m.poll();
  LinkSnapshot s = m.snapshot();
  const nlohmann::json truth = read_json(t.path + "/" + sim::kIbTruthFile);

  // Every device and port of the truth, with the counters the simulator wrote.
  std::size_t ports = 0;
  for (const auto& d : truth["devices"]) {
    for (const auto& p : d["ports"]) {
      ports++;
      const PortSnapshot* got = find_port(s, d["name"], p["port"]);
      ASSERT_NE(got, nullptr) << d["name"] << " " << p["port"];
      EXPECT_EQ(got->receive_bytes, p["receive_bytes"].get<uint64_t>()) << d["name"];
      EXPECT_EQ(got->transmit_bytes, p["transmit_bytes"].get<uint64_t>()) << d["name"];
      EXPECT_EQ(got->transmit_wait, p["transmit_wait"].get<uint64_t>()) << d["name"];
      for (const auto& [name, v] : p["errors"].items()) {
        EXPECT_EQ(got->errors.at(name), v.get<uint64_t>()) << d["name"] << " " << name;
      }
      EXPECT_EQ(got->link_layer, d["link_layer"]);
      EXPECT_EQ(got->rate_text, p["rate"]);
      EXPECT_TRUE(got->up);
    }
  }
  EXPECT_EQ(ports, 8u);
  EXPECT_EQ(s.ports.size(), ports);
  EXPECT_EQ(s.devices.size(), 7u);
  // Nothing was skipped on a healthy fixture.
  EXPECT_TRUE(s.skips.empty()) << s.skips.begin()->first;

  // Affinity: GPU 2k and 2k+1 share a PCIe switch with mlx5_k; nothing else is near a GPU.
  EXPECT_TRUE(s.topology_available);
  ASSERT_EQ(s.gpus.size(), 8u);
  for (const auto& d : s.devices) {
    std::set<int> near;
    for (const auto& g : d.gpus) {
      near.insert(g.gpu_index);
      EXPECT_EQ(g.kind, "pcie_switch");
    }
    if (d.name.rfind("mlx5_", 0) == 0 && d.name.size() == 6 && d.name[5] < '4') {
      const int k = d.name[5] - '0';
      EXPECT_EQ(near, (std::set<int>{2 * k, 2 * k + 1})) << d.name;
    } else {
      EXPECT_TRUE(near.empty()) << d.name;
    }
  }
  for (const auto& g : truth["gpus"]) {
    EXPECT_EQ(s.gpus[g["index"].get<std::size_t>()].pci_address, g["pci"]);
  }
  auto rn = rank_nics(s, eight_ranks());
  ASSERT_EQ(rn.size(), 8u);
  for (const auto& r : rn) EXPECT_EQ(r.device, "mlx5_" + std::to_string(r.rank / 2));
}

struct FaultCase {
  DegradeSpec spec;
  const char* reason;
};

TEST(IbFixture, EachInjectedFaultIsNamedAloneWithTheRightReason) {
  const FaultCase cases[] = {
      {{"mlx5_2", 1, DegradeKind::Errors, 5}, "errors"},
      {{"mlx5_4", 2, DegradeKind::Flap, 5}, "flapping"},  // port 2 of the dual-port HCA
      {{"mlx5_1", 1, DegradeKind::Width, 5}, "width"},
      {{"mlx5_3", 1, DegradeKind::Speed, 5}, "rate"},
      {{"mlx5_0", 1, DegradeKind::Congestion, 5}, "congestion"},
      {{"mlx5_bond_0", 1, DegradeKind::Down, 5}, "down"},  // the RoCE bond
      {{"mlx5_3", 1, DegradeKind::Imbalance, 5}, "imbalance"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.reason) + " on " + c.spec.device + ":" + std::to_string(c.spec.port));
    TempDir t;
    IbFixture fx(t.path, IbLayout::standard(), {c.spec});
    fx.lay_out();
    ManualClock clock;
    RdmaMonitor m(t.path, options(), clock);
    m.set_ranks(eight_ranks());
    int raised_at = -1;
    for (int sec = 1; sec <= 16; sec++) {
      fx.advance(1.0, traffic());
      fx.write();
      clock.advance(1.0);
      m.poll();
      const LinkSnapshot s = m.snapshot();
      for (const auto& p : s.ports) {
        const bool target = p.device == c.spec.device && p.port == c.spec.port;
        if (!target) {
          EXPECT_TRUE(p.degraded.empty()) << "t=" << sec << " " << p.device << ":" << p.port << " "
                                          << *p.degraded.begin() << ": " << p.degraded_detail.begin()->second;
        } else if (sec < 5) {
          EXPECT_TRUE(p.degraded.empty()) << "t=" << sec << " before the fault";
        } else if (!p.degraded.empty()) {
          EXPECT_EQ(p.degraded, std::set<std::string>{c.reason}) << "t=" << sec;
          if (raised_at < 0) raised_at = sec;
        } else {
          EXPECT_LT(raised_at, 0) << "t=" << sec << ": cleared while the fault lasts";
        }
      }
    }
    ASSERT_GT(raised_at, 0) << "never raised";
    EXPECT_LE(raised_at - 5, 5) << "raised " << raised_at - 5 << " polls after the fault";
    // The event names the ranks next to the port (none for the bond and the storage HCA).
    const LinkSnapshot s = m.snapshot();
    std::vector<LinkEvent> evs = m.drain_events();
    ASSERT_FALSE(evs.empty());
    const LinkEvent& ev = evs.front();
    EXPECT_EQ(ev.device, c.spec.device);
    EXPECT_EQ(ev.reason, c.reason);
    std::vector<nlohmann::json> json;
    for (const auto& e : link_degraded_events(ev, s, eight_ranks())) json.push_back(event_to_json(e));
    ASSERT_EQ(json.size(), 1u);
    if (c.spec.device.size() == 6 && c.spec.device[5] < '4') {
      const int k = c.spec.device[5] - '0';
      EXPECT_EQ(json[0]["evidence"]["ranks"], nlohmann::json::array({2 * k, 2 * k + 1}));
      EXPECT_EQ(json[0]["rank"], 2 * k);
    } else {
      EXPECT_TRUE(json[0]["rank"].is_null());
    }
    // The simulator's record says what it injected.
    const auto truth = read_json(t.path + "/" + sim::kIbTruthFile);
    ASSERT_EQ(truth["degrade"].size(), 1u);
    EXPECT_EQ(truth["degrade"][0]["expected_reason"], c.reason);
    EXPECT_TRUE(truth["degrade"][0]["injected"].get<bool>());
  }
}

TEST(IbFixture, DegradeSpecs) {
  std::string err;
  auto d = sim::parse_degrade("mlx5_bond_0:1:flap@0.5", err);
  ASSERT_TRUE(d.has_value()) << err;
  EXPECT_EQ(d->device, "mlx5_bond_0");
  EXPECT_EQ(d->port, 1);
  EXPECT_EQ(d->kind, DegradeKind::Flap);
  EXPECT_DOUBLE_EQ(d->after_s, 0.5);
  EXPECT_DOUBLE_EQ(sim::parse_degrade("mlx5_0:2:speed", err)->after_s, 3.0);
  for (const char* bad : {"mlx5_0:1", "mlx5_0:x:errors", "mlx5_0:1:melt", ":1:errors", "mlx5_0:0:down",
                          "mlx5_0:1:down@-1", "mlx5_0:1:down@soon"}) {
    EXPECT_FALSE(sim::parse_degrade(bad, err).has_value()) << bad;
    EXPECT_FALSE(err.empty());
  }
  TempDir t;
  EXPECT_THROW(IbFixture(t.path, IbLayout::standard(), {{"mlx5_9", 1, DegradeKind::Down, 1}}), std::invalid_argument);
  EXPECT_THROW(IbFixture(t.path, IbLayout::standard(), {{"mlx5_0", 2, DegradeKind::Down, 1}}), std::invalid_argument);
  // A fixture is never laid over a directory that holds something else.
  write_file(t.path + "/precious", "x");
  IbFixture fx(t.path, IbLayout::standard(), {});
  EXPECT_THROW(fx.lay_out(), std::runtime_error);
}

// ---------------------------------------------------------------- the peer check

// name{labels} value lines of a Prometheus text exposition, keyed "name|device|port|counter".
std::map<std::string, double> parse_exposition(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto brace = line.find('{');
    const auto close = line.rfind('}');
    std::string name, labels, value;
    if (brace == std::string::npos) {
      const auto sp = line.find(' ');
      name = line.substr(0, sp);
      value = line.substr(sp + 1);
    } else {
      name = line.substr(0, brace);
      labels = line.substr(brace + 1, close - brace - 1);
      value = line.substr(close + 2);
    }
    std::map<std::string, std::string> l;
    std::size_t pos = 0;
    while (pos < labels.size()) {
      const auto eq = labels.find('=', pos);
      const auto q2 = labels.find('"', eq + 2);
      l[labels.substr(pos, eq - pos)] = labels.substr(eq + 2, q2 - eq - 2);
      pos = q2 + 2;
    }
    out[name + "|" + l["device"] + "|" + l["port"] + "|" + l["counter"]] = std::stod(value);
  }
  return out;
}

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Runs node_exporter's infiniband collector on `sysfs` and returns its /metrics text.
std::string scrape_node_exporter(const std::string& sysfs, std::string& err) {
  const uint16_t port = free_port();
  const std::string listen = "127.0.0.1:" + std::to_string(port);
  std::vector<std::string> args = {kNodeExporter, "--path.sysfs=" + sysfs, "--collector.disable-defaults",
                                   "--collector.infiniband", "--web.listen-address=" + listen};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  if (posix_spawn(&pid, kNodeExporter, &fa, nullptr, argv.data(), environ) != 0) {
    err = "cannot start node_exporter";
    return "";
  }
  posix_spawn_file_actions_destroy(&fa);
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = cli::http_get("http://" + listen + "/metrics", std::chrono::milliseconds(2000));
    if (r.ok() && r->status == 200) {
      body = r->body;
      break;
    }
    err = r.ok() ? "status " + std::to_string(r->status) : r.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  ::kill(pid, SIGTERM);
  ::waitpid(pid, nullptr, 0);
  return body;
}

// Argus's error counter -> node_exporter's metric (node_infiniband_...).
const std::map<std::string, std::string> kNodeErrorNames = {
    {"symbol_error", "symbol_error_total"},
    {"link_error_recovery", "link_error_recovery_total"},
    {"link_downed", "link_downed_total"},
    {"port_rcv_errors", "port_errors_received_total"},
    {"port_rcv_remote_physical_errors", "port_receive_remote_physical_errors_total"},
    {"port_rcv_switch_relay_errors", "port_receive_switch_relay_errors_total"},
    {"port_xmit_discards", "port_discards_transmitted_total"},
    {"port_rcv_discards", "port_discards_received_total"},
    {"port_xmit_constraint_errors", "port_constraint_errors_transmitted_total"},
    {"port_rcv_constraint_errors", "port_constraint_errors_received_total"},
    {"local_link_integrity_errors", "local_link_integrity_errors_total"},
    {"excessive_buffer_overrun_errors", "excessive_buffer_overrun_errors_total"},
    {"VL15_dropped", "vl15_dropped_total"},
};

// Argus (rendered /metrics text) against node_exporter on the same tree, every device/port.
// `agent_text`: an argus-agent's /metrics on that tree; empty = rendered here.
void peer_check(const std::string& sysfs, std::size_t expect_ports, const std::string& agent_text = "") {
  ManualClock clock;
  RdmaMonitor m(sysfs, options(), clock);
  m.poll();
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, collect_rdma_metrics(m.snapshot(), {}));
  const auto ours = parse_exposition(agent_text.empty() ? text.str() : agent_text);

  std::string err;
  const std::string node_text = scrape_node_exporter(sysfs, err);
  ASSERT_FALSE(node_text.empty()) << err;
  ASSERT_NE(node_text.find("node_scrape_collector_success{collector=\"infiniband\"} 1"), std::string::npos)
      << "node_exporter's infiniband collector failed on the fixture";
  const auto node = parse_exposition(node_text);

  std::set<std::pair<std::string, std::string>> node_ports, our_ports;
  for (const auto& [key, v] : node) {
    if (key.rfind("node_infiniband_port_data_received_bytes_total|", 0) == 0) {
      auto a = key.find('|'), b = key.find('|', a + 1), c = key.find('|', b + 1);
      node_ports.insert({key.substr(a + 1, b - a - 1), key.substr(b + 1, c - b - 1)});
    }
  }
  for (const auto& p : m.snapshot().ports) our_ports.insert({p.device, std::to_string(p.port)});
  EXPECT_EQ(node_ports, our_ports);
  EXPECT_EQ(our_ports.size(), expect_ports);

  auto get = [](const std::map<std::string, double>& mm, const std::string& k) -> std::optional<double> {
    auto it = mm.find(k);
    if (it == mm.end()) return std::nullopt;
    return it->second;
  };
  std::size_t compared = 0;
  for (const auto& [dev, port] : node_ports) {
    SCOPED_TRACE(dev + ":" + port);
    const std::string dp = "|" + dev + "|" + port + "|";
    // Bytes: node_exporter's figures are x4 already; where counters_ext/ exists it shows both
    // the 32-bit (saturating) and the 64-bit counters, and Argus takes the 64-bit one.
    for (auto [ours_name, node_name, legacy] :
         {std::tuple{"argus_ib_port_receive_bytes_total", "node_infiniband_port_data_received_bytes_total",
                     "node_infiniband_legacy_data_received_bytes_total"},
          std::tuple{"argus_ib_port_transmit_bytes_total", "node_infiniband_port_data_transmitted_bytes_total",
                     "node_infiniband_legacy_data_transmitted_bytes_total"}}) {
      auto o = get(ours, std::string(ours_name) + dp);
      auto n = get(node, std::string(node_name) + dp);
      auto l = get(node, std::string(legacy) + dp);
      ASSERT_TRUE(o && n) << ours_name;
      EXPECT_EQ(*o, l ? std::max(*n, *l) : *n) << ours_name;
      compared++;
    }
    auto ow = get(ours, "argus_ib_port_transmit_wait_total" + dp);
    auto nw = get(node, "node_infiniband_port_transmit_wait_total" + dp);
    EXPECT_EQ(ow.has_value(), nw.has_value());
    if (ow && nw) {
      EXPECT_EQ(*ow, *nw);
    }
    for (const auto& [counter, node_name] : kNodeErrorNames) {
      auto o = get(ours, "argus_ib_port_errors_total" + dp + counter);
      auto n = get(node, "node_infiniband_" + node_name + dp);
      EXPECT_EQ(o.has_value(), n.has_value()) << counter;
      if (o && n) {
        EXPECT_EQ(*o, *n) << counter;
        compared++;
      }
    }
  }
  EXPECT_GT(compared, expect_ports * 10);
}

TEST(IbFixturePeerCheck, CountersEqualNodeExporterOnTheStandardFixture) {
  if (::access(kNodeExporter, X_OK) != 0) GTEST_SKIP() << "prometheus-node-exporter not installed";
  TempDir t;
  IbFixture fx(t.path, IbLayout::standard(),
               {{"mlx5_2", 1, DegradeKind::Errors, 1}, {"mlx5_4", 2, DegradeKind::Flap, 0}});
  fx.lay_out();
  for (int i = 0; i < 4; i++) fx.advance(1.0, traffic());
  fx.write();
  peer_check(t.path, 8);
}

// The whole agent, not only the library: argus-agent --sysfs-root on the fixture.
TEST(IbFixturePeerCheck, AgentMetricsEqualNodeExporter) {
  if (::access(kNodeExporter, X_OK) != 0) GTEST_SKIP() << "prometheus-node-exporter not installed";
  if (geteuid() != 0) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") FAIL() << "CI=true and not root";
    GTEST_SKIP() << "the agent needs root to load eBPF";
  }
  TempDir t;
  IbFixture fx(t.path, IbLayout::standard(), {{"mlx5_1", 1, DegradeKind::Errors, 1}});
  fx.lay_out();
  for (int i = 0; i < 3; i++) fx.advance(1.0, traffic());
  fx.write();
  const std::string listen = "127.0.0.1:" + std::to_string(free_port());
  const std::string agent = std::string(ARGUS_BUILD_DIR) + "/bin/argus-agent";
  std::vector<std::string> args = {agent, "--listen", listen, "--sysfs-root", t.path, "--log-level", "warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, agent.c_str(), &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  std::string body;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = cli::http_get("http://" + listen + "/metrics", std::chrono::milliseconds(2000));
    if (r.ok() && r->status == 200 && r->body.find("argus_ib_port_receive_bytes_total{") != std::string::npos) {
      body = r->body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);  // nothing is probed: no clean detach needed
  ::waitpid(pid, nullptr, 0);
  ASSERT_FALSE(body.empty()) << "the agent never served RDMA metrics";
  peer_check(t.path, 8, body);
}

TEST(IbFixturePeerCheck, CountersEqualNodeExporterOnAnotherLayout) {
  if (::access(kNodeExporter, X_OK) != 0) GTEST_SKIP() << "prometheus-node-exporter not installed";
  // 3 dual-port HCAs, one port down, one counter not available on one port, no hw_counters
  // on another: a layout the other tests do not use.
  IbLayout l = IbLayout::grid(3, 2);
  l.devices[1].hw_counters = false;
  l.devices[2].rate = "100 Gb/sec (4X EDR)";
  l.devices[2].hca_type = "MT4119";
  TempDir t;
  IbFixture fx(t.path, l, {{"mlx5_0", 2, DegradeKind::Down, 0}, {"mlx5_2", 1, DegradeKind::Width, 0}});
  fx.lay_out();
  fx.advance(2.0, traffic(6));
  fx.write();
  write_file(port_dir(t.path, "mlx5_1", 2) + "/counters/port_rcv_switch_relay_errors", "N/A (no PMA)\n");
  peer_check(t.path, 6);
}

// ---------------------------------------------------------------- argus-sim's flags

int run_sim(const std::vector<std::string>& args, std::string& output) {
  std::string cmd = kBuild + "/bin/argus-sim";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) output += buf;
  int st = ::pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(IbFixtureSim, IbOnlyModeWithADegradedPort) {
  TempDir t;
  const std::string dir = t.path + "/fx";
  std::string out;
  ASSERT_EQ(run_sim({"--ib-fixture", dir, "--ib-only", "--ranks", "8", "--steps", "6", "--step-ms", "100",
                     "--degrade", "mlx5_2:1:width@0.2", "--quiet"},
                    out),
            0)
      << out;
  const auto truth = read_json(dir + "/" + sim::kIbTruthFile);
  ASSERT_EQ(truth["degrade"].size(), 1u);
  EXPECT_TRUE(truth["degrade"][0]["injected"].get<bool>());
  EXPECT_EQ(truth["degrade"][0]["expected_reason"], "width");
  ManualClock clock;
  RdmaMonitor m(dir, options(), clock);
  m.poll();
  auto s = m.snapshot();
  EXPECT_EQ(s.ports.size(), 8u);
  const PortSnapshot* p = find_port(s, "mlx5_2", 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->width, 2);
  EXPECT_EQ(p->rate_text, "200 Gb/sec (2X NDR)");
  for (const auto& d : truth["devices"]) {
    for (const auto& tp : d["ports"]) {
      EXPECT_EQ(find_port(s, d["name"], tp["port"])->receive_bytes, tp["receive_bytes"].get<uint64_t>());
    }
  }
  // Bad flags are one clear line each.
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--degrade", "mlx5_0:1:errors"},
           {"--ib-fixture", dir, "--ib-only", "--degrade", "mlx5_0:1:melt"},
           {"--ib-fixture", dir, "--ib-only", "--degrade", "mlx5_7:1:errors"}}) {
    std::string o;
    EXPECT_EQ(run_sim(bad, o), 2) << o;
    EXPECT_NE(o.find("argus-sim: error: "), std::string::npos) << o;
  }
}

TEST(IbFixtureSim, CountersFollowTheJobsCollectiveBytes) {
  TempDir t;
  const std::string dir = t.path + "/fx";
  const nlohmann::json before = IbFixture(dir, IbLayout::standard(), {}).truth();
  std::string out;
  ASSERT_EQ(run_sim({"--ib-fixture", dir, "--ranks", "2", "--steps", "4", "--step-ms", "10", "--init-ms", "0",
                     "--quiet"},
                    out),
            0)
      << out;
  const auto after = read_json(dir + "/" + sim::kIbTruthFile);
  // Ranks 0 and 1 drive GPUs 0 and 1, next to mlx5_0: it carries 2 x their payload each way.
  uint64_t payload = 0;
  for (int r = 0; r < 2; r++) payload += sim::CollectiveBytes(r, 2).after_steps(4);
  auto rx = [](const nlohmann::json& tr, const std::string& dev) {
    for (const auto& d : tr["devices"]) {
      if (d["name"] == dev) return d["ports"][0]["receive_bytes"].get<uint64_t>();
    }
    return uint64_t{0};
  };
  const uint64_t grew = rx(after, "mlx5_0") - rx(before, "mlx5_0");
  EXPECT_NEAR(static_cast<double>(grew), 2.0 * static_cast<double>(payload), 8.0);
  EXPECT_EQ(rx(after, "mlx5_1"), rx(before, "mlx5_1"));  // no rank next to it
  EXPECT_GT(rx(after, "mlx5_4"), rx(before, "mlx5_4"));  // storage traffic
}

}  // namespace
}  // namespace argus::rdma
