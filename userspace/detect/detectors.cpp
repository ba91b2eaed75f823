#include "userspace/detect/detectors.h"

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

// What each local rank of a hung communicator is doing now.
nlohmann::json rank_states(const CommView& c, const std::map<int, const InflightWait*>& blocked,
                           const std::map<int, RankInfoForHang>& ranks, uint64_t now_ns) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [pid, m] : c.members) {
    auto it = ranks.find(pid);
    const RankInfoForHang info = it == ranks.end() ? RankInfoForHang{} : it->second;
    nlohmann::json j = {{"pid", pid}, {"rank", info.rank}, {"last_seq", m.last_seq}};
    if (info.exited) {
      j["state"] = "exited";
      j["exit_reason"] = info.exit_reason;
      j["exit_code"] = info.exit_code;
    } else if (auto b = blocked.find(pid); b != blocked.end()) {
      j["state"] = b->second->sync ? "in_synchronize" : "in_collective";
      j["call"] = b->second->api;
      j["blocked_seconds"] = now_ns > b->second->start_ns ? static_cast<double>(now_ns - b->second->start_ns) / 1e9 : 0.0;
    } else {
      j["state"] = "running";  // on CPU or off it, but in no collective or synchronize call
    }
    if (info.gpu_last_activity_ns > 0 && now_ns > info.gpu_last_activity_ns)
      j["gpu_idle_seconds"] = static_cast<double>(now_ns - static_cast<uint64_t>(info.gpu_last_activity_ns)) / 1e9;
    out.push_back(std::move(j));
  }
  return out;
}

bool exited_cleanly(const RankInfoForHang& r) { return r.exited && r.exit_reason == "exit" && r.exit_code == 0; }

size_t ranks_that_left_cleanly(const CommView& c, const std::map<int, RankInfoForHang>& ranks) {
  size_t n = 0;
  for (const auto& [pid, m] : c.members)
    if (auto it = ranks.find(pid); it != ranks.end() && exited_cleanly(it->second)) ++n;
  return n;
}

DetectedEvent hang_event(const CommView& c, const CommHealth& h, double limit,
                         const std::map<int, const InflightWait*>& blocked,
                         const std::map<int, RankInfoForHang>& ranks, uint64_t now_ns, double now_unix) {
  nlohmann::json missing_json = nlohmann::json::array();
  // Two ways to be missing: never issued the newest collective, or issued it
  // and died (its GPU's part never ran, so its peers wait forever).
  std::string never, died_in;
  for (int pid : h.missing_pids) {
    auto it = ranks.find(pid);
    const RankInfoForHang info = it == ranks.end() ? RankInfoForHang{} : it->second;
    const bool issued = c.members.at(pid).last_seq == c.newest_seq;
    missing_json.push_back({{"pid", pid},
                            {"rank", info.rank},
                            {"last_seq", c.members.at(pid).last_seq},
                            {"issued_newest", issued},
                            {"exited", info.exited},
                            {"exit_reason", info.exit_reason},
                            {"exit_code", info.exit_code}});
    if (info.exited) {
      if (!info.exit_summary.empty()) missing_json.back()["died"] = info.exit_summary;
      if (!info.exit_cause.is_null()) missing_json.back()["exit_cause"] = info.exit_cause;
    }
    std::string& names = issued ? died_in : never;
    if (!names.empty()) names += ", ";
    names += "rank " + std::to_string(info.rank);
    if (info.exited)
      names += " (it died: " +
               (info.exit_summary.empty() ? info.exit_reason + " " + std::to_string(info.exit_code) : info.exit_summary) +
               ")";
  }
  std::string names;
  if (!never.empty()) names = never + " never issued it";
  if (!died_in.empty()) names += (names.empty() ? "" : "; ") + died_in + " issued it and died before it finished";
  // How the ranks that did issue it wait: in a synchronize (async NCCL) or in the call (blocking).
  size_t in_sync = 0, in_call = 0;
  for (const auto& [pid, w] : blocked) (w->sync ? in_sync : in_call)++;
  std::string waiting;
  if (in_sync > 0) waiting = std::to_string(in_sync) + " wait in a CUDA synchronize";
  if (in_call > 0) waiting += std::string(waiting.empty() ? "" : ", ") + std::to_string(in_call) + " in the collective call";
  DetectedEvent ev;
  ev.time = now_unix;
  ev.kind = "hang";
  ev.job_id = h.job_id;
  const int here = static_cast<int>(c.members.size());
  const std::string head = "collective #" + std::to_string(c.newest_seq) + " of job " + h.job_id + " has not moved for " +
                           fmt("%.0f", h.stalled_seconds) + " s";
  std::string cause;
  if (!h.missing_pids.empty()) {
    auto it = ranks.find(h.missing_pids.front());
    ev.rank = it == ranks.end() ? -1 : it->second.rank;
    ev.summary = head + ": " + names + (waiting.empty() ? "" : "; its peers here: " + waiting);
    cause = never.empty() ? "rank_died" : "missing_rank";
  } else if (const size_t left = ranks_that_left_cleanly(c, ranks); left > 0) {
    // Equal counts with peers gone (exit 0): what remains waits either for a
    // collective whose peers left before their part ran, or on work of its own.
    ev.summary = head + ": every rank here issued it; " + std::to_string(left) + " of the " + std::to_string(here) +
                 " then exited cleanly (exit 0) and the rest are blocked (" + waiting +
                 "). If those that left exited before their part of the collective ran (no synchronize or "
                 "ncclCommDestroy before exit), the rest wait forever; if the rest are running work of their "
                 "own (a final evaluation or save), this clears when it ends";
    cause = "peers_exited";
  } else if (c.nranks > here) {
    ev.summary = head + ": all " + std::to_string(here) + " ranks on this node issued it and are blocked (" + waiting +
                 "); none here is missing: a rank on another node never issued it, or the collective itself is stuck";
    cause = "no_local_rank_missing";
  } else {
    ev.summary = head + ": every rank issued it and none finished (" + waiting +
                 "); no rank is missing: the collective itself is stuck (a dead link, or a GPU stuck in a kernel)";
    cause = "collective_stuck";
  }
  ev.evidence = {{"comm", c.comm},
                 {"newest_seq", c.newest_seq},
                 {"stalled_seconds", h.stalled_seconds},
                 {"stall_threshold_seconds", limit},
                 {"ranks_here", here},
                 {"comm_ranks", c.nranks},
                 {"cause", cause},
                 {"missing", missing_json},
                 {"ranks", rank_states(c, blocked, ranks, now_ns)}};
  return ev;
}

}  // namespace

namespace {
struct HostShares {
  double runqueue = 0, io = 0, lock = 0, sleep = 0, oncpu = 0, throttled = 0;
};
}  // namespace

struct StragglerDetector::Verdict {
  std::string reason;  // "host", "compute", "cpu_contention", "throttled", "io", "gc_pause", "sync", "gpu" or "" (on time)
  bool late = false;   // arrives last at most collectives, by the margin
  double gc_peer_median_s = 0;  // the peers' GC seconds in the window (median)
  double gc_excess_per_step_s = 0;  // this rank's GC above it, per step
  double gc_explained_share = 0;    // ... as a share of its lag
  // Kernel layer: the rank's shares and its peers' medians (thread-seconds per
  // wall second), each cause's excess per step and the share of the lag it
  // explains, and which test decided the host reason.
  HostShares own, peers;
  double throttled_excess_s = 0, runqueue_excess_s = 0, io_excess_s = 0;
  double throttled_explained = 0, runqueue_explained = 0, io_explained = 0;
  std::string decided_by;
  double peers_lag_s = 0, lag_behind_peers_s = 0;  // the peers' median lag; its lag behind it
  double lag_margin_s = 0;
  double wait_median = 0, wait_threshold = 0;
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

double total_wait(const RankSignal& r) { return std::min(1.0, r.coll_wait_ratio + r.sync_wait_ratio); }

}  // namespace

// Whether this rank's GC time above its peers' median explains at least
// min_gc_share of its lateness (per step: the lag is what it loses each step).
bool StragglerDetector::gc_explains_lag(const RankSignal& r, const std::vector<const RankSignal*>& members,
                                        Verdict& v) const {
  const double span = r.gc_span_s > 0 ? r.gc_span_s : window_seconds_;
  if (!r.gc_valid || r.lag.step_seconds <= 0 || r.lag.median_lag_s <= 0 || span <= 0) return false;
  std::vector<double> peers;
  for (const auto* p : members)
    if (p->pid != r.pid && p->gc_valid) peers.push_back(p->gc_seconds);
  if (peers.empty()) return false;
  v.gc_peer_median_s = median_of(peers);
  const double steps = span / r.lag.step_seconds;
  v.gc_excess_per_step_s = std::max(0.0, r.gc_seconds - v.gc_peer_median_s) / steps;
  v.gc_explained_share = v.gc_excess_per_step_s / r.lag.median_lag_s;
  return v.gc_explained_share >= opts_.min_gc_share;
}

namespace {

HostShares shares_of(const RankSignal& r) {
  return {r.runqueue_share, r.io_share, r.lock_share, r.sleep_share, r.oncpu_share, r.throttled_share};
}

// The peers' median of each share: off-CPU ones over the peers the kernel layer
// follows, the throttled one over those whose cgroup was read (0 when none is).
HostShares peer_medians(const RankSignal& r, const std::vector<const RankSignal*>& members) {
  std::vector<double> rq, io, lock, sleep, oncpu, thr;
  for (const auto* p : members) {
    if (p->pid == r.pid) continue;
    if (p->offcpu_valid) {
      rq.push_back(p->runqueue_share);
      io.push_back(p->io_share);
      lock.push_back(p->lock_share);
      sleep.push_back(p->sleep_share);
      oncpu.push_back(p->oncpu_share);
    }
    if (p->throttle_valid) thr.push_back(p->throttled_share);
  }
  return {median_of(rq), median_of(io), median_of(lock), median_of(sleep), median_of(oncpu), median_of(thr)};
}

std::string pct(double share) { return fmt("%.0f", share * 100) + "%"; }

}  // namespace

// What on its host makes a host straggler late (see StragglerOptions): each
// kernel cause's time above the peers' median, per step, against the lag per step.
std::string StragglerDetector::host_reason(const RankSignal& r, const std::vector<const RankSignal*>& members,
                                           bool gc_explains, Verdict& v) const {
  if (!r.offcpu_valid) {
    v.decided_by = gc_explains ? "gc_excess" : "no_kernel_layer";
    return gc_explains ? "gc_pause" : "host";
  }
  v.own = shares_of(r);
  v.peers = peer_medians(r, members);
  // The lag to explain is the one behind the median peer (the shares are
  // compared with the peers' median too): on a busy node the median rank is
  // itself behind the earliest one.
  std::vector<double> peer_lags;
  for (const auto* p : members)
    if (p->pid != r.pid) peer_lags.push_back(p->lag.median_lag_s);
  v.peers_lag_s = median_of(peer_lags);
  const double step = r.lag.step_seconds;
  // (At least the lateness margin: a sliver behind peers that are late too
  // is not explained by a sliver of excess.)
  const double behind = r.lag.median_lag_s > v.peers_lag_s ? r.lag.median_lag_s - v.peers_lag_s : r.lag.median_lag_s;
  const double lag = std::min(r.lag.median_lag_s, std::max(behind, v.lag_margin_s));
  v.lag_behind_peers_s = lag;
  auto explained = [&](double own, double peer, double& excess) {
    excess = std::max(0.0, own - peer) * step;
    return lag > 0 ? excess / lag : 0.0;
  };
  v.throttled_explained = r.throttle_valid ? explained(v.own.throttled, v.peers.throttled, v.throttled_excess_s) : 0;
  v.runqueue_explained = explained(v.own.runqueue, v.peers.runqueue, v.runqueue_excess_s);
  v.io_explained = explained(v.own.io, v.peers.io, v.io_excess_s);
  const double min = opts_.min_host_cause_share;
  std::string cause;
  double cause_share = 0;
  if (r.throttle_valid && v.throttled_explained >= min) {
    cause = "throttled";
    cause_share = v.throttled_explained;
  } else if (v.runqueue_explained >= min) {
    cause = "cpu_contention";
    cause_share = v.runqueue_explained;
  } else if (v.io_explained >= min) {
    cause = "io";
    cause_share = v.io_explained;
  }
  if (gc_explains && (cause.empty() || v.gc_explained_share >= cause_share)) {
    v.decided_by = "gc_excess";
    return "gc_pause";
  }
  if (!cause.empty()) {
    v.decided_by = cause == "throttled" ? "throttled_excess" : cause == "io" ? "io_excess" : "runqueue_excess";
    return cause;
  }
  v.decided_by = "none_explains";
  return "compute";
}

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
      waits.push_back(total_wait(*r));
      if (r->gpu_valid) {
        gpu.push_back(r->gpu_nccl_ratio);
        bubble.push_back(r->bubble_ratio);
      }
    }
    const double bubble_median = median_of(bubble);
    const double wait_median = median_of(waits);
    const bool gpu_comparable = gpu.size() >= 2;
    const Spread dev = gpu_comparable ? low_outlier_threshold(gpu, opts_.min_gpu_gap, opts_.mad_k) : Spread{};

    for (const auto* r : members) {
      judged.insert(r->pid);
      Verdict v;
      v.wait_median = wait_median;
      v.wait_threshold = wait_median - opts_.min_wait_gap;
      v.gpu_median = dev.median;
      v.gpu_threshold = dev.threshold;
      // Arrival order: the others wait for the rank that issues last, whatever
      // the NCCL mode (asynchronous calls return at once; blocking ones wait).
      v.lag_margin_s = std::max(opts_.min_lag_s, opts_.min_lag_step_share * r->lag.step_seconds);
      v.late = r->lag.spread_samples >= 3 && r->lag.late_fraction >= opts_.min_late_fraction &&
               r->lag.median_lag_s >= v.lag_margin_s;
      const bool sync_explains = v.late && r->lag.late_sync_share >= opts_.min_sync_share;
      // Host: late, not because of its own synchronize waits, and it waits less
      // than its peers (they wait for it, in the call or in their next
      // synchronize). A job whose hosts run ahead without synchronizing in the
      // window (they block in a full launch queue, which is not timed) shows no
      // waits at all: then the arrival order alone decides.
      const bool waits_visible = wait_median >= opts_.min_wait_gap;
      const bool host_slow = v.late && !sync_explains && (!waits_visible || total_wait(*r) <= v.wait_threshold);
      // GPU (with the GPU layer): its NCCL kernels run least — its peers' kernels
      // wait for it. A rank whose GPU is late because it idles on pipeline
      // receives is a bubble (the bubble detector's), not a slow GPU or stream.
      const bool in_bubble = r->gpu_valid && r->bubble_ratio > bubble_median + opts_.min_gpu_gap;
      const bool gpu_slow = gpu_comparable && r->gpu_valid && r->gpu_nccl_ratio < dev.threshold && !in_bubble;
      // GC: its collector ran longer than its peers' (median, per step) by at
      // least about half of its lateness. A GC-bound rank is host time, so
      // this is asked before "host".
      const bool gc_explains = v.late && !sync_explains && gc_explains_lag(*r, members, v);
      if (gc_explains || host_slow)
        v.reason = host_reason(*r, members, gc_explains, v);
      else if (gpu_slow)
        v.reason = "gpu";
      else if (sync_explains && !in_bubble)
        v.reason = "sync";
      if (v.late && r->lag.step_seconds > 0) v.score = r->lag.median_lag_s / r->lag.step_seconds;
      if (gpu_slow && dev.median < 1)
        v.score = std::max(v.score, std::max(0.0, (1.0 - r->gpu_nccl_ratio) / std::max(1e-3, 1.0 - dev.median) - 1.0));
      Track& t = tracks_[r->pid];
      t.st.score = v.reason.empty() ? 0 : v.score;
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
        if (v.reason == "gc_pause") events.push_back(gc_pause_event(job, *r, v, members, now_unix));
      } else if (t.st.straggler && t.misses >= opts_.clear_after) {
        t.st.straggler = false;
        t.st.reason.clear();
      } else if (t.st.straggler && !v.reason.empty()) {
        t.st.reason = v.reason;
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
  const std::string who = "rank " + std::to_string(r.rank) + " of job " + job;
  const std::string late = v.late ? " issues its collectives " + fmt("%.0f", r.lag.median_lag_s * 1e3) +
                                        " ms after the earliest rank at " + fmt("%.0f", r.lag.late_fraction * 100) +
                                        "% of them" + (r.lag.step_seconds > 0 ? " (step " + fmt("%.0f", r.lag.step_seconds * 1e3) + " ms)" : "")
                                  : "";
  if (!v.decided_by.empty() && v.decided_by != "no_kernel_layer" && v.decided_by != "gc_excess")
    ev.summary = host_cause_summary(r, v);
  else if (v.reason == "host")
    ev.summary = who + late + ": its host is slow — it spends only " + fmt("%.0f", total_wait(r) * 100) +
                 "% of its time waiting in collectives and synchronize, the median rank " + fmt("%.0f", v.wait_median * 100) +
                 "%, and its own synchronize calls explain " + fmt("%.0f", r.lag.late_sync_share * 100) + "% of its lag";
  else if (v.reason == "gc_pause")
    ev.summary = who + late + ": " + gc_summary(r, v);
  else if (v.reason == "sync")
    ev.summary = who + late + ": it spent " + fmt("%.0f", r.lag.late_sync_share * 100) +
                 "% of that lag blocked in its own CUDA synchronize calls: its GPU or stream is slow, not its host";
  else
    ev.summary = who + " is slow on its GPU: its NCCL kernels run " + fmt("%.0f", r.gpu_nccl_ratio * 100) +
                 "% of the time, the median rank's " + fmt("%.0f", v.gpu_median * 100) + "% (its peers' kernels wait for it)" +
                 (v.late ? ";" + late : "; its host issues on time");
  nlohmann::json peers = nlohmann::json::array();
  for (const auto* p : members) {
    nlohmann::json peer = {{"rank", p->rank},
                           {"pid", p->pid},
                           {"collective_wait_ratio", p->coll_wait_ratio},
                           {"sync_wait_ratio", p->sync_wait_ratio},
                           {"median_lag_seconds", p->lag.median_lag_s},
                           {"late_fraction", p->lag.late_fraction}};
    if (p->gpu_valid) peer["gpu_nccl_ratio"] = p->gpu_nccl_ratio;
    if (p->gc_valid) peer["gc_seconds"] = p->gc_seconds;
    if (p->offcpu_valid) {
      peer["runqueue_share"] = p->runqueue_share;
      peer["io_share"] = p->io_share;
      peer["oncpu_share"] = p->oncpu_share;
    }
    if (p->throttle_valid) peer["throttled_share"] = p->throttled_share;
    peers.push_back(std::move(peer));
  }
  ev.evidence = {{"source", v.reason},
                 {"reason", v.reason},
                 {"pid", r.pid},
                 {"late", v.late},
                 {"late_fraction", r.lag.late_fraction},
                 {"median_lag_seconds", r.lag.median_lag_s},
                 {"mean_lag_seconds", r.lag.mean_lag_s},
                 {"lag_margin_seconds", v.lag_margin_s},
                 {"late_sync_share", r.lag.late_sync_share},
                 {"step_seconds", r.lag.step_seconds},
                 {"collectives_compared", r.lag.samples},
                 {"collectives_spread", r.lag.spread_samples},
                 {"collective_wait_ratio", r.coll_wait_ratio},
                 {"sync_wait_ratio", r.sync_wait_ratio},
                 {"wait_ratio", total_wait(r)},
                 {"median_wait_ratio", v.wait_median},
                 {"wait_ratio_threshold", v.wait_threshold},
                 {"score", v.score},
                 {"window_seconds", window_seconds_},
                 {"peers", peers}};
  if (r.gpu_valid) {
    ev.evidence["gpu_nccl_ratio"] = r.gpu_nccl_ratio;
    ev.evidence["median_gpu_nccl_ratio"] = v.gpu_median;
    ev.evidence["gpu_nccl_ratio_threshold"] = v.gpu_threshold;
  }
  if (r.gc_valid) {
    ev.evidence["gc_seconds"] = r.gc_seconds;
    ev.evidence["peers_median_gc_seconds"] = v.gc_peer_median_s;
    ev.evidence["gc_pauses"] = r.gc_pauses;
    ev.evidence["gc_worst_pause_seconds"] = r.gc_max_pause_s;
    ev.evidence["gc_explained_share"] = v.gc_explained_share;
  }
  if (!v.decided_by.empty()) {
    ev.evidence["host_cause"] = host_cause_evidence(r, v);
    nlohmann::json stealers = nlohmann::json::array();
    for (const auto& s : r.stealers)
      stealers.push_back({{"pid", s.pid}, {"comm", s.comm}, {"cgroup", s.cgroup}, {"seconds", s.seconds}, {"count", s.count}});
    ev.evidence["stealers"] = stealers;
  }
  return ev;
}

// "rank 3 of job J is late by 41 ms per step (...): 35% of its time runnable
// but waiting for a CPU (pid 812 `stress-ng` took it), peers 1%".
std::string StragglerDetector::host_cause_summary(const RankSignal& r, const Verdict& v) const {
  std::string head = "rank " + std::to_string(r.rank) + " of job " + r.job_id + " is late by " +
                     fmt("%.0f", r.lag.median_lag_s * 1e3) + " ms per step (step " + fmt("%.0f", r.lag.step_seconds * 1e3) +
                     " ms; it issues last at " + pct(r.lag.late_fraction) + " of its collectives): ";
  if (v.reason == "cpu_contention") {
    std::string who;
    if (!r.stealers.empty()) {
      const CpuStealer& top = r.stealers.front();
      who = " (pid " + std::to_string(top.pid) + " `" + top.comm + "` took " + (r.stealers.size() > 1 ? "most of it" : "it") +
            ")";
    }
    return head + pct(v.own.runqueue) + " of its time runnable but waiting for a CPU" + who + ", peers " +
           pct(v.peers.runqueue);
  }
  if (v.reason == "throttled")
    return head + "its cgroup " + (r.cgroup.empty() ? "" : r.cgroup + " ") + "was throttled " + pct(v.own.throttled) +
           " of the time (CPU quota), peers " + pct(v.peers.throttled);
  if (v.reason == "io")
    return head + pct(v.own.io) + " of its time blocked in block I/O, peers " + pct(v.peers.io);
  return head + "it computes longer on its host: on CPU " + pct(v.own.oncpu) + " vs peers " + pct(v.peers.oncpu) +
         ", no contention, throttling or I/O explains it (runqueue " + pct(v.own.runqueue) + " vs " +
         pct(v.peers.runqueue) + ")";
}

nlohmann::json StragglerDetector::host_cause_evidence(const RankSignal& r, const Verdict& v) const {
  auto shares = [](const HostShares& s) {
    return nlohmann::json{{"runqueue", s.runqueue}, {"io", s.io},       {"lock", s.lock},
                          {"sleep", s.sleep},       {"oncpu", s.oncpu}, {"throttled", s.throttled}};
  };
  nlohmann::json j = {{"decided_by", v.decided_by},
                      {"kernel_layer", r.offcpu_valid},
                      {"throttle_read", r.throttle_valid},
                      {"min_explained_share", opts_.min_host_cause_share},
                      {"lag_per_step_seconds", r.lag.median_lag_s},
                      {"peers_median_lag_seconds", v.peers_lag_s},
                      {"lag_behind_peers_seconds", v.lag_behind_peers_s},
                      {"step_seconds", r.lag.step_seconds}};
  if (!r.offcpu_valid) return j;
  j["shares"] = shares(v.own);
  j["peers_median_shares"] = shares(v.peers);
  j["throttled_share"] = r.throttled_share;
  if (!r.cgroup.empty()) j["cgroup"] = r.cgroup;
  j["excess_per_step_seconds"] = {
      {"throttled", v.throttled_excess_s}, {"runqueue", v.runqueue_excess_s}, {"io", v.io_excess_s}};
  j["explained_share"] = {{"throttled", v.throttled_explained},
                          {"cpu_contention", v.runqueue_explained},
                          {"io", v.io_explained},
                          {"gc_pause", v.gc_explained_share}};
  return j;
}

std::string StragglerDetector::gc_summary(const RankSignal& r, const Verdict& v) const {
  return "its Python garbage collector ran " + fmt("%.0f", r.gc_seconds * 1e3) + " ms in the last " +
         fmt("%.0f", r.gc_span_s > 0 ? r.gc_span_s : window_seconds_) + " s (" + std::to_string(r.gc_pauses) + " pauses, the longest up to " +
         fmt("%.1f", r.gc_max_pause_s * 1e3) + " ms), its peers' median " + fmt("%.0f", v.gc_peer_median_s * 1e3) +
         " ms: that explains " + fmt("%.0f", std::min(9.99, v.gc_explained_share) * 100) + "% of its lag";
}

// The gc_pause event that goes with a straggler flagged for its GC.
DetectedEvent StragglerDetector::gc_pause_event(const std::string& job, const RankSignal& r, const Verdict& v,
                                                const std::vector<const RankSignal*>& members,
                                                double now_unix) const {
  DetectedEvent ev;
  ev.time = now_unix;
  ev.kind = "gc_pause";
  ev.job_id = job;
  ev.rank = r.rank;
  ev.summary = "rank " + std::to_string(r.rank) + " of job " + job + " is late because of garbage collection: " +
               gc_summary(r, v);
  nlohmann::json peers = nlohmann::json::array();
  for (const auto* p : members)
    if (p->pid != r.pid && p->gc_valid)
      peers.push_back({{"rank", p->rank}, {"gc_seconds", p->gc_seconds}, {"gc_pauses", p->gc_pauses},
                       {"gc_worst_pause_seconds", p->gc_max_pause_s}});
  ev.evidence = {{"pid", r.pid},
                 {"gc_seconds", r.gc_seconds},
                 {"peers_median_gc_seconds", v.gc_peer_median_s},
                 {"gc_pauses", r.gc_pauses},
                 {"gc_worst_pause_seconds", r.gc_max_pause_s},
                 {"gc_excess_per_step_seconds", v.gc_excess_per_step_s},
                 {"median_lag_seconds", r.lag.median_lag_s},
                 {"step_seconds", r.lag.step_seconds},
                 {"gc_explained_share", v.gc_explained_share},
                 {"window_seconds", r.gc_span_s > 0 ? r.gc_span_s : window_seconds_},
                 {"peers", peers}};
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
                                                  const std::vector<InflightWait>& inflight,
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
    // The call each member's host is blocked in now (its oldest): a synchronize
    // anywhere in the process, or a collective on this communicator.
    std::map<int, const InflightWait*> blocked;
    for (const auto& f : inflight) {
      if (!c.members.count(f.pid) || (!f.sync && f.comm != c.comm)) continue;
      auto& b = blocked[f.pid];
      if (!b || f.start_ns < b->start_ns) b = &f;
    }
    std::vector<int> behind, died_in;
    bool all_blocked = !c.members.empty();
    size_t live = 0;
    uint64_t last_blocked = 0;
    for (const auto& [pid, m] : c.members) {
      const bool is_behind = static_cast<int64_t>(m.last_seq - c.newest_seq) < 0;
      if (is_behind) behind.push_back(pid);
      auto it = ranks.find(pid);
      if (it != ranks.end() && it->second.exited) {
        // One that ended cleanly (exit 0) finished its part: not who the peers wait for.
        if (!is_behind && !exited_cleanly(it->second)) died_in.push_back(pid);
        continue;
      }
      ++live;
      auto b = blocked.find(pid);
      if (b == blocked.end()) {
        all_blocked = false;
      } else {
        last_blocked = std::max(last_blocked, b->second->start_ns);
      }
    }
    // Some ranks issued the newest collective and others never did: it has
    // waited since its first issue. Every rank issued it: stuck only while all
    // of them are blocked (an idle job between phases is not a hang).
    uint64_t since = 0;
    if (live == 0)
      since = 0;  // nobody here waits: a job that ended (or died whole) is not a hang
    else if (!behind.empty() && c.newest_seq != 0)
      since = c.newest_first_arrival_ns;
    else if (all_blocked && c.newest_seq != 0)
      since = std::max(last_blocked, c.newest_arrival_ns);
    if (since != 0 && now_ns > since) h.stalled_seconds = static_cast<double>(now_ns - since) / 1e9;
    const double limit = std::max(opts_.min_stall_seconds, opts_.step_multiple * step);
    h.hung = h.stalled_seconds >= limit;
    if (h.hung) {
      // A rank that issued it and then died is as missing as one that never did.
      h.missing_pids = behind;
      h.missing_pids.insert(h.missing_pids.end(), died_in.begin(), died_in.end());
      h.none_missing = h.missing_pids.empty();
      std::set<int> missing(h.missing_pids.begin(), h.missing_pids.end());
      // One event when the hang is found, and one each time who is missing changes.
      const bool was_hung = reported_.count(c.comm) != 0;
      if (!was_hung || reported_[c.comm] != missing) {
        events.push_back(hang_event(c, h, limit, blocked, ranks, now_ns, now_unix));
        reported_[c.comm] = missing;
      }
    } else {
      reported_.erase(c.comm);
    }
    next[c.comm] = std::move(h);
  }
  // A communicator the tracker forgot (its ranks are gone) is forgotten here too.
  std::erase_if(reported_, [&](const auto& kv) { return !next.count(kv.first); });
  health_ = std::move(next);
  return events;
}

bool HangDetector::missing(int pid) const {
  for (const auto& [comm, h] : health_)
    if (std::find(h.missing_pids.begin(), h.missing_pids.end(), pid) != h.missing_pids.end()) return true;
  return false;
}

}  // namespace argus
