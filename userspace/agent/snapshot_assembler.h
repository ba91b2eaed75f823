// The agent's state as the routes read it: the registry's ranks with each
// rank's GPU view and the last detection pass's conclusions laid over them, the
// communicators' health, and the agent's own health (its counts, its probes,
// what BPF loaded and counted). Any thread.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "userspace/collectors/pod_collector.h"
#include "userspace/collectors/python_collector.h"
#include "userspace/common/clock.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/snapshot.h"
#include "userspace/probes/bpf_backend.h"
#include "userspace/probes/probe_manager.h"
#include "userspace/registry/rank_registry.h"
#include "userspace/trace/node_timeline.h"

namespace argus {

struct AssemblerParts {
  const RankRegistry& registry;
  const NodeTimeline& timeline;
  const ProbeManager& probes;
  const BpfBackend& bpf;
  const PodCollector& pods;
  const PythonCollector& python;
  const AgentCounters& counters;
  const Clock& clock;
};

// What the agent says of itself that does not change while it runs.
struct AgentFacts {
  std::string node;
  ProbeSet probes = ProbeSet::Default;
  double window_seconds = kDefaultWindowSeconds;
  std::map<std::string, bool> capabilities;
  pods::PodInfoMode pod_info = pods::PodInfoMode::kLogs;
};

class SnapshotAssembler {
 public:
  SnapshotAssembler(AssemblerParts parts, AgentFacts facts) : p_(parts), facts_(std::move(facts)) {}

  // The last detection pass's conclusions, and BPF's error counters (by id) as
  // the last stats pass read them.
  void publish_verdicts(std::map<int, RankDetection> ranks, std::vector<CommSnapshot> comms);
  void publish_bpf_errors(std::map<uint32_t, uint64_t> errors);

  Snapshot snapshot() const;

 private:
  AgentSnapshot agent() const;
  void add_probe_stats(AgentSnapshot& a) const;
  void add_bpf_counts(AgentSnapshot& a) const;

  AssemblerParts p_;
  AgentFacts facts_;
  mutable std::mutex mu_;  // guards what the stats pass publishes:
  std::map<int, RankDetection> detections_;
  std::vector<CommSnapshot> comms_;
  std::map<uint32_t, uint64_t> bpf_errors_;
};

}  // namespace argus
