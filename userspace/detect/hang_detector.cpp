#include "userspace/detect/hang_detector.h"

#include <algorithm>

#include "userspace/detect/numbers.h"

namespace argus {

using detect::fmt;

namespace {

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
      j["exit_reason"] = label_of(info.exit_reason);
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

bool exited_cleanly(const RankInfoForHang& r) {
  return r.exited && r.exit_reason == ExitReason::kExit && r.exit_code == 0;
}

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
                            {"exit_reason", label_of(info.exit_reason)},
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
               (info.exit_summary.empty() ? std::string(label_of(info.exit_reason)) + " " + std::to_string(info.exit_code)
                                       : info.exit_summary) +
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
  ev.kind = EventKind::kHang;
  ev.job_id = h.job_id;
  const int here = static_cast<int>(c.members.size());
  const std::string head = "collective #" + std::to_string(c.newest_seq) + " of job " + h.job_id + " has not moved for " +
                           fmt("%.0f", h.stalled_seconds) + " s";
  HangCause cause;
  if (!h.missing_pids.empty()) {
    auto it = ranks.find(h.missing_pids.front());
    ev.rank = it == ranks.end() ? -1 : it->second.rank;
    ev.summary = head + ": " + names + (waiting.empty() ? "" : "; its peers here: " + waiting);
    cause = never.empty() ? HangCause::kRankDied : HangCause::kMissingRank;
  } else if (const size_t left = ranks_that_left_cleanly(c, ranks); left > 0) {
    // Equal counts with peers gone (exit 0): what remains waits either for a
    // collective whose peers left before their part ran, or on work of its own.
    ev.summary = head + ": every rank here issued it; " + std::to_string(left) + " of the " + std::to_string(here) +
                 " then exited cleanly (exit 0) and the rest are blocked (" + waiting +
                 "). If those that left exited before their part of the collective ran (no synchronize or "
                 "ncclCommDestroy before exit), the rest wait forever; if the rest are running work of their "
                 "own (a final evaluation or save), this clears when it ends";
    cause = HangCause::kPeersExited;
  } else if (c.nranks > here) {
    ev.summary = head + ": all " + std::to_string(here) + " ranks on this node issued it and are blocked (" + waiting +
                 "); none here is missing: a rank on another node never issued it, or the collective itself is stuck";
    cause = HangCause::kNoLocalRankMissing;
  } else {
    ev.summary = head + ": every rank issued it and none finished (" + waiting +
                 "); no rank is missing: the collective itself is stuck (a dead link, or a GPU stuck in a kernel)";
    cause = HangCause::kCollectiveStuck;
  }
  ev.evidence = {{"comm", c.comm},
                 {"newest_seq", c.newest_seq},
                 {"stalled_seconds", h.stalled_seconds},
                 {"stall_threshold_seconds", limit},
                 {"ranks_here", here},
                 {"comm_ranks", c.nranks},
                 {"cause", label_of(cause)},
                 {"missing", missing_json},
                 {"ranks", rank_states(c, blocked, ranks, now_ns)}};
  return ev;
}

}  // namespace

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
