#include "rdma/rdma_collector.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "rdma/link_events.h"
#include "userspace/common/thread_name.h"

namespace argus::rdma {

void RdmaCollector::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] {
    name_this_thread("argus-rdma");
    run();
  });
}

void RdmaCollector::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void RdmaCollector::run() {
  while (!stop_) {
    poll_once();
    // No port to poll: look for one (a driver loaded after the agent) every 10 s.
    const auto pause = monitor_.snapshot().ports.empty() ? std::chrono::seconds(10) : std::chrono::seconds(1);
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, pause, [&] { return stop_.load(); });
  }
}

void RdmaCollector::poll_once() {
  monitor_.poll();
  const auto snap = monitor_.snapshot();
  // The ranks' GPUs matter only where there are ports to map them to. (The
  // next poll uses them for imbalance; this one's events now.)
  if (!snap.ports.empty()) {
    mapped_ = rank_gpus();
    monitor_.set_ranks(mapped_);
  }
  for (const auto& ev : monitor_.drain_events()) {
    if (!ev.raised) continue;
    spdlog::warn("link {}:{} degraded ({}): {}", ev.device, ev.port, ev.reason, ev.detail);
    for (auto& e : link_degraded_events(ev, snap, mapped_)) events_.add(std::move(e));
  }
}

std::vector<RankGpu> RdmaCollector::rank_gpus() const {
  std::vector<RankGpu> out;
  for (const auto& r : ranks_.live_ranks())
    out.push_back({r.job_id, r.rank, r.gpu.form == GpuRef::Form::Index ? r.gpu.index : -1, ""});
  return out;
}

nlohmann::json RdmaCollector::link_state() const {
  nlohmann::json ports = nlohmann::json::array();
  for (const auto& p : monitor_.snapshot().ports)
    ports.push_back({{"device", p.device},
                     {"port", p.port},
                     {"up", p.up},
                     {"state", p.state},
                     {"degraded", std::vector<std::string>(p.degraded.begin(), p.degraded.end())}});
  return ports;
}

}  // namespace argus::rdma
