// The GPU driver's Xid lines, followed on their own thread: counted per GPU and
// code, turned into xid events that name the ranks on that GPU.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "userspace/common/unique_fd.h"
#include "userspace/kmsg/xid.h"

namespace argus::kmsg {

struct XidMonitorHooks {
  std::function<std::vector<XidRank>()> ranks;             // the node's live ranks now
  std::function<std::map<std::string, int>()> gpu_by_bus;  // "0000:3b:00" -> CUDA index
  std::function<void(DetectedEvent)> event;                // an xid event found
  std::function<double()> now_unix;
};

class XidMonitor {
 public:
  explicit XidMonitor(std::string path) : path_(std::move(path)) {}
  ~XidMonitor() { stop(); }
  XidMonitor(const XidMonitor&) = delete;
  XidMonitor& operator=(const XidMonitor&) = delete;

  // Opens the log and starts following it; "" on success, else why not (one line).
  std::string start(XidMonitorHooks hooks);
  void stop();
  bool following() const { return following_; }
  XidCounts counts() const;
  // One record, as the thread hands it (tests call it directly).
  void on_record(std::string_view raw);

 private:
  std::string path_;
  XidMonitorHooks hooks_;
  XidTracker tracker_;
  std::atomic<bool> following_{false};
  std::atomic<bool> stop_{false};
  UniqueFd stop_fd_;  // an eventfd: stop() wakes the thread's poll at once
  std::atomic<uint64_t> lost_{0};
  std::thread thread_;
};

}  // namespace argus::kmsg
