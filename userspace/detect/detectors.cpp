#include "detect/detectors.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace argus {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

DetectedEvent hang_event(const CommView& c, const CommHealth& h, double limit,
                         const std::map<int, RankInfoForHang>& ranks, double now_unix) {
  nlohmann::json missing_json = nlohmann::json::array();
  std::string names;
  for (int pid : h.missing_pids) {
    auto it = ranks.find(pid);
    const RankInfoForHang info = it == ranks.end() ? RankInfoForHang{} : it->second;
    missing_json.push_back({{"pid", pid},
                            {"rank", info.rank},
                            {"last_seq", c.members.at(pid).last_seq},
                            {"exited", info.exited},
                            {"exit_reason", info.exit_reason},
                            {"exit_code", info.exit_code}});
    if (!names.empty()) names += ", ";
    names += "rank " + std::to_string(info.rank);
    if (info.exited) names += " (exited: " + info.exit_reason + " " + std::to_string(info.exit_code) + ")";
  }
  DetectedEvent ev;
  ev.time = now_unix;
  ev.kind = "hang";
  ev.job_id = h.job_id;
  const int here = static_cast<int>(c.members.size());
  const std::string head = "collective #" + std::to_string(c.newest_seq) + " of job " + h.job_id + " has waited " +
                           fmt("%.0f", h.stalled_seconds) + " s";
  if (h.missing_pids.empty()) {
    ev.summary = head + "; all " + std::to_string(here) + " ranks on this node are in it: the missing ranks are on other nodes";
  } else {
    auto it = ranks.find(h.missing_pids.front());
    ev.rank = it == ranks.end() ? -1 : it->second.rank;
    ev.summary = head + " for " + names + ", which never reached it";
  }
  ev.evidence = {{"comm", c.comm},           {"newest_seq", c.newest_seq},   {"stalled_seconds", h.stalled_seconds},
                 {"stall_threshold_seconds", limit}, {"ranks_here", here}, {"comm_ranks", c.nranks},
                 {"missing", missing_json}};
  return ev;
}

}  // namespace

std::vector<DetectedEvent> StragglerDetector::evaluate(const std::vector<RankSignal>& ranks, double now_unix) {
  std::vector<DetectedEvent> events;
  std::map<std::string, std::vector<const RankSignal*>> jobs;
  for (const auto& r : ranks)
    if (!r.job_id.empty() && r.rank >= 0 && r.coverage >= opts_.min_coverage) jobs[r.job_id].push_back(&r);

  std::set<int> judged;
  for (const auto& [job, members] : jobs) {
    if (members.size() < 2) continue;  // nobody to compare with here: the cross-node rules do it
    std::vector<double> waits;
    for (const auto* r : members) waits.push_back(r->wait_ratio);
    const double med = median_of(waits);
    std::vector<double> dev;
    for (double w : waits) dev.push_back(std::fabs(w - med));
    const double mad = 1.4826 * median_of(dev);
    const double threshold = med - std::max(opts_.min_wait_gap, opts_.mad_k * mad);

    for (const auto* r : members) {
      judged.insert(r->pid);
      // Lag evidence where the node has it (the ranks share a communicator);
      // the wait ratio alone otherwise.
      const bool lag_known = r->lag.spread_samples >= 3;
      const bool lag_says_late =
          !lag_known || (r->lag.late_fraction >= opts_.min_late_fraction && r->lag.median_lag_s >= opts_.min_lag_s);
      const bool candidate = r->wait_ratio < threshold && lag_says_late;
      Track& t = tracks_[r->pid];
      const double denom = std::max(1e-3, 1.0 - med);
      t.st.score = std::max(0.0, (1.0 - r->wait_ratio) / denom - 1.0);
      if (candidate) {
        ++t.hits;
        t.misses = 0;
      } else {
        ++t.misses;
        t.hits = 0;
      }
      if (!t.st.straggler && t.hits >= opts_.raise_after) {
        t.st.straggler = true;
        DetectedEvent ev;
        ev.time = now_unix;
        ev.kind = "straggler";
        ev.job_id = job;
        ev.rank = r->rank;
        std::string lag_part;
        if (lag_known)
          lag_part = " (arrives " + fmt("%.0f", r->lag.median_lag_s * 1e3) + " ms late at " +
                     fmt("%.0f", r->lag.late_fraction * 100) + "% of collectives)";
        else
          lag_part = " (waits " + fmt("%.0f", r->wait_ratio * 100) + "% of the time, the median rank " +
                     fmt("%.0f", med * 100) + "%)";
        ev.summary = "rank " + std::to_string(r->rank) + " of job " + job + " is " + fmt("%.1f", t.st.score + 1.0) +
                     "x slower than the median of " + std::to_string(members.size()) + " ranks" + lag_part;
        nlohmann::json peers = nlohmann::json::array();
        for (const auto* p : members)
          peers.push_back({{"rank", p->rank}, {"pid", p->pid}, {"wait_ratio", p->wait_ratio},
                           {"mean_lag_seconds", p->lag.mean_lag_s}});
        ev.evidence = {{"source", "host"},
                       {"pid", r->pid},
                       {"wait_ratio", r->wait_ratio},
                       {"median_wait_ratio", med},
                       {"wait_ratio_threshold", threshold},
                       {"mean_lag_seconds", r->lag.mean_lag_s},
                       {"median_lag_seconds", r->lag.median_lag_s},
                       {"late_fraction", r->lag.late_fraction},
                       {"collectives_compared", r->lag.samples},
                       {"collectives_spread", r->lag.spread_samples},
                       {"slowness", t.st.score + 1.0},
                       {"window_seconds", window_seconds_},
                       {"peers", peers}};
        events.push_back(std::move(ev));
      } else if (t.st.straggler && t.misses >= opts_.clear_after) {
        t.st.straggler = false;
      }
    }
  }
  // Ranks that cannot be judged now (too few peers, too new) hold no flag.
  for (auto& [pid, t] : tracks_) {
    if (judged.count(pid)) continue;
    t = Track{};
  }
  return events;
}

StragglerState StragglerDetector::state(int pid) const {
  auto it = tracks_.find(pid);
  return it == tracks_.end() ? StragglerState{} : it->second.st;
}

void StragglerDetector::forget(int pid) { tracks_.erase(pid); }

std::vector<DetectedEvent> HangDetector::evaluate(const std::vector<CommView>& comms,
                                                  const std::vector<InflightCollective>& inflight,
                                                  const std::map<int, RankInfoForHang>& ranks, uint64_t now_ns,
                                                  double now_unix) {
  std::vector<DetectedEvent> events;
  std::map<std::string, CommHealth> next;
  for (const auto& c : comms) {
    CommHealth h;
    h.comm = c.comm;
    h.newest_seq = c.newest_seq;
    double step = 0;
    for (const auto& [pid, m] : c.members) {
      auto it = ranks.find(pid);
      if (it == ranks.end()) continue;
      if (h.job_id.empty()) h.job_id = it->second.job_id;
      step = std::max(step, it->second.step_seconds);
    }
    // The oldest collective still running on this communicator, among the
    // ranks that reached its newest collective.
    uint64_t oldest = 0;
    for (const auto& f : inflight) {
      if (f.comm != c.comm) continue;
      auto m = c.members.find(f.pid);
      if (m == c.members.end() || m->second.last_seq != c.newest_seq) continue;
      if (oldest == 0 || f.start_ns < oldest) oldest = f.start_ns;
    }
    if (oldest != 0 && now_ns > oldest) h.stalled_seconds = static_cast<double>(now_ns - oldest) / 1e9;
    const double limit = std::max(opts_.min_stall_seconds, opts_.step_multiple * step);
    h.hung = h.stalled_seconds >= limit;
    if (h.hung) {
      for (const auto& [pid, m] : c.members)
        if (static_cast<int64_t>(m.last_seq - c.newest_seq) < 0) h.missing_pids.push_back(pid);
      std::set<int> missing(h.missing_pids.begin(), h.missing_pids.end());
      // One event when the hang is found, and one each time who is missing changes.
      const bool was_hung = reported_.count(c.comm) != 0;
      if (!was_hung || reported_[c.comm] != missing) {
        events.push_back(hang_event(c, h, limit, ranks, now_unix));
        reported_[c.comm] = missing;
      }
    } else {
      reported_.erase(c.comm);
    }
    next[c.comm] = std::move(h);
  }
  health_ = std::move(next);
  return events;
}

bool HangDetector::missing(int pid) const {
  for (const auto& [comm, h] : health_)
    if (std::find(h.missing_pids.begin(), h.missing_pids.end(), pid) != h.missing_pids.end()) return true;
  return false;
}

}  // namespace argus
