#include "exporters/rdma_metrics.h"

#include "exporters/metric_family.h"

#include <map>
#include <set>

namespace argus {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily family(std::string name, std::string help, MetricType type) {
  return metric_family(std::move(name), std::move(help), type);
}

void add(MetricFamily& f, Labels labels, double value) { add_sample(f, std::move(labels), value); }

}  // namespace

std::vector<MetricFamily> collect_rdma_metrics(const rdma::LinkSnapshot& snap, const std::vector<rdma::RankGpu>& ranks) {
  auto rx = family("argus_ib_port_receive_bytes_total",
                   "Bytes received by the InfiniBand/RoCE port (port_rcv_data x 4).", MetricType::Counter);
  auto tx = family("argus_ib_port_transmit_bytes_total",
                   "Bytes transmitted by the InfiniBand/RoCE port (port_xmit_data x 4).", MetricType::Counter);
  auto errors = family("argus_ib_port_errors_total", "Port error counters, by sysfs counter name.",
                       MetricType::Counter);
  auto wait = family("argus_ib_port_transmit_wait_total",
                     "Ticks the port had data to send but could not (port_xmit_wait).", MetricType::Counter);
  auto rate = family("argus_ib_link_rate_bytes_per_second", "Signalling rate of the link (the port's rate).",
                     MetricType::Gauge);
  auto up = family("argus_ib_link_up", "1 when the port is ACTIVE.", MetricType::Gauge);
  auto degraded = family("argus_ib_link_degraded",
                         "1 while the link is degraded for that reason (errors, flapping, down, rate, width, "
                         "congestion, imbalance).",
                         MetricType::Gauge);
  auto nic_info = family("argus_rank_nic_info", "A rank whose GPU sits next to this NIC port (value 1).",
                         MetricType::Gauge);

  for (const auto& p : snap.ports) {
    const Labels base{{"device", p.device}, {"port", std::to_string(p.port)}};
    auto with = [&](const char* k, const std::string& v) {
      Labels l = base;
      l.push_back({k, v});
      return l;
    };
    if (p.has_receive_bytes) add(rx, base, static_cast<double>(p.receive_bytes));
    if (p.has_transmit_bytes) add(tx, base, static_cast<double>(p.transmit_bytes));
    for (const auto& [name, v] : p.errors) add(errors, with("counter", name), static_cast<double>(v));
    if (p.has_transmit_wait) add(wait, base, static_cast<double>(p.transmit_wait));
    if (p.rate_bytes_per_second > 0) add(rate, base, static_cast<double>(p.rate_bytes_per_second));
    add(up, base, p.up ? 1 : 0);
    for (auto reason : rdma::kDegradeReasons) {
      const std::string r(reason);
      add(degraded, with("reason", r), p.degraded.count(r) ? 1 : 0);
    }
  }
  for (const auto& rn : rdma::rank_nics(snap, ranks)) {
    add(nic_info,
        {{"job_id", rn.job_id}, {"rank", std::to_string(rn.rank)}, {"device", rn.device}, {"port", std::to_string(rn.port)}},
        1);
  }

  // Everything the RDMA layer skipped (rdma/rdma_monitor.h lists the reasons).
  auto skips = agent_family(AgentMetric::kRdmaSkips);
  for (const auto& [reason, n] : snap.skips) add(skips, {{"reason", reason}}, static_cast<double>(n));

  std::vector<MetricFamily> out;
  out.reserve(9);
  for (auto* f : {&rx, &tx, &errors, &wait, &rate, &up, &degraded, &nic_info, &skips}) out.push_back(std::move(*f));
  return out;
}

}  // namespace argus
