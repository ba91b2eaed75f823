// What the agent's routes read (GET /metrics, /api/v1/*, /healthz): a small,
// read-only seam. The runtime is one; tests have their own, with no BPF.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "userspace/common/result.h"
#include "userspace/model/event.h"
#include "userspace/model/python_stacks.h"
#include "userspace/model/snapshot.h"
#include "userspace/model/trace.h"

namespace argus {

class ApiSource {
 public:
  virtual ~ApiSource() = default;
  virtual Snapshot snapshot() const = 0;
  virtual std::vector<DetectedEvent> events_since(double unix_seconds) const = 0;
  // The node's timeline over the last `seconds`, and the CLOCK_MONOTONIC time it ends at.
  virtual std::vector<TraceRank> trace(double seconds, uint64_t* end_ns) const = 0;
  virtual StepHistory gpu_steps(int pid, size_t last) const = 0;
  // Seconds since the event loop last went round (/healthz fails when it is stuck).
  virtual double seconds_since_heartbeat() const = 0;
  virtual uint64_t monotonic_ns() const = 0;
  // Every Python thread's stack of process `pid`, read now without stopping it
  // (GET .../python-stacks). The error's kind says why not (no interpreter, a
  // refused build, a read that failed).
  virtual Result<python::PyStackDump, python::LocateFailure> python_stacks(int pid) const {
    return make_error(LocateError::kUnreadable,
                      "python stacks are not available from this source (pid " + std::to_string(pid) + ")");
  }
  // Folded Python stacks of the process's samples over the last `seconds`
  // (root first, ';' between frames, a space and the count); an error says
  // why there are none (sampling off, no interpreter located).
  virtual Result<std::string> python_profile(int /*pid*/, double /*seconds*/) const {
    return make_error("no Python profiles on this agent");
  }
};

}  // namespace argus
