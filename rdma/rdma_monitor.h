// RdmaMonitor: the InfiniBand / RoCE layer of the agent. Reads every device and every port
// under <sysfs-root>/class/infiniband (never assuming port 1), keeps monotonic counter totals
// across resets and wraps, maps NICs to the GPUs next to them (rdma/topology.h), and runs
// the link-health detector (rdma/detector.h).
//
// Cost: one poll reads, per port, state, rate (phys_state only when not ACTIVE), bytes,
// transmit wait and the error counters that move on a sick link (symbol_error,
// port_rcv_errors, link_error_recovery, link_downed, port_xmit_discards); the other error
// counters every `medium_every` polls; packet counters and hw_counters/ every `slow_every`
// polls. Directories are listed again every `rescan_interval_s` (a port's counter
// directories only after a read found a file gone). On sysfs the files are held open and re-read with
// pread(0) (FileMode::kAuto). Port attributes come from libibverbs when the root is the real
// /sys and devices exist, else from sysfs.
//
// Nothing in a tree can crash it: every problem is a counted skip (skips()), logged once per
// file/port, by reason:
//   no_infiniband_class  <root>/class/infiniband does not exist (counted per poll)
//   missing_file         an expected file or directory is gone (state, rate, a counter, ...)
//   read_error           a file exists but reading failed (EACCES, EIO, EINVAL, ...)
//   bad_counter          a counter file does not hold an unsigned integer ("N/A (no PMA)")
//   bad_rate             an unknown `rate` string (rate/width unknown for that poll)
//   bad_state            `state` or `phys_state` is not "ID: NAME"
//   bad_port_dir         a ports/ entry that is not a port number
//   port_appeared        a port (or device) showed up after the first listing
//   port_disappeared     a port (or device) went away (its totals are kept for
//                        forget_after_s in case it returns, e.g. after a driver reload)
//   topology_missing     <root>/bus/pci/devices is missing: no GPU<->NIC affinity
//   event_dropped        a link event nobody drained (more than 4096 pending): the oldest goes
//
// Thread safety: poll() from one thread; snapshot(), skips(), set_ranks(), drain_events()
// from any.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "rdma/detector.h"
#include "rdma/link_model.h"
#include "rdma/sysfs_files.h"
#include "userspace/common/clock.h"

namespace argus::rdma {

struct MonitorOptions {
  DetectorOptions detector;
  FileMode file_mode = FileMode::kAuto;
  double rescan_interval_s = 10;
  int medium_every = 5;         // the rarer error counters every Nth poll (1 = always)
  int slow_every = 10;          // packet counters and hw_counters/ every Nth poll (1 = always)
  bool use_verbs = true;        // libibverbs for port attributes (only on the real /sys)
  double forget_after_s = 300;  // a vanished port's totals are kept this long
  std::size_t max_recent_events = 64;
};

class RdmaMonitor {
 public:
  RdmaMonitor(std::string sysfs_root, MonitorOptions options, const Clock& clock);
  ~RdmaMonitor();
  RdmaMonitor(const RdmaMonitor&) = delete;
  RdmaMonitor& operator=(const RdmaMonitor&) = delete;

  // One pass over every port. Never throws for anything found in the tree.
  void poll();

  // The state after the last poll (an empty one before the first).
  LinkSnapshot snapshot() const;

  // The ranks on this node and their GPUs: lets the imbalance check compare only the rails
  // that carry ranks (without it, all rails of a group are compared).
  void set_ranks(std::vector<RankGpu> ranks);

  // Events (raised and cleared reasons) since the last call, oldest first.
  std::vector<LinkEvent> drain_events();

  std::map<std::string, uint64_t> skips() const;
  const std::string& sysfs_root() const { return root_; }
  FileMode file_mode() const { return mode_; }
  bool using_verbs() const { return verbs_active_; }

 private:
  struct Port;
  struct Device;

  void rescan(uint64_t now);
  void discover_files(Port& p);
  void load_topology();
  void read_port(Device& d, Port& p, bool medium, bool slow);
  void skip(const std::string& reason, const std::string& key, const std::string& message);

  const std::string root_;
  const MonitorOptions opts_;
  const Clock& clock_;
  FileMode mode_ = FileMode::kReopen;

  mutable std::mutex mu_;
  SkipLog skips_;
  LinkHealthDetector detector_;
  std::map<std::string, std::unique_ptr<Device>> devices_;
  std::map<std::pair<std::string, int>, std::pair<std::unique_ptr<Port>, uint64_t>> gone_;  // port, when it left
  bool listed_once_ = false;
  bool rescan_requested_ = true;
  uint64_t last_rescan_ns_ = 0;
  uint64_t polls_ = 0;
  bool class_present_ = false;
  bool topology_loaded_ = false;
  bool topology_available_ = false;
  std::vector<GpuInfo> gpus_;
  std::map<std::string, std::vector<GpuAffinity>> affinity_;
  std::vector<RankGpu> ranks_;
  bool busy_dirty_ = true;  // ranks, ports or affinity changed: recompute busy_
  std::set<std::pair<std::string, int>> busy_;  // ports next to a rank's GPU
  std::vector<PortObservation> obs_;  // reused poll to poll
  std::vector<LinkEvent> pending_events_;
  std::vector<LinkEvent> recent_events_;
  double last_poll_unix_ = 0;

  bool verbs_checked_ = false;
  bool verbs_active_ = false;
  struct VerbsHolder;
  std::unique_ptr<VerbsHolder> verbs_;
};

}  // namespace argus::rdma
