// RdmaMonitor's private parts, shared by its poll (rdma/rdma_monitor.cpp) and
// its listing of the tree (rdma/rdma_monitor_scan.cpp): a port's files and
// totals, a device. Included by those two files only.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rdma/parse.h"
#include "rdma/rdma_monitor.h"
#include "rdma/sysfs_files.h"
#include "rdma/topology.h"
#include "rdma/verbs.h"

namespace argus::rdma {

namespace monitor_detail {

inline constexpr double kNs = 1e9;

inline std::string errno_text(int err) { return err ? std::strerror(err) : "unknown error"; }

// A counter's total since it was first read, kept across resets and wraps.
struct Tracker {
  bool has = false;
  uint64_t last_raw = 0;
  uint64_t total = 0;
  // Returns 1 on a reset, 2 on a wrap, 0 otherwise.
  int update(uint64_t raw) {
    if (!has) {
      has = true;
      last_raw = raw;
      total = raw;
      return 0;
    }
    CounterDelta d = counter_delta(last_raw, raw);
    last_raw = raw;
    total += d.delta;
    return d.reset ? 1 : d.wrapped ? 2 : 0;
  }
};

}  // namespace monitor_detail

struct RdmaMonitor::VerbsHolder {
  VerbsPorts ports;
};

struct RdmaMonitor::Port {
  enum class Group { kCounters, kExt, kHw };
  enum class Kind { kOther, kRxData, kTxData, kWait };
  struct Slot {
    std::string name;
    Kind kind = Kind::kOther;
    Group group = Group::kCounters;
    int cadence = 0;  // 0: every poll, 1: every medium_every polls, 2: every slow_every polls
    bool present = true;
    bool error = false;  // an error counter (counters/ only)
    AttrFile file;
    monitor_detail::Tracker tr;
    bool read_now = false;  // read OK in this poll
    uint64_t raw_now = 0;
  };

  std::string device;
  int port = 0;
  std::string dir;
  std::string link_layer;
  AttrFile state_f, phys_f, rate_f;
  std::vector<Slot> slots;
  monitor_detail::Tracker rx, tx;  // 4-byte words, from the larger of counters/ and counters_ext/
  uint64_t counter_resets = 0;
  bool relist = true;  // list counters/, counters_ext/, hw_counters/ again at the next rescan

  std::optional<PortState> state, phys;
  std::string rate_text;
  std::optional<LinkRate> rate;
  std::string attr_source = "sysfs";
};

struct RdmaMonitor::Device {
  std::string name;
  std::string fw_ver, board_id, hca_type;
  NicLocation loc;
  std::map<int, std::unique_ptr<Port>> ports;
};

}  // namespace argus::rdma
