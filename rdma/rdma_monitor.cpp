#include "rdma/rdma_monitor.h"

#include "userspace/common/defaults.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <system_error>

#include <spdlog/spdlog.h>

#include "rdma/parse.h"
#include "rdma/topology.h"
#include "rdma/verbs.h"

namespace argus::rdma {

namespace fs = std::filesystem;

namespace {

constexpr double kNs = 1e9;

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

std::string errno_text(int err) { return err ? std::strerror(err) : "unknown error"; }

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

}  // namespace

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
    Tracker tr;
    bool read_now = false;  // read OK in this poll
    uint64_t raw_now = 0;
  };

  std::string device;
  int port = 0;
  std::string dir;
  std::string link_layer;
  AttrFile state_f, phys_f, rate_f;
  std::vector<Slot> slots;
  Tracker rx, tx;  // 4-byte words, from the larger of counters/ and counters_ext/
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

RdmaMonitor::RdmaMonitor(std::string sysfs_root, MonitorOptions options, const Clock& clock)
    : root_(std::move(sysfs_root)),
      opts_(std::move(options)),
      clock_(clock),
      detector_(opts_.detector, clock),
      verbs_(std::make_unique<VerbsHolder>()) {
  mode_ = resolve_file_mode(opts_.file_mode, root_ + "/class/infiniband");
}

RdmaMonitor::~RdmaMonitor() = default;

void RdmaMonitor::skip(const std::string& reason, const std::string& key, const std::string& message) {
  skips_.skip(reason, key, message);
}

std::map<std::string, uint64_t> RdmaMonitor::skips() const {
  std::lock_guard<std::mutex> lock(mu_);
  return skips_.counts();
}

void RdmaMonitor::set_ranks(std::vector<RankGpu> ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  ranks_ = std::move(ranks);
  busy_dirty_ = true;
}

std::vector<LinkEvent> RdmaMonitor::drain_events() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LinkEvent> out;
  out.swap(pending_events_);
  return out;
}

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

void RdmaMonitor::read_port(Device& d, Port& p, bool medium, bool slow) {
  char buf[256];
  std::string_view text;
  int err = 0;
  auto where = [&] { return d.name + " port " + std::to_string(p.port); };
  auto fail = [&](AttrFile::Status st, const std::string& path) {
    if (st == AttrFile::Status::kMissing) {
      skip("missing_file", path, where() + ": " + path + " is missing");
      rescan_requested_ = true;
      p.relist = true;
    } else {
      skip("read_error", path, where() + ": cannot read " + path + ": " + errno_text(err));
    }
  };

  // Port attributes: libibverbs where active, else sysfs.
  std::optional<VerbsPortAttr> va;
  if (verbs_active_) va = verbs_->ports.query(d.name, p.port);
  if (va) {
    p.attr_source = "verbs";
    p.state = PortState{va->state, va->state_name};
    p.phys = PortState{va->phys_state, va->phys_state_name};
    if (va->lane_gbps > 0 && va->width > 0) {
      LinkRate r;
      r.width = va->width;
      r.speed = va->speed;
      r.gbps = va->lane_gbps * va->width;
      r.bytes_per_second = static_cast<uint64_t>(r.gbps * 125'000'000.0);
      p.rate = r;
      p.rate_text = format_rate_text(r.gbps, r.width, r.speed);
    } else {
      p.rate.reset();
    }
    if (!va->link_layer.empty()) p.link_layer = va->link_layer;
  } else {
    p.attr_source = "sysfs";
    for (auto [file, out] : {std::pair<AttrFile*, std::optional<PortState>*>{&p.state_f, &p.state}, {&p.phys_f, &p.phys}}) {
      // phys_state says more than LinkUp only when the port is not ACTIVE: read it then (and on
      // slow polls).
      if (out == &p.phys && p.phys && p.state && p.state->id == 4 && !slow) continue;
      auto st = file->read(mode_ == FileMode::kHold, buf, text, err);
      if (st != AttrFile::Status::kOk) {
        fail(st, file->path());
        out->reset();
        continue;
      }
      auto parsed = parse_state(text);
      if (!parsed) {
        skip("bad_state", file->path(), where() + ": " + file->path() + ": " + parsed.error());
        out->reset();
        continue;
      }
      *out = *parsed;
    }
    auto st = p.rate_f.read(mode_ == FileMode::kHold, buf, text, err);
    if (st != AttrFile::Status::kOk) {
      fail(st, p.rate_f.path());
      p.rate.reset();
      p.rate_text.clear();
    } else {
      p.rate_text = std::string(trim(text));
      auto r = parse_rate(text);
      if (!r) {
        skip("bad_rate", p.rate_f.path(), where() + ": " + r.error());
        p.rate.reset();
      } else {
        p.rate = *r;
      }
    }
  }

  // Counters.
  int resets = 0, wraps = 0;
  std::optional<uint64_t> rx_raw, tx_raw;
  auto take_max = [](std::optional<uint64_t>& into, uint64_t v) { into = into ? std::max(*into, v) : v; };
  for (auto& s : p.slots) {
    s.read_now = false;
    if (!s.present || (s.cadence == 1 && !medium) || (s.cadence == 2 && !slow)) continue;
    auto st = s.file.read(mode_ == FileMode::kHold, buf, text, err);
    if (st != AttrFile::Status::kOk) {
      fail(st, s.file.path());
      if (st == AttrFile::Status::kMissing) s.present = false;  // until the next listing finds it
      continue;
    }
    auto v = parse_counter(text);
    if (!v) {
      skip("bad_counter", s.file.path(), where() + ": " + s.file.path() + ": " + v.error());
      continue;
    }
    s.read_now = true;
    s.raw_now = *v;
    if (s.group == Port::Group::kHw) {
      s.tr.has = true;  // hw_counters are reported raw
      s.tr.last_raw = s.tr.total = *v;
      continue;
    }
    if (s.kind == Port::Kind::kRxData) {
      take_max(rx_raw, *v);
    } else if (s.kind == Port::Kind::kTxData) {
      take_max(tx_raw, *v);
    }
    int r = s.tr.update(*v);
    resets += r == 1;
    wraps += r == 2;
  }
  if (rx_raw) {
    int r = p.rx.update(*rx_raw);
    resets += r == 1;
    wraps += r == 2;
  }
  if (tx_raw) {
    int r = p.tx.update(*tx_raw);
    resets += r == 1;
    wraps += r == 2;
  }
  if (resets > 0) {
    p.counter_resets += static_cast<uint64_t>(resets);
    spdlog::warn("rdma: {}: {} counter(s) went backwards (reset, e.g. a driver reload): counting them from 0", where(),
                 resets);
  }
  if (wraps > 0) {
    p.counter_resets += static_cast<uint64_t>(wraps);
    spdlog::info("rdma: {}: {} counter(s) wrapped", where(), wraps);
  }
}

void RdmaMonitor::poll() {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t now = clock_.monotonic_ns();
  polls_++;
  if (polls_ == 1 || rescan_requested_ ||
      static_cast<double>(now - last_rescan_ns_) >= opts_.rescan_interval_s * kNs) {
    rescan(now);
  }
  const bool slow = opts_.slow_every <= 1 || (polls_ - 1) % static_cast<uint64_t>(opts_.slow_every) == 0;
  const bool medium = opts_.medium_every <= 1 || (polls_ - 1) % static_cast<uint64_t>(opts_.medium_every) == 0;

  // Which ports carry ranks (for imbalance): recomputed when ranks, ports or affinity change.
  if (busy_dirty_) {
    busy_dirty_ = false;
    busy_.clear();
    if (!ranks_.empty()) {
      LinkSnapshot s;
      s.gpus = gpus_;
      for (auto& [name, d] : devices_) {
        DeviceSnapshot ds;
        ds.name = name;
        if (auto a = affinity_.find(name); a != affinity_.end()) ds.gpus = a->second;
        s.devices.push_back(std::move(ds));
        for (auto& [num, p] : d->ports) {
          PortSnapshot ps;
          ps.device = name;
          ps.port = num;
          s.ports.push_back(std::move(ps));
        }
      }
      for (const auto& rn : rank_nics(s, ranks_)) busy_.insert({rn.device, rn.port});
    }
  }
  const auto& busy = busy_;

  std::size_t n = 0;
  for (auto& [name, d] : devices_) {
    for (auto& [num, p] : d->ports) {
      read_port(*d, *p, medium, slow);
      if (obs_.size() <= n) obs_.emplace_back();
      PortObservation& o = obs_[n++];
      if (o.device != name || o.port != num) {
        o = PortObservation{};
        o.device = name;
        o.port = num;
      }
      if (o.link_layer != p->link_layer) o.link_layer = p->link_layer;
      const std::string& kind = d->hca_type.empty() ? d->board_id : d->hca_type;
      if (o.group.size() != kind.size() + 1 + p->link_layer.size() || o.group.compare(0, kind.size(), kind) != 0) {
        o.group = kind + "/" + p->link_layer;
      }
      o.state_known = p->state.has_value();
      o.up = p->state && (p->state->id == 4 || p->state->id == 5);
      o.phys_state_id = p->phys ? p->phys->id : -1;
      o.rate_known = p->rate.has_value();
      o.rate_gbps = p->rate ? p->rate->gbps : 0;
      o.width = p->rate ? p->rate->width : 0;
      o.lane_gbps = p->rate ? p->rate->lane_gbps() : 0;
      if (o.rate_text != p->rate_text) o.rate_text = p->rate_text;
      o.rx_bytes = p->rx.total * 4;
      o.tx_bytes = p->tx.total * 4;
      o.has_xmit_wait = false;
      for (const auto& s : p->slots) {
        if (!s.tr.has) continue;
        if (s.error) o.errors[s.name] = s.tr.total;
        if (s.kind == Port::Kind::kWait) {
          o.has_xmit_wait = true;
          o.xmit_wait = s.tr.total;
        }
      }
      o.expected_busy = busy.empty() || busy.count({name, num}) > 0;
    }
  }
  obs_.resize(n);
  detector_.observe(obs_);
  for (auto& ev : detector_.take_events()) {
    spdlog::info("rdma: {} port {}: {} {}{}{}", ev.device, ev.port, ev.reason, ev.raised ? "raised" : "cleared",
                 ev.detail.empty() ? "" : ": ", ev.detail);
    recent_events_.push_back(ev);
    pending_events_.push_back(std::move(ev));
  }
  if (recent_events_.size() > opts_.max_recent_events) {
    recent_events_.erase(recent_events_.begin(),
                         recent_events_.begin() + static_cast<std::ptrdiff_t>(recent_events_.size() - opts_.max_recent_events));
  }
  constexpr std::size_t kMaxPending = 4096;
  if (pending_events_.size() > kMaxPending) {
    // Nobody drained them: counted as skips (event_dropped), so they show on /metrics.
    for (std::size_t i = kMaxPending; i < pending_events_.size(); ++i)
      skip("event_dropped", "pending", "link events not drained in time; the oldest are dropped");
    pending_events_.erase(pending_events_.begin(),
                          pending_events_.begin() + static_cast<std::ptrdiff_t>(pending_events_.size() - kMaxPending));
  }
  last_poll_unix_ = clock_.unix_seconds();
}

LinkSnapshot RdmaMonitor::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  LinkSnapshot s;
  s.time_unix = last_poll_unix_;
  s.polls = polls_;
  s.infiniband_class_present = class_present_;
  s.topology_available = topology_available_;
  s.gpus = gpus_;
  s.skips = skips_.counts();
  s.recent_events = recent_events_;
  for (const auto& [name, d] : devices_) {
    DeviceSnapshot ds;
    ds.name = name;
    ds.fw_ver = d->fw_ver;
    ds.board_id = d->board_id;
    ds.hca_type = d->hca_type;
    ds.pci_address = d->loc.pci_address;
    ds.numa_node = d->loc.numa_node;
    if (auto a = affinity_.find(name); a != affinity_.end()) ds.gpus = a->second;
    s.devices.push_back(std::move(ds));
    for (const auto& [num, p] : d->ports) {
      PortSnapshot ps;
      ps.device = name;
      ps.port = num;
      ps.link_layer = p->link_layer;
      if (p->state) {
        ps.state_id = p->state->id;
        ps.state = p->state->name;
        ps.up = p->state->id == 4 || p->state->id == 5;
      }
      if (p->phys) {
        ps.phys_state_id = p->phys->id;
        ps.phys_state = p->phys->name;
      }
      ps.attr_source = p->attr_source;
      ps.rate_text = p->rate_text;
      if (p->rate) {
        ps.rate_gbps = p->rate->gbps;
        ps.rate_bytes_per_second = p->rate->bytes_per_second;
        ps.width = p->rate->width;
        ps.speed = p->rate->speed;
      }
      ps.has_receive_bytes = p->rx.has;
      ps.has_transmit_bytes = p->tx.has;
      ps.receive_bytes = p->rx.total * 4;
      ps.transmit_bytes = p->tx.total * 4;
      for (const auto& sl : p->slots) {
        if (!sl.tr.has) continue;
        if (sl.group == Port::Group::kHw) {
          ps.hw_counters[sl.name] = sl.tr.total;
        } else if (sl.error) {
          ps.errors[sl.name] = sl.tr.total;
        } else {
          const std::string key = sl.group == Port::Group::kExt ? "counters_ext/" + sl.name : sl.name;
          ps.counters[key] = sl.tr.total;
          if (sl.kind == Port::Kind::kWait) {
            ps.has_transmit_wait = true;
            ps.transmit_wait = sl.tr.total;
          }
        }
      }
      ps.counter_resets = p->counter_resets;
      if (const PortHealth* h = detector_.health(name, num)) {
        ps.receive_bytes_per_second = h->rx_bytes_per_second;
        ps.transmit_bytes_per_second = h->tx_bytes_per_second;
        ps.transmit_wait_share = h->transmit_wait_share;
        ps.error_rates = h->error_rates;
        ps.degraded = h->reasons;
        ps.degraded_detail = h->detail;
      }
      s.ports.push_back(std::move(ps));
    }
  }
  return s;
}

}  // namespace argus::rdma
