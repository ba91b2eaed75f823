// Building prometheus-cpp metric families by hand: every exporter renders
// snapshots into MetricFamily values with these two helpers.
#pragma once
#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <string>
#include <utility>
#include <vector>

namespace argus {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

inline prometheus::MetricFamily metric_family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

// One sample; its value lands in the counter or the gauge slot by the family's type.
inline void add_sample(prometheus::MetricFamily& f, MetricLabels labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

}  // namespace argus
