#include "exporters/agent_metrics.h"

#include <map>
#include <string>

#include "exporters/kernel_metrics.h"
#include "exporters/metric_family.h"

namespace argus {
namespace {

using prometheus::MetricFamily;

// Buckets of argus_agent_probe_attach_delay_seconds: le = 2^b ns, about 1 ms to 17 s.
constexpr uint32_t kAttachBucketFirst = 20;
constexpr uint32_t kAttachBucketLast = 34;

// Pod lookup results (pods/pod_resolver.h), each present from the start so that
// a rate() sees the first one.
constexpr const char* kPodLookupResults[] = {"found",   "container_unknown", "pod_unknown",      "no_pod_logs",
                                             "not_pod", "cgroup_namespaced", "cgroup_malformed", "cgroup_unreadable"};

// A family of values kept by a source under its own labels.
MetricFamily keyed_family(AgentMetric m, const std::map<std::string, uint64_t>& values) {
  auto f = agent_family(m);
  for (const auto& [k, v] : values) add_sample(f, {{spec_of(m).labels, k}}, static_cast<double>(v));
  return f;
}

MetricFamily pod_lookup_family(const AgentSnapshot& a) {
  std::map<std::string, uint64_t> lookups;
  if (!a.pod_info.empty() && a.pod_info != "off")
    for (const char* r : kPodLookupResults) lookups[r] = 0;
  for (const auto& [k, v] : a.pod_lookups) lookups[k] = v;
  return keyed_family(AgentMetric::kPodLookups, lookups);
}

MetricFamily probe_attach_delay_family(const AgentSnapshot& a) {
  auto f = agent_family(AgentMetric::kProbeAttachDelay);
  for (const auto& [lib, t] : a.probe_attach_delay)
    add_log2_histogram(f, {{"library", lib}}, t, kAttachBucketFirst, kAttachBucketLast);
  return f;
}

MetricFamily kernel_probe_family(const AgentSnapshot& a) {
  auto f = agent_family(AgentMetric::kKernelProbeUp);
  for (const auto& [probe, state] : a.kernel_probes)
    add_sample(f, {{"probe", probe}, {"flavour", state}}, state == "tp_btf" || state == "raw_tp" ? 1 : 0);
  return f;
}

}  // namespace

void append_agent_metrics(const AgentSnapshot& a, std::vector<MetricFamily>& out) {
  const AgentCounterValues& c = a.counters;
  out.push_back(counted_family<EventSource>(AgentMetric::kEventsTotal, c, true));
  out.push_back(keyed_family(AgentMetric::kEventsLost, a.events_lost));
  out.push_back(count_family(AgentMetric::kTrackedProcesses, static_cast<double>(a.tracked_processes)));
  out.push_back(keyed_family(AgentMetric::kProbeAttachErrors, a.probe_attach_errors));
  out.push_back(keyed_family(AgentMetric::kProbesAttached, a.probes_attached));
  out.push_back(keyed_family(AgentMetric::kProbedFiles, a.probed_files));
  out.push_back(count_family(AgentMetric::kProbeFilesReleased, static_cast<double>(a.probe_files_released)));
  out.push_back(count_family(AgentMetric::kProbesDetaching, static_cast<double>(a.probes_detaching)));
  out.push_back(probe_attach_delay_family(a));
  auto caps = agent_family(AgentMetric::kCapability);
  for (const auto& [name, held] : a.capabilities) add_sample(caps, {{"capability", name}}, held ? 1 : 0);
  out.push_back(std::move(caps));
  auto usdt = agent_family(AgentMetric::kUsdtSpecSlots);
  add_sample(usdt, {{"state", "limit"}}, static_cast<double>(a.usdt_spec_slots_limit));
  add_sample(usdt, {{"state", "used"}}, static_cast<double>(a.usdt_spec_slots_used));
  out.push_back(std::move(usdt));
  out.push_back(keyed_family(AgentMetric::kPythonGcFiles, a.python_gc_files));
  out.push_back(count_family(AgentMetric::kPythonGcUnprobedFiles, static_cast<double>(a.python_gc_unprobed_files)));
  out.push_back(keyed_family(AgentMetric::kBpfErrors, a.bpf_errors));
  out.push_back(counted_family<SkipReason>(AgentMetric::kDiscoverySkips, c, false));
  auto build = agent_family(AgentMetric::kBuildInfo);
  add_sample(build, {{"version", a.version}}, 1);
  out.push_back(std::move(build));
  // The Prometheus rules read ratios "over the agent's last window": say how long it is.
  out.push_back(count_family(AgentMetric::kWindowSeconds, a.window_seconds));
  // The event log's bound, as its own family (the one users alert on).
  out.push_back(count_family(AgentMetric::kDetectedEventsDropped, static_cast<double>(c.get(Cap::kDetectedEvents))));
  out.push_back(counted_family<Cap>(AgentMetric::kCapped, c, true));
  out.push_back(pod_lookup_family(a));
  out.push_back(keyed_family(AgentMetric::kPodSourceSkips, a.pod_source_skips));
  out.push_back(keyed_family(AgentMetric::kPodWatchErrors, a.pod_watch_errors));
  out.push_back(count_family(AgentMetric::kRingbufPollErrors, static_cast<double>(c.get(AgentCount::kRingbufPollErrors))));
  out.push_back(counted_family<Numbering>(AgentMetric::kCollectiveNumbering, c, true));
  out.push_back(
      count_family(AgentMetric::kCollectivesUnnumbered, static_cast<double>(c.get(AgentCount::kCollectivesUnnumbered))));
  out.push_back(count_family(AgentMetric::kCommsUnseen, static_cast<double>(c.get(AgentCount::kCommsUnseen))));
  out.push_back(count_family(AgentMetric::kP2pUnpaired, static_cast<double>(c.get(AgentCount::kP2pUnpaired))));
  out.push_back(kernel_probe_family(a));
  auto links = agent_family(AgentMetric::kUprobeLinksInfo);
  add_sample(links, {{"kind", a.uprobe_links}}, 1);
  out.push_back(std::move(links));
  out.push_back(count_family(AgentMetric::kTcpRetransmitsUnattributed,
                             static_cast<double>(c.get(AgentCount::kTcpUnattributed))));
}

}  // namespace argus
