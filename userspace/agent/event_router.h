// Every ring-buffer record, decoded, counted by source (or as malformed) and
// handed to the part it is for: exec and dlopen hints to discovery, first calls
// and exits to the rank lifecycle, calls and GPU activity to the call feed.
#pragma once
#include <cstddef>

#include "userspace/agent/call_feed.h"
#include "userspace/agent/rank_lifecycle.h"
#include "userspace/common/clock.h"
#include "userspace/detect/gpu_memory.h"
#include "userspace/discovery/discovery.h"
#include "userspace/model/agent_counters.h"

namespace argus {

class EventRouter {
 public:
  EventRouter(const Clock& clock, AgentCounters& counters, Discovery& discovery, RankLifecycle& lifecycle,
              CallFeed& calls, OomReports& ooms)
      : clock_(clock), counters_(counters), discovery_(discovery), lifecycle_(lifecycle), calls_(calls), ooms_(ooms) {}
  void on_record(const void* data, size_t size);

 private:
  const Clock& clock_;
  AgentCounters& counters_;
  Discovery& discovery_;
  RankLifecycle& lifecycle_;
  CallFeed& calls_;
  OomReports& ooms_;
};

}  // namespace argus
