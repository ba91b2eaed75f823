// What an event says beyond its detector's verdict, gathered from the sources
// after the detection pass: a straggler's own Python frames against its peers',
// and a hang's links (the RDMA layer's ports) and every rank's Python stacks now.
#pragma once
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/collectors/python_collector.h"
#include "userspace/model/event.h"
#include "userspace/model/snapshot.h"

namespace argus {

class Evidence {
 public:
  Evidence(const PythonCollector& python, double window_seconds) : python_(python), window_seconds_(window_seconds) {}
  // What the node's links look like now: added to hang events (a stuck
  // collective with no rank missing is often a dead link).
  void set_link_state(std::function<nlohmann::json()> links) {
    std::lock_guard lock(mu_);
    links_ = std::move(links);
  }
  // `ranks`: the registry's, as the detection pass saw them.
  void add(DetectedEvent& ev, const std::vector<RankSnapshot>& ranks, uint64_t now_ns) const;

 private:
  void add_python_frames(DetectedEvent& ev, const std::vector<RankSnapshot>& ranks, uint64_t now_ns) const;
  void add_hang_context(DetectedEvent& ev, const std::vector<RankSnapshot>& ranks) const;

  const PythonCollector& python_;
  double window_seconds_;
  mutable std::mutex mu_;
  std::function<nlohmann::json()> links_;
};

}  // namespace argus
