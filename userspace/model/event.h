// A detected event: what GET /api/v1/events returns, what every detector and
// every source of verdicts (the RDMA layer, the kernel log) produces.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "userspace/model/vocab.h"

namespace argus {

// A detected event, as GET /api/v1/events returns it.
struct DetectedEvent {
  double time = 0;  // unix seconds
  EventKind kind = EventKind::kStraggler;  // set by whoever makes the event
  std::string job_id;
  int rank = -1;
  std::string summary;
  nlohmann::json evidence = nlohmann::json::object();
  std::string device;  // link events: the NIC and port ("" / -1 otherwise)
  int port = -1;
};

// Where a part that finds events on its own hands them (the event log).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void add(DetectedEvent ev) = 0;
};

}  // namespace argus
