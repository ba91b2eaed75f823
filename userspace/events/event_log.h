// Detected events, oldest first, bounded: what GET /api/v1/events serves.
#pragma once
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/model/agent_counters.h"
#include "userspace/common/defaults.h"
#include "userspace/model/event.h"

namespace argus {

class EventLog final : public EventSink {
 public:
  // The oldest events pushed out by the bound count as Cap::kDetectedEvents.
  explicit EventLog(size_t capacity = kDefaultMaxDetectedEvents, AgentCounters* counters = nullptr)
      : capacity_(capacity), counters_(counters) {}
  void add(DetectedEvent ev) override;
  std::vector<DetectedEvent> since(double unix_seconds) const;  // time >= since

 private:
  size_t capacity_;
  AgentCounters* counters_;
  mutable std::mutex mu_;
  std::deque<DetectedEvent> events_;
};

// The contract's event object: time as RFC 3339 UTC, device/port null unless set.
nlohmann::json event_to_json(const DetectedEvent& ev);
// "2023-11-14T22:13:20.500Z": UTC, rounded to the millisecond (carrying into the next
// second). Non-finite and negative times print as the epoch; the last is year 9999.
std::string rfc3339(double unix_seconds);

}  // namespace argus
