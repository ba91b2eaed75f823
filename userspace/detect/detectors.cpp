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

struct StragglerDetector::Verdict {
  std::string reason;  // "host", "gpu" or "" (on time)
  double host_median = 0, host_threshold = 0;
  double gpu_median = 0, gpu_threshold = 0;
  double score = 0;
};

namespace {

struct Spread {
  double median = 0;
  double threshold = 0;  // below this stands out
};

Spread low_outlier_threshold(const std::vector<double>& v, double min_gap, double k) {
  Spread s;
  s.median = median_of(v);
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - s.median));
  const double mad = 1.4826 * median_of(dev);
  s.threshold = s.median - std::max(min_gap, k * mad);
  return s;
}

double slowness_score(double ratio, double median) {
  return std::max(0.0, (1.0 - ratio) / std::max(1e-3, 1.0 - median) - 1.0);
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
    std::vector<double> waits, gpu, bubble;
    for (const auto* r : members) {
      waits.push_back(r->wait_ratio);
      if (r->gpu_valid) {
        gpu.push_back(r->gpu_nccl_ratio);
        bubble.push_back(r->bubble_ratio);
      }
    }
    const double bubble_median = median_of(bubble);
    const Spread host = low_outlier_threshold(waits, opts_.min_wait_gap, opts_.mad_k);
    const bool gpu_comparable = gpu.size() >= 2;
    const Spread dev = gpu_comparable ? low_outlier_threshold(gpu, opts_.min_gpu_gap, opts_.mad_k) : Spread{};

    for (const auto* r : members) {
      judged.insert(r->pid);
      // Host: waits least, and (where the node has lag evidence) arrives late.
      const bool lag_known = r->lag.spread_samples >= 3;
      const bool lag_says_late =
          !lag_known || (r->lag.late_fraction >= opts_.min_late_fraction && r->lag.median_lag_s >= opts_.min_lag_s);
      const bool host_slow = r->wait_ratio < host.threshold && lag_says_late;
      // GPU: its NCCL kernels run least — its peers' kernels wait for it. A rank
      // whose GPU is late because it idles on pipeline receives is a bubble (the
      // bubble detector's), not a slow GPU.
      const bool in_bubble = r->bubble_ratio > bubble_median + opts_.min_gpu_gap;
      const bool gpu_slow = gpu_comparable && r->gpu_valid && r->gpu_nccl_ratio < dev.threshold && !in_bubble;
      Verdict v{host_slow ? "host" : gpu_slow ? "gpu" : "", host.median, host.threshold, dev.median, dev.threshold, 0};
      v.score = std::max(slowness_score(r->wait_ratio, host.median),
                         gpu_slow ? slowness_score(r->gpu_nccl_ratio, dev.median) : 0.0);
      Track& t = tracks_[r->pid];
      t.st.score = v.score;
      if (!v.reason.empty()) {
        ++t.hits;
        t.misses = 0;
      } else {
        ++t.misses;
        t.hits = 0;
      }
      if (!t.st.straggler && t.hits >= opts_.raise_after) {
        t.st.straggler = true;
        t.st.reason = v.reason;
        events.push_back(straggler_event(job, *r, v, members, now_unix));
      } else if (t.st.straggler && t.misses >= opts_.clear_after) {
        t.st.straggler = false;
        t.st.reason.clear();
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

DetectedEvent StragglerDetector::straggler_event(const std::string& job, const RankSignal& r, const Verdict& v,
                                                 const std::vector<const RankSignal*>& members,
                                                 double now_unix) const {
  DetectedEvent ev;
  ev.time = now_unix;
  ev.kind = "straggler";
  ev.job_id = job;
  ev.rank = r.rank;
  const bool lag_known = r.lag.spread_samples >= 3;
  std::string why;
  if (v.reason == "gpu")
    why = " on its GPU (its NCCL kernels run " + fmt("%.0f", r.gpu_nccl_ratio * 100) +
          "% of the time, the median rank's " + fmt("%.0f", v.gpu_median * 100) +
          "%: its peers' kernels wait for it; the host is on time)";
  else if (lag_known)
    why = " (arrives " + fmt("%.0f", r.lag.median_lag_s * 1e3) + " ms late at " +
          fmt("%.0f", r.lag.late_fraction * 100) + "% of collectives)";
  else
    why = " (waits " + fmt("%.0f", r.wait_ratio * 100) + "% of the time, the median rank " +
          fmt("%.0f", v.host_median * 100) + "%)";
  ev.summary = "rank " + std::to_string(r.rank) + " of job " + job + " is " + fmt("%.1f", v.score + 1.0) +
               "x slower than the median of " + std::to_string(members.size()) + " ranks" + why;
  nlohmann::json peers = nlohmann::json::array();
  for (const auto* p : members) {
    nlohmann::json peer = {{"rank", p->rank}, {"pid", p->pid}, {"wait_ratio", p->wait_ratio},
                           {"mean_lag_seconds", p->lag.mean_lag_s}};
    if (p->gpu_valid) peer["gpu_nccl_ratio"] = p->gpu_nccl_ratio;
    peers.push_back(std::move(peer));
  }
  ev.evidence = {{"source", v.reason},
                 {"reason", v.reason},
                 {"pid", r.pid},
                 {"wait_ratio", r.wait_ratio},
                 {"median_wait_ratio", v.host_median},
                 {"wait_ratio_threshold", v.host_threshold},
                 {"mean_lag_seconds", r.lag.mean_lag_s},
                 {"median_lag_seconds", r.lag.median_lag_s},
                 {"late_fraction", r.lag.late_fraction},
                 {"collectives_compared", r.lag.samples},
                 {"collectives_spread", r.lag.spread_samples},
                 {"slowness", v.score + 1.0},
                 {"window_seconds", window_seconds_},
                 {"peers", peers}};
  if (r.gpu_valid) {
    ev.evidence["gpu_nccl_ratio"] = r.gpu_nccl_ratio;
    ev.evidence["median_gpu_nccl_ratio"] = v.gpu_median;
    ev.evidence["gpu_nccl_ratio_threshold"] = v.gpu_threshold;
  }
  return ev;
}

std::vector<DetectedEvent> BubbleDetector::evaluate(const std::vector<RankSignal>& ranks, double now_unix) {
  std::vector<DetectedEvent> events;
  std::map<std::string, std::vector<const RankSignal*>> jobs;
  for (const auto& r : ranks)
    if (!r.job_id.empty() && r.rank >= 0 && r.gpu_valid && r.coverage >= opts_.min_coverage)
      jobs[r.job_id].push_back(&r);
  std::set<int> judged;
  for (const auto& [job, members] : jobs) {
    std::vector<double> ratios;
    for (const auto* r : members) ratios.push_back(r->bubble_ratio);
    const double med = median_of(ratios);
    std::vector<double> dev;
    for (double x : ratios) dev.push_back(std::fabs(x - med));
    const double mad = 1.4826 * median_of(dev);
    const double peer_limit = med + std::max(opts_.min_excess, opts_.mad_k * mad);
    for (const auto* r : members) {
      judged.insert(r->pid);
      Track& t = tracks_[r->pid];
      const bool vs_peers = members.size() >= 2 && r->bubble_ratio > peer_limit;
      const bool baseline_ready = t.evaluations >= opts_.baseline_evaluations;
      const bool vs_past = baseline_ready && r->bubble_ratio >= t.baseline + opts_.min_excess &&
                           r->bubble_ratio >= opts_.past_factor * t.baseline;
      if (vs_peers || vs_past) {
        ++t.hits;
        t.misses = 0;
      } else {
        ++t.misses;
        t.hits = 0;
        // The baseline learns only from unremarkable windows.
        t.baseline = t.evaluations == 0 ? r->bubble_ratio
                                        : (1 - opts_.baseline_alpha) * t.baseline + opts_.baseline_alpha * r->bubble_ratio;
        ++t.evaluations;
      }
      if (!t.flagged && t.hits >= opts_.raise_after) {
        t.flagged = true;
        DetectedEvent ev;
        ev.time = now_unix;
        ev.kind = "pipeline_bubble";
        ev.job_id = job;
        ev.rank = r->rank;
        const std::string than = vs_peers ? "the median rank of its job " + fmt("%.0f", med * 100) + "%"
                                          : "its own past " + fmt("%.0f", t.baseline * 100) + "%";
        ev.summary = "rank " + std::to_string(r->rank) + " of job " + job + ": its GPU idles " +
                     fmt("%.0f", r->bubble_ratio * 100) + "% of the time waiting on pipeline receives (" + than + ")";
        nlohmann::json peers = nlohmann::json::array();
        for (const auto* p : members) peers.push_back({{"rank", p->rank}, {"pid", p->pid}, {"bubble_ratio", p->bubble_ratio}});
        ev.evidence = {{"pid", r->pid},
                       {"bubble_ratio", r->bubble_ratio},
                       {"median_bubble_ratio", med},
                       {"peer_threshold", peer_limit},
                       {"baseline_bubble_ratio", t.baseline},
                       {"compared_with", vs_peers ? "peers" : "own_past"},
                       {"window_seconds", window_seconds_},
                       {"peers", peers}};
        events.push_back(std::move(ev));
      } else if (t.flagged && t.misses >= opts_.clear_after) {
        t.flagged = false;
      }
    }
  }
  for (auto& [pid, t] : tracks_)
    if (!judged.count(pid)) {
      t.hits = 0;
      t.flagged = false;
    }
  return events;
}

bool BubbleDetector::flagged(int pid) const {
  auto it = tracks_.find(pid);
  return it != tracks_.end() && it->second.flagged;
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
