// The RDMA layer as a host collector: every InfiniBand/RoCE port under the sysfs
// root polled once a second on a thread of its own (every 10 s while the node
// has none, for a driver loaded later), mapped to the ranks whose GPUs sit next
// to each NIC (from the rank directory), and every link that degrades an event.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "rdma/link_model.h"
#include "rdma/rdma_monitor.h"
#include "userspace/common/clock.h"
#include "userspace/model/event.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/rank_facts.h"

namespace argus::rdma {

class RdmaCollector final : public HostCollector {
 public:
  RdmaCollector(std::string sysfs_root, const Clock& clock, const RankDirectory& ranks, EventSink& events,
                MonitorOptions opts = {})
      : monitor_(std::move(sysfs_root), opts, clock), ranks_(ranks), events_(events) {}
  ~RdmaCollector() override { stop(); }
  RdmaCollector(const RdmaCollector&) = delete;
  RdmaCollector& operator=(const RdmaCollector&) = delete;

  const char* name() const override { return "rdma"; }
  void refresh(double /*now*/, const std::vector<int>& /*live_pids*/) override {}  // it polls on its own thread
  void start() override;
  void stop() override;

  LinkSnapshot links() const { return monitor_.snapshot(); }
  // The live ranks and their GPUs now (the directory's), as the port map takes them.
  std::vector<RankGpu> rank_gpus() const;
  // Every port's state and its degraded reasons: a stuck collective with nobody
  // missing is often a dead link (hang evidence).
  nlohmann::json link_state() const;

 private:
  void run();
  void poll_once();

  RdmaMonitor monitor_;
  const RankDirectory& ranks_;
  EventSink& events_;
  std::vector<RankGpu> mapped_;  // the poller's: the ranks set on the monitor last
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;  // wakes the poller at once on stop
  std::thread thread_;
};

}  // namespace argus::rdma
