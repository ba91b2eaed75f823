#include "userspace/collectors/tcp_collector.h"

namespace argus {

void TcpCollector::refresh(double /*now*/, const std::vector<int>& live_pids) {
  const auto entries = maps_.read_tcp_retransmits();
  auto got = attributor_.update(entries, live_pids, [this](const argus_tcp_key& k) { return maps_.take_tcp_retransmit(k); });
  for (const auto& [pid, by_remote] : got.by_pid) facts_.add_tcp_retransmits(pid, by_remote);
  count_into(counters_, AgentCount::kTcpUnattributed, got.unattributed);
}

}  // namespace argus
