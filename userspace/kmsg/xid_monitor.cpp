#include "userspace/kmsg/xid_monitor.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "userspace/kmsg/kmsg_follower.h"
#include "userspace/common/thread_name.h"

namespace argus::kmsg {

std::string XidMonitor::start(XidMonitorHooks hooks) {
  auto follower = KmsgFollower::open(path_);
  if (!follower.ok()) return follower.error();
  hooks_ = std::move(hooks);
  following_ = true;
  // Blocks until a record comes or stop() writes the eventfd: no periodic
  // wakeups while the log is quiet (without an eventfd, a 200 ms poll).
  stop_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  thread_ = std::thread([this, f = std::move(*follower)]() mutable {
    name_this_thread("argus-kmsg");
    int errors = 0;
    const int wake = stop_fd_.get();
    while (!stop_) {
      const int n = f.poll(wake >= 0 ? -1 : 200, [this](std::string_view raw) { on_record(raw); }, wake);
      lost_ = f.lost();
      if (n < 0 && ++errors == 1) spdlog::warn("reading {} failed: error {} (Xid lines may be missed)", path_, -n);
    }
  });
  return "";
}

void XidMonitor::stop() {
  stop_ = true;
  if (stop_fd_.valid()) {
    const uint64_t one = 1;
    (void)!::write(stop_fd_.get(), &one, sizeof(one));
  }
  if (thread_.joinable()) thread_.join();
  following_ = false;
}

void XidMonitor::on_record(std::string_view raw) {
  auto rec = parse_kmsg_record(raw);
  if (!rec || rec->message.find("NVRM: Xid") == std::string::npos) return;  // most of the log: not ours
  const auto ranks = hooks_.ranks ? hooks_.ranks() : std::vector<XidRank>{};
  const auto gpus = hooks_.gpu_by_bus ? hooks_.gpu_by_bus() : std::map<std::string, int>{};
  const double now = hooks_.now_unix ? hooks_.now_unix() : 0;
  for (auto& ev : tracker_.on_message(rec->message, now, ranks, gpus)) {
    spdlog::warn("{}", ev.summary);
    if (hooks_.event) hooks_.event(std::move(ev));
  }
}

XidCounts XidMonitor::counts() const {
  XidCounts c = tracker_.counts();
  c.lost += lost_.load();
  return c;
}

}  // namespace argus::kmsg
