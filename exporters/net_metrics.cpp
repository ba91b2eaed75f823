// TCP retransmit and block I/O families (issue 12, parts 4 and 6): filled by that work.
#include "exporters/kernel_metrics.h"

namespace argus {

void append_net_metrics(const std::vector<RankGroup>& /*groups*/, const AgentSnapshot& /*agent*/,
                        std::vector<prometheus::MetricFamily>& /*out*/) {}

}  // namespace argus
