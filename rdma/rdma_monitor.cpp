// RdmaMonitor's poll: each port's attributes and counters read at their
// cadence, the totals kept across resets and wraps, the link-health detector
// fed, and the snapshot of it all.
#include "rdma/rdma_monitor.h"

#include <algorithm>
#include <optional>

#include <spdlog/spdlog.h>

#include "rdma/rdma_monitor_detail.h"

namespace argus::rdma {

using monitor_detail::errno_text;
using monitor_detail::kNs;

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
