#include "rdma/detector.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>

namespace argus::rdma {

namespace {

constexpr double kNs = 1e9;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

std::string fmt_rate(double per_s) {
  if (per_s >= 100) return fmt("%.0f", per_s);
  if (per_s >= 1) return fmt("%.1f", per_s);
  return fmt("%.3g", per_s);
}

std::string fmt_bytes_rate(double bps) {
  if (bps >= 1e9) return fmt("%.2f GB/s", bps / 1e9);
  if (bps >= 1e6) return fmt("%.1f MB/s", bps / 1e6);
  return fmt("%.0f B/s", bps);
}

std::string fmt_gbps(double g) {
  char buf[32];
  if (std::fabs(g - std::round(g)) < 1e-9) {
    std::snprintf(buf, sizeof(buf), "%.0f", g);
  } else {
    std::snprintf(buf, sizeof(buf), "%g", g);
  }
  return buf;
}

// The newest sample at least `window_ns` old (else the oldest): the base of a windowed rate.
template <typename Deque>
std::size_t base_index(const Deque& samples, uint64_t now, uint64_t window_ns) {
  std::size_t i = 0;
  while (i + 1 < samples.size() && now - samples[i + 1].t_ns >= window_ns) i++;
  return i;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::string format_rate_text(double gbps, int width, const std::string& speed) {
  std::string s = fmt_gbps(gbps) + " Gb/sec";
  if (width > 0) s += " (" + std::to_string(width) + "X" + (speed.empty() ? "" : " " + speed) + ")";
  return s;
}

LinkHealthDetector::LinkHealthDetector(DetectorOptions options, const Clock& clock)
    : opts_(std::move(options)), clock_(clock) {}

void LinkHealthDetector::forget(const std::string& device, int port) { ports_.erase({device, port}); }

const PortHealth* LinkHealthDetector::health(const std::string& device, int port) const {
  auto it = ports_.find({device, port});
  return it == ports_.end() ? nullptr : &it->second.health;
}

std::vector<LinkEvent> LinkHealthDetector::take_events() {
  std::vector<LinkEvent> out;
  out.swap(events_);
  return out;
}

void LinkHealthDetector::update_reason(ReasonState& rs, bool raise, bool hold, int raise_polls,
                                       double clear_after_s, uint64_t now, std::string detail,
                                       std::map<std::string, double> evidence) {
  if (!rs.active) {
    if (raise) {
      rs.streak++;
      rs.detail = std::move(detail);
      rs.evidence = std::move(evidence);
      if (rs.streak >= std::max(1, raise_polls)) {
        rs.active = true;
        rs.last_hold_ns = now;
      }
    } else {
      rs.streak = 0;
    }
    return;
  }
  if (hold || raise) {
    rs.last_hold_ns = now;
    rs.detail = std::move(detail);
    rs.evidence = std::move(evidence);
  } else if (static_cast<double>(now - rs.last_hold_ns) >= clear_after_s * kNs) {
    rs.active = false;
    rs.streak = 0;
  }
}

void LinkHealthDetector::observe(const std::vector<PortObservation>& ports) {
  const uint64_t now = clock_.monotonic_ns();
  const uint64_t window_ns = static_cast<uint64_t>(std::max(0.0, opts_.window_s) * kNs);
  const uint64_t error_window_ns = static_cast<uint64_t>(std::max(0.0, opts_.error_window_s) * kNs);
  const uint64_t keep_ns = std::max(window_ns, error_window_ns);
  const std::size_t n_obs = ports.size();

  // 1. History, best rates, throughput.
  struct Derived {
    PortState* st = nullptr;
    bool rates = false;
    double dt = 0;
    double tput = 0;  // rx + tx bytes/s
    std::size_t base = 0, ebase = 0;
    int group = 0;
  };
  std::vector<Derived> derived(n_obs);
  std::map<std::string_view, int> group_ids;
  for (std::size_t i = 0; i < n_obs; i++) {
    const PortObservation& o = ports[i];
    PortState& st = ports_[Key{o.device, o.port}];
    derived[i].st = &st;
    if (st.group != o.group) st.group = o.group;
    // The error counters' names: a change (a counter appeared) restarts the history.
    bool same = st.error_names.size() == o.errors.size();
    if (!same) {
      st.error_names.clear();
      for (const auto& [name, v] : o.errors) st.error_names.push_back(name);
      st.samples.clear();
    }
    Sample s;
    s.t_ns = now;
    s.rx = o.rx_bytes;
    s.tx = o.tx_bytes;
    s.wait = o.xmit_wait;
    s.errors.swap(st.spare);
    s.errors.clear();
    for (const auto& [name, v] : o.errors) s.errors.push_back(v);
    if (!st.samples.empty() && st.samples.back().t_ns >= now) st.samples.pop_back();  // same instant: replace
    st.samples.push_back(std::move(s));
    while (st.samples.size() > 2 && now - st.samples[1].t_ns >= keep_ns) {
      st.spare.swap(st.samples.front().errors);
      st.samples.pop_front();
    }
    if (o.state_known && o.up) st.seen_up = true;
    if (o.rx_bytes > 0 || o.tx_bytes > 0) st.had_traffic = true;
    if (o.state_known && o.up && o.rate_known) {
      if (o.width > 0) st.best_width = std::max(st.best_width, o.width);
      st.best_lane_gbps = std::max(st.best_lane_gbps, o.lane_gbps);
    }
    Derived& d = derived[i];
    d.group = group_ids.emplace(std::string_view(st.group), static_cast<int>(group_ids.size())).first->second;
    const std::size_t n = st.samples.size();
    if (n >= 2) {
      d.base = std::min(base_index(st.samples, now, window_ns), n - 2);
      d.ebase = std::min(base_index(st.samples, now, error_window_ns), n - 2);
      const Sample& a = st.samples[d.base];
      const Sample& b = st.samples.back();
      d.dt = static_cast<double>(b.t_ns - a.t_ns) / kNs;
      if (d.dt > 0) {
        d.rates = true;
        const double rx = b.rx >= a.rx ? static_cast<double>(b.rx - a.rx) / d.dt : 0;
        const double tx = b.tx >= a.tx ? static_cast<double>(b.tx - a.tx) / d.dt : 0;
        d.tput = rx + tx;
        st.health.rx_bytes_per_second = rx;
        st.health.tx_bytes_per_second = tx;
      }
    }
  }
  // Group bests include ports seen before (and not forgotten), present now or not.
  std::map<std::string_view, std::pair<int, double>> group_best;
  for (const auto& [key, st] : ports_) {
    auto& gb = group_best[std::string_view(st.group)];
    gb.first = std::max(gb.first, st.best_width);
    gb.second = std::max(gb.second, st.best_lane_gbps);
  }

  // 2. Reasons. Evidence lines are built only where a condition holds.
  for (std::size_t i = 0; i < n_obs; i++) {
    const PortObservation& o = ports[i];
    const Derived& d = derived[i];
    PortState& st = *d.st;
    const std::size_t n = st.samples.size();
    const Sample& last = st.samples.back();
    const Sample& base = st.samples[d.base];
    const Sample& ebase = st.samples[d.ebase];
    const double edt = static_cast<double>(last.t_ns - ebase.t_ns) / kNs;
    const bool up = o.state_known && o.up;

    // down
    {
      const bool counts = !opts_.down_needs_history || st.seen_up || st.had_traffic;
      const bool raise = o.state_known && !o.up && counts && o.phys_state_id != 3;
      const bool hold = o.state_known && !o.up;
      std::string detail;
      std::map<std::string, double> ev;
      if (raise || hold) {
        detail = "port not ACTIVE (phys_state " + std::to_string(o.phys_state_id) + ")";
        ev = {{"phys_state", o.phys_state_id}};
      }
      update_reason(st.reasons[kDown], raise, hold, opts_.raise_polls, opts_.clear_after_s, now, std::move(detail),
                    std::move(ev));
    }

    // errors (rates over the error window)
    {
      bool raise = false, hold = false;
      std::string detail;
      std::map<std::string, double> evidence;
      if (!st.health.error_rates.empty()) st.health.error_rates.clear();
      if (n >= 2 && edt > 0) {
        for (std::size_t k = 0; k < st.error_names.size(); k++) {
          const uint64_t a = ebase.errors[k], b = last.errors[k];
          if (b <= a) continue;
          const std::string& name = st.error_names[k];
          const uint64_t delta = b - a;
          const double rate = static_cast<double>(delta) / edt;
          st.health.error_rates[name] = rate;
          auto th = opts_.error_thresholds.find(name);
          if (th == opts_.error_thresholds.end()) continue;
          double per_s = th->second.per_second;
          if (name == "symbol_error" && o.rate_known && o.rate_gbps > 0) per_s = opts_.symbol_error_ber * o.rate_gbps * 1e9;
          const bool r = delta >= th->second.min_count && rate >= per_s;
          const bool h = rate >= opts_.error_clear_ratio * per_s;
          if (r || h) {
            if (!detail.empty()) detail += ", ";
            detail += name + " " + fmt_rate(rate) + "/s (threshold " + fmt_rate(per_s) + "/s)";
            evidence[name + "_per_second"] = rate;
          }
          raise = raise || r;
          hold = hold || h;
        }
      }
      update_reason(st.reasons[kErrors], raise, hold, opts_.raise_polls, opts_.clear_after_s, now, std::move(detail),
                    std::move(evidence));
    }

    // flapping
    {
      uint64_t flaps = 0;
      if (n >= 2) {
        const Sample& prev = st.samples[n - 2];
        for (std::size_t k = 0; k < st.error_names.size(); k++) {
          const std::string& name = st.error_names[k];
          if ((name == "link_error_recovery" || name == "link_downed") && last.errors[k] > prev.errors[k]) {
            flaps += last.errors[k] - prev.errors[k];
          }
        }
      }
      const bool flap = flaps > 0;
      std::string detail;
      std::map<std::string, double> ev;
      if (flap) {
        uint64_t rec_w = 0, downed_w = 0;
        for (std::size_t k = 0; k < st.error_names.size(); k++) {
          const uint64_t inc = last.errors[k] > ebase.errors[k] ? last.errors[k] - ebase.errors[k] : 0;
          if (st.error_names[k] == "link_error_recovery") rec_w = inc;
          if (st.error_names[k] == "link_downed") downed_w = inc;
        }
        detail = "link_error_recovery +" + std::to_string(rec_w) + ", link_downed +" + std::to_string(downed_w) +
                 " in the last " + fmt("%.0f", edt) + " s";
        ev = {{"link_error_recovery_increase", static_cast<double>(rec_w)},
              {"link_downed_increase", static_cast<double>(downed_w)}};
      }
      update_reason(st.reasons[kFlapping], flap, flap, 1, opts_.flap_hold_s, now, std::move(detail), std::move(ev));
    }

    // rate and width (against the best this port or its siblings showed)
    {
      const auto& gb = group_best[std::string_view(st.group)];
      const int best_width = std::max(st.best_width, gb.first);
      const double best_lane = std::max(st.best_lane_gbps, gb.second);
      const bool slow = up && o.rate_known && best_lane > 0 && o.lane_gbps < best_lane * (1 - 1e-9);
      std::string detail;
      std::map<std::string, double> ev;
      if (slow) {
        detail = "lane speed " + fmt_gbps(o.lane_gbps) + " Gb/s (" + o.rate_text + ") below the best " +
                 fmt_gbps(best_lane) + " Gb/s seen on this port or its siblings";
        ev = {{"lane_gbps", o.lane_gbps}, {"best_lane_gbps", best_lane}, {"rate_gbps", o.rate_gbps}};
      }
      update_reason(st.reasons[kRate], slow, slow, opts_.raise_polls, opts_.clear_after_s, now, std::move(detail),
                    std::move(ev));
      const bool narrow = up && o.rate_known && o.width > 0 && o.width < best_width;
      detail.clear();
      ev.clear();
      if (narrow) {
        detail = std::to_string(o.width) + "X (" + o.rate_text + ") below the best " + std::to_string(best_width) +
                 "X seen on this port or its siblings";
        ev = {{"width", o.width}, {"best_width", best_width}};
      }
      update_reason(st.reasons[kWidth], narrow, narrow, opts_.raise_polls, opts_.clear_after_s, now, std::move(detail),
                    std::move(ev));
    }

    // congestion
    {
      double share = 0;
      const double line = o.rate_gbps * 125e6;
      if (up && d.rates && o.has_xmit_wait && line > 0 && last.wait >= base.wait) {
        share = static_cast<double>(last.wait - base.wait) * opts_.xmit_wait_bytes_per_tick / (d.dt * line);
        share = std::min(share, 1.0);
      }
      st.health.transmit_wait_share = share;
      const bool raise = share >= opts_.congestion_share;
      const bool hold = share >= opts_.congestion_clear_share;
      std::string detail;
      std::map<std::string, double> ev;
      if (raise || hold) {
        detail = "transmit wait costs " + fmt("%.1f", share * 100) + "% of line rate (threshold " +
                 fmt("%.0f", opts_.congestion_share * 100) + "%)";
        ev = {{"transmit_wait_share", share}};
      }
      update_reason(st.reasons[kCongestion], raise, hold, opts_.raise_polls, opts_.clear_after_s, now,
                    std::move(detail), std::move(ev));
    }

    // imbalance (against the other busy rails of the same group)
    {
      bool raise = false, hold = false;
      std::string detail;
      std::map<std::string, double> evidence;
      if (up && o.expected_busy && d.rates) {
        std::vector<double> others;
        for (std::size_t j = 0; j < n_obs; j++) {
          const PortObservation& p = ports[j];
          if (j == i || derived[j].group != d.group || !p.expected_busy || !p.state_known || !p.up || !derived[j].rates) {
            continue;
          }
          others.push_back(derived[j].tput);
        }
        if (!others.empty()) {
          const double med = median(std::move(others));
          raise = med >= opts_.imbalance_min_bytes_per_s && d.tput < opts_.imbalance_ratio * med;
          hold = med >= opts_.imbalance_min_bytes_per_s && d.tput < opts_.imbalance_clear_ratio * med;
          if (raise || hold) {
            detail = "moves " + fmt_bytes_rate(d.tput) + " while the median of its sibling rails is " +
                     fmt_bytes_rate(med);
            evidence = {{"bytes_per_second", d.tput},
                        {"siblings_median_bytes_per_second", med},
                        {"ratio", med > 0 ? d.tput / med : 0}};
          }
        }
      }
      update_reason(st.reasons[kImbalance], raise, hold, opts_.imbalance_raise_polls, opts_.clear_after_s, now,
                    std::move(detail), std::move(evidence));
    }

    // 3. What is reported, and the events of what changed.
    unsigned reported = 0;
    if (st.reasons[kDown].active) {
      reported = 1u << kDown;
    } else if (o.state_known && !o.up) {
      // not ACTIVE, not yet confirmed down: nothing else is meaningful now
    } else {
      for (int r = 0; r < kReasonCount; r++) {
        if (st.reasons[r].active) reported |= 1u << r;
      }
      if (reported & ((1u << kRate) | (1u << kWidth))) reported &= ~(1u << kImbalance);
    }
    const unsigned was = st.reported;
    if (reported != was) {
      for (int r = 0; r < kReasonCount; r++) {
        const bool now_on = reported & (1u << r), was_on = was & (1u << r);
        if (now_on == was_on) continue;
        LinkEvent ev;
        ev.seq = ++seq_;
        ev.time_unix = clock_.unix_seconds();
        ev.device = o.device;
        ev.port = o.port;
        ev.reason = std::string(kDegradeReasons[static_cast<std::size_t>(r)]);
        ev.raised = now_on;
        ev.detail = st.reasons[r].detail;
        ev.evidence = st.reasons[r].evidence;
        ev.rate_text = o.rate_text;
        ev.link_layer = o.link_layer;
        events_.push_back(std::move(ev));
      }
      st.reported = reported;
      st.health.reasons.clear();
      for (int r = 0; r < kReasonCount; r++) {
        if (reported & (1u << r)) st.health.reasons.insert(std::string(kDegradeReasons[static_cast<std::size_t>(r)]));
      }
    }
    if (reported != 0 || !st.health.detail.empty()) {
      st.health.detail.clear();
      for (int r = 0; r < kReasonCount; r++) {
        if (reported & (1u << r)) st.health.detail[std::string(kDegradeReasons[static_cast<std::size_t>(r)])] = st.reasons[r].detail;
      }
    }
  }
}

}  // namespace argus::rdma
