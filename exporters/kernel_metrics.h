// The kernel layer's families (issue 12), each part in its own file so that
// the layers grow apart: scheduling and cgroup CPU (sched_metrics.cpp), TCP and
// block I/O (net_metrics.cpp), and the node's kernel probes and GPU Xid lines
// (kernel_metrics.cpp). collect_metrics appends them after its own.
#pragma once
#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "exporters/metric_family.h"
#include "userspace/kmsg/xid.h"
#include "userspace/model/snapshot.h"

namespace argus {

// The processes of one (job_id, rank), as every per-rank family sees them:
// counters sum over the members, gauges come from the lead (running first,
// then the newest).
struct RankGroup {
  MetricLabels base;  // job_id, rank
  const RankSnapshot* lead = nullptr;
  std::vector<const RankSnapshot*> members;  // ascending pid
};
std::vector<RankGroup> rank_groups(const Snapshot& snap);

// A log2 histogram (bucket b: [2^(b-1), 2^b) ns) as a Prometheus histogram with
// le = 2^b ns for b in [first, last], then +Inf.
void add_log2_histogram(prometheus::MetricFamily& f, MetricLabels labels, const LaunchTiming& t, uint32_t first,
                        uint32_t last);

void append_sched_metrics(const std::vector<RankGroup>& groups, std::vector<prometheus::MetricFamily>& out);
void append_net_metrics(const std::vector<RankGroup>& groups,
                        std::vector<prometheus::MetricFamily>& out);
// PyTorch's process groups (framework_metrics.cpp).
void append_framework_metrics(const std::vector<RankGroup>& groups, std::vector<prometheus::MetricFamily>& out);
// Device memory per rank (issue 32): held, peak, the GPU's total, the calls, failures, the growth verdict.
void append_gpu_memory_metrics(const std::vector<RankGroup>& groups, std::vector<prometheus::MetricFamily>& out);
// The GPU driver's Xid lines (userspace/kmsg): following = the kernel log is read.
std::vector<prometheus::MetricFamily> xid_metrics(const kmsg::XidCounts& counts, bool following);

}  // namespace argus
