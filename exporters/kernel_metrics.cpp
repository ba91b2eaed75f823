#include "exporters/kernel_metrics.h"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

namespace argus {

using prometheus::ClientMetric;
using prometheus::MetricType;

std::vector<RankGroup> rank_groups(const Snapshot& snap) {
  std::map<std::pair<std::string, int>, std::vector<const RankSnapshot*>> by_key;
  for (const auto& r : snap.ranks)
    if (r.identified()) by_key[{r.job_id, r.rank}].push_back(&r);
  std::vector<RankGroup> out;
  out.reserve(by_key.size());
  for (auto& [key, members] : by_key) {
    std::sort(members.begin(), members.end(), [](const RankSnapshot* a, const RankSnapshot* b) { return a->pid < b->pid; });
    RankGroup g;
    g.base = {{"job_id", key.first}, {"rank", std::to_string(key.second)}};
    auto order = [](const RankSnapshot* x) { return std::make_tuple(!x->exited, x->first_seen_unix, x->pid); };
    for (const auto* r : members)
      if (!g.lead || order(r) > order(g.lead)) g.lead = r;
    g.members = std::move(members);
    out.push_back(std::move(g));
  }
  return out;
}

void add_log2_histogram(prometheus::MetricFamily& f, MetricLabels labels, const LaunchTiming& t, uint32_t first,
                        uint32_t last) {
  ClientMetric m;
  m.label = std::move(labels);
  m.histogram.sample_count = t.count;
  m.histogram.sample_sum = static_cast<double>(t.ns) / 1e9;
  uint64_t cumulative = 0;
  auto it = t.log2_buckets.begin();
  for (uint32_t b = first; b <= last; ++b) {
    for (; it != t.log2_buckets.end() && it->first <= b; ++it) cumulative += it->second;
    m.histogram.bucket.push_back({cumulative, static_cast<double>(uint64_t{1} << b) / 1e9});
  }
  m.histogram.bucket.push_back({t.count, std::numeric_limits<double>::infinity()});
  f.metric.push_back(std::move(m));
}

void append_kernel_agent_metrics(const AgentSnapshot& a, std::vector<prometheus::MetricFamily>& out) {
  auto probes = metric_family("argus_agent_kernel_probe_up",
                              "Kernel tracepoint probes: 1 attached (flavour tp_btf or raw_tp), 0 off by a flag "
                              "(flavour=off) or refused by the kernel (flavour=failed): that layer is blind.",
                              MetricType::Gauge);
  for (const auto& [probe, state] : a.kernel_probes)
    add_sample(probes, {{"probe", probe}, {"flavour", state}}, state == "tp_btf" || state == "raw_tp" ? 1 : 0);
  out.push_back(std::move(probes));
  auto links = metric_family("argus_agent_uprobe_links_info",
                             "How uprobes attach: kind=multi (one uprobe_multi link per program and library file; "
                             "one detach grace period each) or kind=perf (one perf event per probe).",
                             MetricType::Gauge);
  add_sample(links, {{"kind", a.uprobe_links}}, 1);
  out.push_back(std::move(links));
}

std::vector<prometheus::MetricFamily> xid_metrics(const kmsg::XidCounts& c, bool following) {
  auto xid = metric_family("argus_gpu_xid_errors_total",
                           "GPU Xid errors the NVIDIA driver logged since the agent started, by GPU (the driver's "
                           "PCI bus id) and Xid code.",
                           MetricType::Counter);
  for (const auto& [key, n] : c.errors)
    add_sample(xid, {{"pci_bus_id", key.first}, {"xid", key.second}}, static_cast<double>(n));
  auto malformed = metric_family("argus_agent_kmsg_malformed_total",
                                 "Kernel log lines that name an NVRM Xid but do not parse (skipped).",
                                 MetricType::Counter);
  add_sample(malformed, {}, static_cast<double>(c.malformed));
  auto lost = metric_family("argus_agent_kmsg_lost_total",
                            "Kernel log records overwritten before the agent read them (Xid lines may be among them).",
                            MetricType::Counter);
  add_sample(lost, {}, static_cast<double>(c.lost));
  auto dropped = metric_family("argus_agent_kmsg_xid_dropped_total",
                               "Xid lines not counted: argus_gpu_xid_errors_total was at its series cap (1024).",
                               MetricType::Counter);
  add_sample(dropped, {}, static_cast<double>(c.dropped));
  auto up = metric_family("argus_agent_kmsg_up", "1 while the agent follows the kernel log for GPU Xid lines.",
                          MetricType::Gauge);
  add_sample(up, {}, following ? 1 : 0);
  std::vector<prometheus::MetricFamily> out;
  for (auto* f : {&xid, &malformed, &lost, &dropped, &up}) out.push_back(std::move(*f));
  return out;
}

}  // namespace argus
