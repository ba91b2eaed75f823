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

std::vector<prometheus::MetricFamily> xid_metrics(const kmsg::XidCounts& c, bool following) {
  auto xid = metric_family("argus_gpu_xid_errors_total",
                           "GPU Xid errors the NVIDIA driver logged since the agent started, by GPU (the driver's "
                           "PCI bus id) and Xid code.",
                           MetricType::Counter);
  for (const auto& [key, n] : c.errors)
    add_sample(xid, {{"pci_bus_id", key.first}, {"xid", key.second}}, static_cast<double>(n));
  std::vector<prometheus::MetricFamily> out;
  out.push_back(std::move(xid));
  out.push_back(count_family(AgentMetric::kKmsgMalformed, static_cast<double>(c.malformed)));
  out.push_back(count_family(AgentMetric::kKmsgLost, static_cast<double>(c.lost)));
  out.push_back(count_family(AgentMetric::kKmsgXidDropped, static_cast<double>(c.dropped)));
  out.push_back(count_family(AgentMetric::kKmsgUp, following ? 1 : 0));
  return out;
}

}  // namespace argus
