// The agent's own families on /metrics (userspace/model/agent_metrics.h
// declares each one): what it received and lost, what it skipped, capped and
// refused, its probes and its settings.
#pragma once
#include <vector>

#include <prometheus/metric_family.h>

#include "userspace/model/snapshot.h"

namespace argus {

void append_agent_metrics(const AgentSnapshot& a, std::vector<prometheus::MetricFamily>& out);

}  // namespace argus
