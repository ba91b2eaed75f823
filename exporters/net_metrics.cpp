// TCP retransmit and block I/O families (issue 12, parts 4 and 6).
#include <map>
#include <string>

#include "exporters/kernel_metrics.h"

namespace argus {

using prometheus::MetricType;

namespace {

// Buckets of argus_block_io_latency_seconds: le = 2^b ns, about 16 us to 17 s.
constexpr uint32_t kBlockFirstBucket = 14;
constexpr uint32_t kBlockLastBucket = 34;

MetricLabels with(MetricLabels base, const std::string& name, const std::string& value) {
  base.push_back({name, value});
  return base;
}

}  // namespace

void append_net_metrics(const std::vector<RankGroup>& groups,
                        std::vector<prometheus::MetricFamily>& out) {
  auto retrans = metric_family("argus_tcp_retransmits_total",
                               "TCP segments retransmitted on the rank's sockets, by remote address "
                               "(tcp_retransmit_skb; sockets matched to the rank through /proc/PID/fd).",
                               MetricType::Counter);
  auto block = metric_family("argus_block_io_latency_seconds",
                             "Block requests the rank issued itself, issue to completion, by op "
                             "(read, write, flush, discard, other); writeback by kernel threads is not counted.",
                             MetricType::Histogram);
  for (const auto& g : groups) {
    std::map<std::string, uint64_t> by_remote;
    std::map<std::string, LaunchTiming> by_op;
    for (const auto* r : g.members) {
      for (const auto& [remote, n] : r->tcp_retransmits) by_remote[remote] += n;
      for (const auto& [op, t] : r->block_io) {
        auto& sum = by_op[op];
        sum.count += t.count;
        sum.ns += t.ns;
        for (const auto& [b, n] : t.log2_buckets) sum.log2_buckets[b] += n;
      }
    }
    for (const auto& [remote, n] : by_remote)
      add_sample(retrans, with(g.base, "remote", remote), static_cast<double>(n));
    for (const auto& [op, t] : by_op)
      add_log2_histogram(block, with(g.base, "op", op), t, kBlockFirstBucket, kBlockLastBucket);
  }
  out.push_back(std::move(retrans));
  out.push_back(std::move(block));
}

}  // namespace argus
