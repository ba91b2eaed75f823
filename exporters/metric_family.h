// Building prometheus-cpp metric families by hand: every exporter renders
// snapshots into MetricFamily values with these two helpers.
#pragma once
#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <string>
#include <utility>
#include <vector>

#include "userspace/model/agent_counters.h"
#include "userspace/model/agent_metrics.h"

namespace argus {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

inline prometheus::MetricFamily metric_family(std::string name, std::string help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

// A family of the agent's own metrics, as the table declares it (name, type, help).
inline prometheus::MetricFamily agent_family(AgentMetric m) {
  const AgentMetricSpec& spec = spec_of(m);
  const auto type = spec.type == MetricKind::kCounter ? prometheus::MetricType::Counter
                    : spec.type == MetricKind::kGauge ? prometheus::MetricType::Gauge
                                                      : prometheus::MetricType::Histogram;
  return metric_family(spec.name, spec.help, type);
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

// The family of a count kept per label of a vocabulary (agent_counters.h): one
// sample per label, named as the table says; every label when `every_label` (the
// series exist from the start), else those counted at least once.
template <typename E>
prometheus::MetricFamily counted_family(AgentMetric m, const AgentCounterValues& values, bool every_label) {
  auto f = agent_family(m);
  for (unsigned i = 0; i < kVocabSize<E>; ++i) {
    const uint64_t n = values.get(static_cast<E>(i));
    if (every_label || n != 0) add_sample(f, {{spec_of(m).labels, label_of(static_cast<E>(i))}}, static_cast<double>(n));
  }
  return f;
}

// The family of one count with no label.
inline prometheus::MetricFamily count_family(AgentMetric m, double value) {
  auto f = agent_family(m);
  add_sample(f, {}, value);
  return f;
}

}  // namespace argus
