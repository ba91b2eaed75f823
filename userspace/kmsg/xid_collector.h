// The GPU driver's Xid lines as a host collector: the kernel log followed on a
// thread of its own, each line counted and turned into an xid event naming the
// ranks on that GPU (from the rank directory: the line's pid, else the rank
// whose GPU the line's PCI bus names).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "userspace/common/clock.h"
#include "userspace/kmsg/xid_monitor.h"
#include "userspace/model/event.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/rank_facts.h"

namespace argus::kmsg {

class XidCollector final : public HostCollector {
 public:
  // gpu_by_bus: the node's GPUs by the driver's PCI bus id ("0000:3b:00" -> CUDA index).
  // A path of "off" follows nothing.
  XidCollector(std::string path, const RankDirectory& ranks, EventSink& events,
               std::function<std::map<std::string, int>()> gpu_by_bus, const Clock& clock)
      : path_(std::move(path)), monitor_(path_), ranks_(ranks), events_(events), gpu_by_bus_(std::move(gpu_by_bus)),
        clock_(clock) {}
  const char* name() const override { return "xid"; }
  void refresh(double /*now*/, const std::vector<int>& /*live_pids*/) override {}  // it follows on its own thread
  // Opens the log; a log it cannot read is said once, and the agent runs without the layer.
  void start() override;
  void stop() override { monitor_.stop(); }

  XidCounts counts() const { return monitor_.counts(); }
  bool following() const { return monitor_.following(); }

 private:
  std::string path_;
  XidMonitor monitor_;
  const RankDirectory& ranks_;
  EventSink& events_;
  std::function<std::map<std::string, int>()> gpu_by_bus_;
  const Clock& clock_;
};

}  // namespace argus::kmsg
