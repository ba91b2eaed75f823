// A source on the host side, polled (cgroups, memory cgroups,
// TCP, Python interpreters, pod identity) or following on a thread of its own
// (RDMA ports, the kernel log). Each reads what it follows and hands it on
// through the sink it was given; the runtime only says when, and which ranks
// live. Adding a layer is adding a collector.
#pragma once
#include <set>
#include <vector>

#include "userspace/model/pid_scoped.h"

namespace argus {

class HostCollector : public PidScoped {
 public:
  virtual const char* name() const = 0;
  // One pass, at monotonic time `now` (seconds), over the ranks that run now.
  virtual void refresh(double now, const std::vector<int>& live_pids) = 0;
  // Collectors with a thread of their own start and stop it here.
  virtual void start() {}
  virtual void stop() {}
  void retain(const std::set<int>& /*pids*/) override {}  // most keep nothing per process
};

}  // namespace argus
