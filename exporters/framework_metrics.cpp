// The framework layer's families (issue 31): PyTorch c10d process-group calls.
#include <map>
#include <string>
#include <tuple>

#include "exporters/kernel_metrics.h"

namespace argus {

using prometheus::MetricType;

void append_framework_metrics(const std::vector<RankGroup>& groups, std::vector<prometheus::MetricFamily>& out) {
  auto calls = metric_family("argus_process_group_collectives_total",
                             "PyTorch c10d collective and point-to-point calls, by process group (its "
                             "description, else its name), backend (gloo) and op.",
                             MetricType::Counter);
  for (const auto& g : groups) {
    std::map<std::tuple<std::string, std::string, std::string>, uint64_t> sum;
    for (const auto* r : g.members)
      for (const auto& [key, n] : r->process_group_calls) sum[key] += n;
    for (const auto& [key, n] : sum) {
      MetricLabels labels = g.base;
      labels.push_back({"group", std::get<0>(key)});
      labels.push_back({"backend", std::get<1>(key)});
      labels.push_back({"op", std::get<2>(key)});
      add_sample(calls, std::move(labels), static_cast<double>(n));
    }
  }
  out.push_back(std::move(calls));
}

}  // namespace argus
