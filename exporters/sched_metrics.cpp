// Scheduling and cgroup CPU families (issue 12, part 1): filled by the off-CPU work.
#include "exporters/kernel_metrics.h"

namespace argus {

void append_sched_metrics(const std::vector<RankGroup>& /*groups*/, std::vector<prometheus::MetricFamily>& /*out*/) {}

}  // namespace argus
