// exporters/rdma_metrics: family names, types, labels, the 7 reasons per port,
// argus_rank_nic_info, link_degraded events, and promtool's linter on the text.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/promtool_check.h"
#include <prometheus/text_serializer.h>

#include "exporters/rdma_metrics.h"
#include "rdma/link_events.h"
#include "userspace/events/event_log.h"

namespace argus {
namespace {

using prometheus::MetricType;

rdma::LinkSnapshot make_snapshot() {
  rdma::LinkSnapshot s;
  s.time_unix = 1'790'000'000.25;
  s.skips = {{"bad_counter", 3}, {"missing_file", 1}};
  s.topology_available = true;
  s.gpus = {{0, "0000:13:00.0", 0}, {1, "0000:14:00.0", 0}, {2, "0000:43:00.0", 0}};
  rdma::DeviceSnapshot d0;
  d0.name = "mlx5_0";
  d0.gpus = {{0, "0000:13:00.0", "pcie_switch"}, {1, "0000:14:00.0", "pcie_switch"}};
  rdma::DeviceSnapshot d4;
  d4.name = "mlx5_4";
  s.devices = {d0, d4};
  rdma::PortSnapshot p0;
  p0.device = "mlx5_0";
  p0.port = 1;
  p0.up = true;
  p0.has_receive_bytes = p0.has_transmit_bytes = p0.has_transmit_wait = true;
  p0.receive_bytes = 4'000'000'000'004ULL;
  p0.transmit_bytes = 8;
  p0.transmit_wait = 77;
  p0.rate_bytes_per_second = 50'000'000'000ULL;
  p0.errors = {{"symbol_error", 12}, {"link_downed", 1}, {"VL15_dropped", 0}};
  p0.degraded = {"errors"};
  rdma::PortSnapshot p4a;
  p4a.device = "mlx5_4";
  p4a.port = 1;
  p4a.up = false;  // unknown rate, no counters read
  rdma::PortSnapshot p4b = p4a;
  p4b.port = 2;
  p4b.up = true;
  p4b.rate_bytes_per_second = 25'000'000'000ULL;
  s.ports = {p0, p4a, p4b};
  return s;
}

std::vector<rdma::RankGpu> ranks() {
  return {{"job-a", 0, 0, ""}, {"job-a", 1, 1, ""}, {"job-b", 7, -1, "0000:13:00.0"}, {"job-a", 2, 2, ""}};
}

std::string labels_of(const prometheus::ClientMetric& m) {
  std::string s;
  for (const auto& l : m.label) s += l.name + "=" + l.value + ",";
  return s;
}

TEST(RdmaMetrics, FamiliesNamesTypesAndLabels) {
  auto fams = collect_rdma_metrics(make_snapshot(), ranks());
  const std::vector<std::pair<std::string, MetricType>> want = {
      {"argus_ib_port_receive_bytes_total", MetricType::Counter},
      {"argus_ib_port_transmit_bytes_total", MetricType::Counter},
      {"argus_ib_port_errors_total", MetricType::Counter},
      {"argus_ib_port_transmit_wait_total", MetricType::Counter},
      {"argus_ib_link_rate_bytes_per_second", MetricType::Gauge},
      {"argus_ib_link_up", MetricType::Gauge},
      {"argus_ib_link_degraded", MetricType::Gauge},
      {"argus_rank_nic_info", MetricType::Gauge},
      {"argus_rdma_skips_total", MetricType::Counter},
  };
  ASSERT_EQ(fams.size(), want.size());
  std::map<std::string, const prometheus::MetricFamily*> by;
  for (std::size_t i = 0; i < want.size(); i++) {
    EXPECT_EQ(fams[i].name, want[i].first);
    EXPECT_EQ(fams[i].type, want[i].second) << fams[i].name;
    EXPECT_FALSE(fams[i].help.empty());
    by[fams[i].name] = &fams[i];
  }
  // Bytes: one series for the port that has them, exact value.
  const auto& rx = *by["argus_ib_port_receive_bytes_total"];
  ASSERT_EQ(rx.metric.size(), 1u);
  EXPECT_EQ(labels_of(rx.metric[0]), "device=mlx5_0,port=1,");
  EXPECT_EQ(rx.metric[0].counter.value, 4'000'000'000'004.0);
  const auto& err = *by["argus_ib_port_errors_total"];
  ASSERT_EQ(err.metric.size(), 3u);
  std::set<std::string> counters;
  for (const auto& m : err.metric) counters.insert(labels_of(m));
  EXPECT_TRUE(counters.count("device=mlx5_0,port=1,counter=symbol_error,"));
  EXPECT_EQ(by["argus_ib_port_transmit_wait_total"]->metric.size(), 1u);
  EXPECT_EQ(by["argus_ib_link_rate_bytes_per_second"]->metric.size(), 2u);  // unknown rate: no series
  ASSERT_EQ(by["argus_ib_link_up"]->metric.size(), 3u);
  EXPECT_EQ(by["argus_ib_link_up"]->metric[1].gauge.value, 0);

  // All 7 reasons on every port, 1 only where degraded.
  const auto& deg = *by["argus_ib_link_degraded"];
  ASSERT_EQ(deg.metric.size(), 3u * 7u);
  std::map<std::string, double> values;
  for (const auto& m : deg.metric) values[labels_of(m)] = m.gauge.value;
  for (const char* port : {"device=mlx5_0,port=1,", "device=mlx5_4,port=1,", "device=mlx5_4,port=2,"}) {
    for (const char* reason : {"errors", "flapping", "down", "rate", "width", "congestion", "imbalance"}) {
      const std::string key = std::string(port) + "reason=" + reason + ",";
      ASSERT_TRUE(values.count(key)) << key;
      EXPECT_EQ(values[key], key == "device=mlx5_0,port=1,reason=errors," ? 1 : 0) << key;
    }
  }

  // Ranks whose GPU sits next to mlx5_0: job-a 0 and 1 (by index), job-b 7 (by PCI address).
  const auto& info = *by["argus_rank_nic_info"];
  std::set<std::string> got;
  for (const auto& m : info.metric) {
    got.insert(labels_of(m));
    EXPECT_EQ(m.gauge.value, 1);
  }
  EXPECT_EQ(got, (std::set<std::string>{"job_id=job-a,rank=0,device=mlx5_0,port=1,",
                                        "job_id=job-a,rank=1,device=mlx5_0,port=1,",
                                        "job_id=job-b,rank=7,device=mlx5_0,port=1,"}));

  // The layer's counted skips, by reason.
  const auto& skips = *by["argus_rdma_skips_total"];
  ASSERT_EQ(skips.metric.size(), 2u);
  EXPECT_EQ(labels_of(skips.metric[0]), "reason=bad_counter,");
  EXPECT_EQ(skips.metric[0].counter.value, 3);
  EXPECT_EQ(labels_of(skips.metric[1]), "reason=missing_file,");
  EXPECT_EQ(skips.metric[1].counter.value, 1);

  // An empty snapshot still lists every family.
  auto empty = collect_rdma_metrics(rdma::LinkSnapshot{}, {});
  EXPECT_EQ(empty.size(), want.size());
  for (const auto& f : empty) EXPECT_TRUE(f.metric.empty()) << f.name;
}

TEST(RdmaMetrics, LinkDegradedEventsNameTheRanks) {
  rdma::LinkEvent ev;
  ev.seq = 3;
  ev.time_unix = 1'790'000'000.25;
  ev.device = "mlx5_0";
  ev.port = 1;
  ev.reason = "errors";
  ev.raised = true;
  ev.detail = "symbol_error 50/s (threshold 0.4/s)";
  ev.evidence = {{"symbol_error_per_second", 50}};
  ev.rate_text = "400 Gb/sec (4X NDR)";
  ev.link_layer = "InfiniBand";
  std::vector<nlohmann::json> events;
  for (const auto& e : link_degraded_events(ev, make_snapshot(), ranks())) events.push_back(event_to_json(e));
  ASSERT_EQ(events.size(), 2u);  // one per job
  const auto& a = events[0];
  EXPECT_EQ(a["time"], "2026-09-21T14:13:20.250Z");
  EXPECT_EQ(a["kind"], "link_degraded");
  EXPECT_EQ(a["job_id"], "job-a");
  EXPECT_EQ(a["rank"], 0);
  EXPECT_EQ(a["device"], "mlx5_0");
  EXPECT_EQ(a["port"], 1);
  EXPECT_EQ(a["evidence"]["ranks"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(a["evidence"]["reason"], "errors");
  EXPECT_EQ(a["evidence"]["affinity"], "pcie_switch");
  EXPECT_EQ(a["evidence"]["symbol_error_per_second"], 50);
  EXPECT_EQ(a["evidence"]["rate"], "400 Gb/sec (4X NDR)");
  const std::string summary = a["summary"];
  EXPECT_NE(summary.find("mlx5_0 port 1 degraded (errors)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("ranks 0, 1 of job job-a"), std::string::npos) << summary;
  EXPECT_EQ(events[1]["job_id"], "job-b");
  EXPECT_EQ(events[1]["rank"], 7);
  for (const char* key : {"time", "kind", "job_id", "rank", "device", "port", "summary", "evidence"}) {
    EXPECT_TRUE(a.contains(key)) << key;
  }

  // A port no rank uses: one event with null job_id and rank.
  ev.device = "mlx5_4";
  std::vector<nlohmann::json> none;
  for (const auto& e : link_degraded_events(ev, make_snapshot(), ranks())) none.push_back(event_to_json(e));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_TRUE(none[0]["job_id"].is_null());
  EXPECT_TRUE(none[0]["rank"].is_null());
  EXPECT_EQ(none[0]["evidence"]["ranks"], nlohmann::json::array());
  // A cleared reason is not an event.
  ev.raised = false;
  EXPECT_TRUE(link_degraded_events(ev, make_snapshot(), ranks()).empty());
}

TEST(RdmaMetrics, PromtoolFindsNoProblems) {
  const char* promtool = "/usr/bin/promtool";
  if (::access(promtool, X_OK) != 0) GTEST_SKIP() << "promtool not installed";
  for (const auto& snap : {make_snapshot(), rdma::LinkSnapshot{}}) {
    std::ostringstream text;
    prometheus::TextSerializer().Serialize(text, collect_rdma_metrics(snap, ranks()));
    auto [code, output] = argus::testing::promtool_check_metrics(promtool, text.str());
    EXPECT_EQ(code, 0) << output;
    EXPECT_EQ(output, "") << text.str();
  }
}

}  // namespace
}  // namespace argus
