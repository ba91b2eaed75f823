// Every metric the agent exports about itself, declared once: name, type,
// labels and help. The exporters build these families from this table only, and
// a test checks docs/metrics.md against it (tests/unit/metrics_doc_test.cpp), so
// a new counter of the agent is a row here, counted where it happens
// (agent_counters.h), documented where users read it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace argus {

enum class MetricKind : uint8_t { kCounter, kGauge, kHistogram };

// The rows of kAgentMetrics, in its order.
enum class AgentMetric : uint8_t {
  kEventsTotal,
  kEventsLost,
  kTrackedProcesses,
  kProbeAttachErrors,
  kProbesAttached,
  kProbedFiles,
  kProbeFilesReleased,
  kProbesDetaching,
  kProbeAttachDelay,
  kCapability,
  kUsdtSpecSlots,
  kPythonGcFiles,
  kPythonGcUnprobedFiles,
  kBpfErrors,
  kDiscoverySkips,
  kBuildInfo,
  kWindowSeconds,
  kDetectedEventsDropped,
  kCapped,
  kPodLookups,
  kPodSourceSkips,
  kPodWatchErrors,
  kRingbufPollErrors,
  kCollectiveNumbering,
  kCollectivesUnnumbered,
  kCommsUnseen,
  kP2pUnpaired,
  kKernelProbeUp,
  kUprobeLinksInfo,
  kTcpRetransmitsUnattributed,
  kKmsgMalformed,
  kKmsgLost,
  kKmsgXidDropped,
  kKmsgUp,
  kHttpRejections,
  kRdmaSkips,
};

struct AgentMetricSpec {
  AgentMetric id;
  const char* name;
  MetricKind type;
  const char* labels;  // comma-separated, "" for none
  const char* help;
};

inline constexpr AgentMetricSpec kAgentMetrics[] = {
    {AgentMetric::kEventsTotal, "argus_agent_events_total", MetricKind::kCounter, "source",
     "Events the agent received, by source."},
    {AgentMetric::kEventsLost, "argus_agent_events_lost_total", MetricKind::kCounter, "source",
     "Events lost before the agent read them, by source."},
    {AgentMetric::kTrackedProcesses, "argus_agent_tracked_processes", MetricKind::kGauge, "",
     "Processes the agent tracks now."},
    {AgentMetric::kProbeAttachErrors, "argus_agent_probe_attach_errors_total", MetricKind::kCounter, "library",
     "Probe attaches that failed, by library."},
    {AgentMetric::kProbesAttached, "argus_agent_probes_attached", MetricKind::kGauge, "library",
     "Probes attached now, by library."},
    {AgentMetric::kProbedFiles, "argus_agent_probed_files", MetricKind::kGauge, "library",
     "Library files with probes attached now, by library."},
    {AgentMetric::kProbeFilesReleased, "argus_agent_probe_files_released_total", MetricKind::kCounter, "",
     "Library files whose probes were detached because no process mapped them any more."},
    {AgentMetric::kProbesDetaching, "argus_agent_probes_detaching", MetricKind::kGauge, "",
     "Probes released (no process maps their library) that the kernel is still detaching: one at a time, ~0.1 s "
     "each."},
    {AgentMetric::kProbeAttachDelay, "argus_agent_probe_attach_delay_seconds", MetricKind::kHistogram, "library",
     "Per library file probed: from its first sight in a process's maps to its probes live (the first process's "
     "calls in between are not seen), by library."},
    {AgentMetric::kCapability, "argus_agent_capability", MetricKind::kGauge, "capability",
     "Capabilities the agent holds (1) or lacks (0), checked at start; the log names what a missing one blinds."},
    {AgentMetric::kUsdtSpecSlots, "argus_agent_usdt_spec_slots", MetricKind::kGauge, "state",
     "libbpf's USDT spec table: its size (state=limit) and the slots GPU producers hold (state=used). A full table "
     "blinds the GPU layer for new producers."},
    {AgentMetric::kPythonGcFiles, "argus_agent_python_gc_files", MetricKind::kGauge, "anchor",
     "Python interpreter files whose collector is probed now, by GC anchor."},
    {AgentMetric::kPythonGcUnprobedFiles, "argus_agent_python_gc_unprobed_files_total", MetricKind::kCounter, "",
     "Python interpreter files with no usable GC anchor (their ranks' GC counts come from polling only)."},
    {AgentMetric::kBpfErrors, "argus_agent_bpf_errors_total", MetricKind::kCounter, "error",
     "Errors counted inside the BPF programs."},
    {AgentMetric::kDiscoverySkips, "argus_agent_discovery_skips_total", MetricKind::kCounter, "reason",
     "Processes process discovery skipped, by reason."},
    {AgentMetric::kBuildInfo, "argus_agent_build_info", MetricKind::kGauge, "version",
     "The agent's version (value 1)."},
    {AgentMetric::kWindowSeconds, "argus_agent_window_seconds", MetricKind::kGauge, "",
     "The agent's analysis window (--window), in seconds."},
    {AgentMetric::kDetectedEventsDropped, "argus_agent_detected_events_dropped_total", MetricKind::kCounter, "",
     "Detected events pushed out of the agent's bounded event log (GET /api/v1/events), oldest first."},
    {AgentMetric::kCapped, "argus_agent_capped_total", MetricKind::kCounter, "structure",
     "Items a bound of the agent's memory dropped, refused or cut short, by structure."},
    {AgentMetric::kPodLookups, "argus_agent_pod_lookups_total", MetricKind::kCounter, "result",
     "Lookups of a rank's Kubernetes pod and container (one per rank and try), by result."},
    {AgentMetric::kPodSourceSkips, "argus_agent_pod_source_skips_total", MetricKind::kCounter, "reason",
     "Entries of the pod name source (log dir names, apiserver objects) skipped, by reason."},
    {AgentMetric::kPodWatchErrors, "argus_agent_pod_watch_errors_total", MetricKind::kCounter, "reason",
     "Failed apiserver lists and watches of this node's pods (--pod-info apiserver), by reason."},
    {AgentMetric::kRingbufPollErrors, "argus_agent_ringbuf_poll_errors_total", MetricKind::kCounter, "",
     "Ring-buffer polls that failed (the event loop goes on)."},
    {AgentMetric::kCollectiveNumbering, "argus_agent_collective_numbering_total", MetricKind::kCounter, "how",
     "Ranks' communicators whose collective numbering was settled, by how: anchored (its init seen, every call "
     "counted), reference (attached mid-job, the first such rank numbers the rest), matched (by call signatures "
     "and time), time_only (no signature match)."},
    {AgentMetric::kCollectivesUnnumbered, "argus_agent_collectives_unnumbered_total", MetricKind::kCounter, "",
     "Collectives of ranks attached mid-job that the detectors never saw: held back until the rank was numbered "
     "like its peers (calls and bytes are still counted)."},
    {AgentMetric::kCommsUnseen, "argus_agent_comms_unseen_total", MetricKind::kCounter, "",
     "Communicator handles whose making (init, split, shrink) the agent did not see, named per process in the "
     "order of their first use (job:<job>/c<n>)."},
    {AgentMetric::kP2pUnpaired, "argus_agent_p2p_unpaired_total", MetricKind::kCounter, "",
     "Point-to-point sends and receives the tracker could not pair with their other side: the peer is on another "
     "node, or a side's rank in the communicator is unknown here (calls and bytes are still counted)."},
    {AgentMetric::kKernelProbeUp, "argus_agent_kernel_probe_up", MetricKind::kGauge, "probe,flavour",
     "Kernel tracepoint probes: 1 attached (flavour tp_btf or raw_tp), 0 off by a flag (flavour=off) or refused "
     "by the kernel (flavour=failed): that layer is blind."},
    {AgentMetric::kUprobeLinksInfo, "argus_agent_uprobe_links_info", MetricKind::kGauge, "kind",
     "How uprobes attach: kind=multi (one uprobe_multi link per program and library file; one detach grace period "
     "each) or kind=perf (one perf event per probe)."},
    {AgentMetric::kTcpRetransmitsUnattributed, "argus_agent_tcp_retransmits_unattributed_total",
     MetricKind::kCounter, "",
     "TCP segments retransmitted on sockets no rank was found to own (other processes, sockets already closed, "
     "kernel sockets)."},
    {AgentMetric::kKmsgMalformed, "argus_agent_kmsg_malformed_total", MetricKind::kCounter, "",
     "Kernel log lines that name an NVRM Xid but do not parse (skipped)."},
    {AgentMetric::kKmsgLost, "argus_agent_kmsg_lost_total", MetricKind::kCounter, "",
     "Kernel log records overwritten before the agent read them (Xid lines may be among them)."},
    {AgentMetric::kKmsgXidDropped, "argus_agent_kmsg_xid_dropped_total", MetricKind::kCounter, "",
     "Xid lines not counted: argus_gpu_xid_errors_total was at its series cap (1024)."},
    {AgentMetric::kKmsgUp, "argus_agent_kmsg_up", MetricKind::kGauge, "",
     "1 while the agent follows the kernel log for GPU Xid lines."},
    {AgentMetric::kHttpRejections, "argus_agent_http_rejections_total", MetricKind::kCounter, "reason",
     "HTTP connections and requests the agent's server refused, by reason: over_capacity, read_timeout, "
     "header_too_large, body_too_large, bad_request, unauthorized, tls_handshake."},
    {AgentMetric::kRdmaSkips, "argus_rdma_skips_total", MetricKind::kCounter, "reason",
     "Problems the RDMA layer counted and skipped, by reason."},
};

inline constexpr size_t kAgentMetricCount = sizeof(kAgentMetrics) / sizeof(kAgentMetrics[0]);

// Every row stands at its id's place: the table and the enum agree.
constexpr bool agent_metrics_in_order() {
  for (size_t i = 0; i < kAgentMetricCount; ++i)
    if (static_cast<size_t>(kAgentMetrics[i].id) != i) return false;
  return static_cast<size_t>(AgentMetric::kRdmaSkips) + 1 == kAgentMetricCount;
}
static_assert(agent_metrics_in_order(), "kAgentMetrics lists every AgentMetric once, in the enum's order");

constexpr const AgentMetricSpec& spec_of(AgentMetric m) { return kAgentMetrics[static_cast<size_t>(m)]; }

}  // namespace argus
