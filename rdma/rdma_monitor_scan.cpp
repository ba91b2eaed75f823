// RdmaMonitor's listing of the tree: the devices and ports under
// class/infiniband (listed again every rescan interval, and at the next poll
// after a read found a file gone), each port's counter files with the cadence
// they are read at, the ports that went and came back, and the PCI topology.
#include "rdma/rdma_monitor.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <set>
#include <system_error>

#include <spdlog/spdlog.h>

#include "rdma/rdma_monitor_detail.h"
#include "userspace/common/defaults.h"

namespace argus::rdma {

namespace fs = std::filesystem;

using monitor_detail::errno_text;
using monitor_detail::kNs;

namespace {

// counters/ files that count errors (argus_ib_port_errors_total{counter}).
bool is_error_counter(const std::string& name) {
  static const std::set<std::string> kErrors = {
      "symbol_error",
      "link_error_recovery",
      "link_downed",
      "port_rcv_errors",
      "port_rcv_remote_physical_errors",
      "port_rcv_switch_relay_errors",
      "port_xmit_discards",
      "port_xmit_constraint_errors",
      "port_rcv_constraint_errors",
      "port_rcv_discards",
      "local_link_integrity_errors",
      "excessive_buffer_overrun_errors",
      "VL15_dropped",
  };
  return kErrors.count(name) > 0;
}

// Read on every poll (see discover_files).
bool is_hot_counter(const std::string& name) {
  static const std::set<std::string> kHot = {
      "port_rcv_data",   "port_xmit_data",      "port_rcv_data_64", "port_xmit_data_64",  "port_xmit_wait",
      "symbol_error",    "port_rcv_errors",     "link_error_recovery", "link_downed",     "port_xmit_discards",
  };
  return kHot.count(name) > 0;
}

std::vector<std::string> list_names(const std::string& dir, bool want_dirs, int& err) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    err = ec.value();
    return out;
  }
  err = 0;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code ec2;
    const bool is_dir = it->is_directory(ec2);  // follows symlinks
    if (is_dir == want_dirs) out.push_back(std::move(name));
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void RdmaMonitor::discover_files(Port& p) {
  p.relist = false;
  struct Dir {
    const char* sub;
    Port::Group group;
    bool required;
  };
  for (const Dir& d : {Dir{"counters", Port::Group::kCounters, true}, Dir{"counters_ext", Port::Group::kExt, false},
                       Dir{"hw_counters", Port::Group::kHw, false}}) {
    const std::string dir = p.dir + "/" + d.sub;
    int err = 0;
    std::vector<std::string> names = list_names(dir, false, err);
    if (err != 0) {
      if (d.required) {
        skip(err == ENOENT ? "missing_file" : "read_error", dir,
             p.device + " port " + std::to_string(p.port) + ": cannot list " + dir + ": " + errno_text(err));
      }
      continue;
    }
    std::set<std::string> now(names.begin(), names.end());
    for (auto& s : p.slots) {
      if (s.group == d.group) s.present = now.count(s.name) > 0;
    }
    for (const auto& name : names) {
      bool known = false;
      for (const auto& s : p.slots) known = known || (s.group == d.group && s.name == name);
      if (known) continue;
      Port::Slot s;
      s.name = name;
      s.group = d.group;
      s.error = d.group == Port::Group::kCounters && is_error_counter(name);
      // Every poll: bytes, transmit wait and the error counters that move on a sick link; the
      // rarer error counters every medium_every polls; packet counts and the driver's
      // hw_counters (neither feeds a metric or a reason) every slow_every polls.
      if (d.group == Port::Group::kHw || name.find("packets") != std::string::npos) {
        s.cadence = 2;
      } else if (is_hot_counter(name)) {
        s.cadence = 0;
      } else {
        s.cadence = 1;
      }
      if (d.group != Port::Group::kHw) {
        if (name == "port_rcv_data" || name == "port_rcv_data_64") s.kind = Port::Kind::kRxData;
        if (name == "port_xmit_data" || name == "port_xmit_data_64") s.kind = Port::Kind::kTxData;
        if (d.group == Port::Group::kCounters && name == "port_xmit_wait") s.kind = Port::Kind::kWait;
      }
      s.file = AttrFile(dir + "/" + name);
      p.slots.push_back(std::move(s));
    }
  }
}

void RdmaMonitor::load_topology() {
  Topology topo = read_topology(root_);
  topology_available_ = topo.available;
  if (!topo.available) {
    skip("topology_missing", "topology", "PCI topology unavailable (" + topo.problem +
                                             "): GPU<->NIC affinity and argus_rank_nic_info are off");
  }
  gpus_ = topo.gpus;
  std::map<std::string, NicLocation> nics;
  for (auto& [name, d] : devices_) {
    d->loc = locate_ib_device(root_, name, topo);
    nics[name] = d->loc;
  }
  affinity_ = topo.available ? gpu_nic_affinity(topo, nics) : std::map<std::string, std::vector<GpuAffinity>>{};
  topology_loaded_ = true;
}

void RdmaMonitor::rescan(uint64_t now) {
  last_rescan_ns_ = now;
  busy_dirty_ = true;
  rescan_requested_ = false;
  const std::string cls = root_ + "/class/infiniband";
  int err = 0;
  std::vector<std::string> names = list_names(cls, true, err);
  std::map<std::string, std::vector<int>> found;  // device -> ports
  if (err != 0) {
    class_present_ = false;
    rescan_requested_ = true;  // look again next poll (one failed open: cheap)
    skip(err == ENOENT ? "no_infiniband_class" : "read_error", cls,
         "cannot list " + cls + ": " + errno_text(err) + " (no InfiniBand/RoCE devices are watched)");
  } else {
    class_present_ = true;
    for (const auto& dev : names) {
      const std::string pdir = cls + "/" + dev + "/ports";
      int perr = 0;
      std::vector<std::string> ports = list_names(pdir, true, perr);
      if (perr != 0) {
        skip(perr == ENOENT ? "missing_file" : "read_error", pdir, dev + ": cannot list " + pdir + ": " + errno_text(perr));
        continue;
      }
      auto& list = found[dev];
      for (const auto& p : ports) {
        int num = 0;
        auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), num, 10);
        if (ec != std::errc() || ptr != p.data() + p.size() || num < 0 || num > 255) {
          skip("bad_port_dir", pdir + "/" + p, dev + ": '" + p + "' under ports/ is not a port number");
          continue;
        }
        list.push_back(num);
      }
    }
  }

  bool new_device = false;
  // Gone ports (and devices).
  for (auto dit = devices_.begin(); dit != devices_.end();) {
    Device& d = *dit->second;
    auto f = found.find(d.name);
    for (auto pit = d.ports.begin(); pit != d.ports.end();) {
      const bool still = f != found.end() && std::count(f->second.begin(), f->second.end(), pit->first) > 0;
      if (still) {
        ++pit;
        continue;
      }
      skip("port_disappeared", d.name + "/" + std::to_string(pit->first),
           d.name + " port " + std::to_string(pit->first) + " disappeared");
      Port& p = *pit->second;
      p.state_f.close();
      p.phys_f.close();
      p.rate_f.close();
      for (auto& s : p.slots) s.file.close();
      gone_[{d.name, pit->first}] = {std::move(pit->second), now};
      pit = d.ports.erase(pit);
    }
    if (f == found.end()) {
      dit = devices_.erase(dit);
    } else {
      ++dit;
    }
  }
  // New ports (and devices).
  for (const auto& [dev, ports] : found) {
    auto& slot = devices_[dev];
    if (!slot) {
      new_device = true;
      slot = std::make_unique<Device>();
      slot->name = dev;
      const std::string ddir = cls + "/" + dev;
      for (auto [file, field] : {std::pair<const char*, std::string*>{"fw_ver", &slot->fw_ver},
                                 {"board_id", &slot->board_id},
                                 {"hca_type", &slot->hca_type}}) {
        int ferr = 0;
        if (!read_text_file(ddir + "/" + file, *field, ferr) && std::string(file) != "hca_type") {
          skip(ferr == ENOENT ? "missing_file" : "read_error", ddir + "/" + file,
               dev + ": cannot read " + ddir + "/" + file + ": " + errno_text(ferr));
        }
      }
    }
    Device& d = *slot;
    for (int num : ports) {
      if (auto it = d.ports.find(num); it != d.ports.end()) {
        if (it->second->relist) discover_files(*it->second);  // a file went missing: list again
        continue;
      }
      std::unique_ptr<Port> p;
      if (auto g = gone_.find({dev, num}); g != gone_.end()) {
        p = std::move(g->second.first);  // back (driver reload): keep its totals
        gone_.erase(g);
      } else {
        p = std::make_unique<Port>();
        p->device = dev;
        p->port = num;
        p->dir = cls + "/" + dev + "/ports/" + std::to_string(num);
        p->state_f = AttrFile(p->dir + "/state");
        p->phys_f = AttrFile(p->dir + "/phys_state");
        p->rate_f = AttrFile(p->dir + "/rate");
      }
      int lerr = 0;
      if (!read_text_file(p->dir + "/link_layer", p->link_layer, lerr)) {
        skip(lerr == ENOENT ? "missing_file" : "read_error", p->dir + "/link_layer",
             dev + " port " + std::to_string(num) + ": cannot read link_layer: " + errno_text(lerr));
      }
      discover_files(*p);
      if (listed_once_) {
        skip("port_appeared", dev + "/" + std::to_string(num), dev + " port " + std::to_string(num) + " appeared");
      }
      d.ports[num] = std::move(p);
    }
  }
  // Forget ports gone for long.
  for (auto it = gone_.begin(); it != gone_.end();) {
    if (static_cast<double>(now - it->second.second) >= opts_.forget_after_s * kNs) {
      detector_.forget(it->first.first, it->first.second);
      it = gone_.erase(it);
    } else {
      ++it;
    }
  }
  if (class_present_) listed_once_ = true;

  if (!verbs_checked_ && class_present_ && !devices_.empty()) {
    verbs_checked_ = true;
    std::error_code ec;
    const bool real_sys = fs::equivalent(root_, kDefaultSysfsRoot, ec);
    if (opts_.use_verbs && VerbsPorts::compiled() && real_sys) {
      verbs_active_ = verbs_->ports.open() > 0;
      spdlog::info("rdma: port attributes from {}", verbs_active_ ? "libibverbs" : "sysfs (libibverbs found no device)");
    }
  }
  if (new_device || !topology_loaded_) load_topology();
}

}  // namespace argus::rdma
