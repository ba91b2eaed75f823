#include "userspace/kmsg/xid_collector.h"

#include <spdlog/spdlog.h>

namespace argus::kmsg {

void XidCollector::start() {
  if (path_ == "off") return;
  XidMonitorHooks hooks;
  hooks.ranks = [this] {
    std::vector<XidRank> out;
    for (const auto& r : ranks_.live_ranks())
      out.push_back({r.job_id, r.rank, r.pid, r.gpu.form == GpuRef::Form::Index ? r.gpu.index : -1});
    return out;
  };
  hooks.gpu_by_bus = gpu_by_bus_;
  hooks.event = [this](DetectedEvent ev) { events_.add(std::move(ev)); };
  hooks.now_unix = [this] { return clock_.unix_seconds(); };
  if (auto why = monitor_.start(std::move(hooks)); !why.empty()) spdlog::warn("GPU Xid lines are not followed: {}", why);
}

}  // namespace argus::kmsg
