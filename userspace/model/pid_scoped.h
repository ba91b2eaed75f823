// A part of the agent that keeps something per process. The rank lifecycle
// holds every one and is the only place a pid is let go: it tells each when a
// process ended, and has each forget the processes the registry no longer holds.
#pragma once
#include <set>

namespace argus {

class PidScoped {
 public:
  virtual ~PidScoped() = default;
  // The process ended (its exit event, or it vanished): take its last
  // readings, let go of what only a live process needs.
  virtual void rank_ended(int /*pid*/) {}
  // Forget every process but these (the registry's, exited ones included).
  virtual void retain(const std::set<int>& pids) = 0;
};

}  // namespace argus
