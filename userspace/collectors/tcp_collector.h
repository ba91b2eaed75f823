// TCP retransmits (BPF counts them per socket and remote) attributed to the
// ranks that own the sockets, each stats pass; those no rank owns are counted.
#pragma once
#include <string>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/rank_facts.h"
#include "userspace/probes/bpf_backend.h"
#include "userspace/procfs/socket_owners.h"

namespace argus {

class TcpCollector final : public HostCollector {
 public:
  TcpCollector(BpfRankMaps& maps, RankFacts& facts, const std::string& proc_root = kDefaultProcRoot,
               AgentCounters* counters = nullptr)
      : maps_(maps), facts_(facts), counters_(counters), attributor_(proc_root) {}
  const char* name() const override { return "tcp"; }
  void refresh(double now, const std::vector<int>& live_pids) override;

 private:
  BpfRankMaps& maps_;
  RankFacts& facts_;
  AgentCounters* counters_;  // AgentCount::kTcpUnattributed
  TcpRetransAttributor attributor_;
};

}  // namespace argus
