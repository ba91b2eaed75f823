#include "userspace/detect/hang_detector.h"

#include <algorithm>

#include "userspace/detect/numbers.h"
#include "userspace/model/snapshot.h"

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

// A synchronize waits for what its process enqueued: it is charged to this
// communicator when the process's newest operation here still waits for a
// member of this node, or when it is the process's newest operation on any
// communicator (its GPU part may not have run). Not to every communicator of
// the process.
bool charged_here(const CommView&, const CommMember& m, const std::map<int, uint64_t>& latest_arrival) {
  if (m.pending) return true;
  auto it = latest_arrival.find(m.pid);
  return it != latest_arrival.end() && m.last_arrival_ns != 0 && m.last_arrival_ns == it->second;
}

bool behind_newest(const CommView& c, const CommMember& m) {
  return c.newest_seq != 0 && static_cast<int64_t>(m.last_seq - c.newest_seq) < 0;
}

// A live rank in no collective or CUDA call is busy when the kernel layer sees it on
// CPU or in I/O (a checkpoint, an evaluation), idle otherwise.
constexpr double kBusyShare = 0.2;
bool busy(const RankInfoForHang& r) { return r.offcpu_valid && r.oncpu_share + r.io_share >= kBusyShare; }

// Where a rank is now: the call it is blocked in (any communicator, any
// synchronize), or null.
const InflightWait* call_of(int pid, const std::vector<InflightWait>& inflight) {
  const InflightWait* oldest = nullptr;
  for (const auto& f : inflight)
    if (f.pid == pid && (!oldest || f.start_ns < oldest->start_ns)) oldest = &f;
  return oldest;
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

// Where a missing rank that is alive is: "in_collective", "in_synchronize",
// "busy" or "idle" (in no call), with the phrase the summary uses.
std::pair<std::string, std::string> whereabouts(int pid, const RankInfoForHang& info,
                                                const std::vector<InflightWait>& inflight, nlohmann::json& j) {
  if (const InflightWait* w = call_of(pid, inflight)) {
    j["call"] = w->api;
    if (!w->sync) {
      j["comm"] = w->comm;
      return {"in_collective", "it waits in " + w->api + " on communicator " + w->comm};
    }
    return {"in_synchronize", "it waits in " + w->api};
  }
  if (info.offcpu_valid) {
    j["oncpu_share"] = info.oncpu_share;
    j["io_share"] = info.io_share;
  }
  if (busy(info))
    return {"busy", "it is alive and busy outside NCCL and CUDA (on CPU " + fmt("%.0f", info.oncpu_share * 100) +
                        "%, in I/O " + fmt("%.0f", info.io_share * 100) +
                        "% of the time): a checkpoint or an evaluation? see its Python stack"};
  return {"idle", std::string("it is alive and in no collective or CUDA call") + (info.offcpu_valid ? ", idle" : "")};
}

DetectedEvent hang_event(const CommView& c, const CommHealth& h, double limit,
                         const std::map<int, const InflightWait*>& blocked, const std::vector<InflightWait>& inflight,
                         const std::map<int, RankInfoForHang>& ranks, uint64_t now_ns, double now_unix) {
  nlohmann::json missing_json = nlohmann::json::array();
  // Two ways to be missing: never issued the newest collective, or issued it
  // and died (its GPU's part never ran, so its peers wait forever).
  std::string never, died_in;
  bool all_busy = !h.missing_pids.empty();
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
    if (!info.exited) {
      auto [state, phrase] = whereabouts(pid, info, inflight, missing_json.back());
      missing_json.back()["state"] = state;
      names += " (" + phrase + ")";
      all_busy = all_busy && state == "busy";
    } else {
      all_busy = false;
    }
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
  // A framework's group is named as users know it: "tp (ranks 4-5)".
  const std::vector<int> group_ranks = member_ranks(c, ranks);
  const std::string group = c.label.empty() ? "" : group_phrase(c.label, group_ranks, c.nranks);
  const std::string on = group.empty() ? "" : " on " + group;
  const std::string head = "collective #" + std::to_string(c.newest_seq) + on + " of job " + h.job_id + " has not moved for " +
                           fmt("%.0f", h.stalled_seconds) + " s";
  HangCause cause;
  if (!h.missing_pids.empty()) {
    auto it = ranks.find(h.missing_pids.front());
    ev.rank = it == ranks.end() ? -1 : it->second.rank;
    ev.summary = head + ": " + names + (waiting.empty() ? "" : "; its peers here: " + waiting);
    cause = never.empty() ? HangCause::kRankDied : all_busy ? HangCause::kRankBusy : HangCause::kMissingRank;
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
                 {"group", c.label},
                 {"group_ranks", group_ranks},
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
                                                  double now_unix, const std::vector<P2pPending>& p2p) {
  std::vector<DetectedEvent> events;
  std::map<std::string, CommHealth> next;
  // Each process's newest arrival on any communicator: a synchronize waits for
  // what the process enqueued last.
  std::map<int, uint64_t> latest_arrival;
  for (const auto& c : comms)
    for (const auto& [pid, m] : c.members) latest_arrival[pid] = std::max(latest_arrival[pid], m.last_arrival_ns);
  // Processes with an operation pending on a communicator some rank here never
  // reached: whatever else they wait on waits on that (a victim, not a hang of its own).
  std::set<int> waits_on_missing;
  for (const auto& c : comms) {
    bool someone_behind = false;
    for (const auto& [pid, m] : c.members) {
      auto it = ranks.find(pid);
      someone_behind |= behind_newest(c, m) && it != ranks.end() && !it->second.exited;
    }
    if (!someone_behind) continue;
    for (const auto& [pid, m] : c.members)
      if (m.pending) waits_on_missing.insert(pid);
  }
  // ... or a send or receive still unmatched (a pipeline peer that never came:
  // the point-to-point hang below says so).
  for (const auto& w : p2p) waits_on_missing.insert(w.waiter_pid);
  // And whoever shares a communicator with such a process waits on it too (a
  // data-parallel all-reduce gated by a tensor-parallel peer whose GPU waits
  // for a pipeline receive): the wait spreads along the communicators.
  for (bool grew = !waits_on_missing.empty(); grew;) {
    grew = false;
    for (const auto& c : comms) {
      const bool touched = std::any_of(c.members.begin(), c.members.end(),
                                       [&](const auto& kv) { return waits_on_missing.count(kv.first) != 0; });
      if (!touched) continue;
      for (const auto& [pid, m] : c.members) grew = waits_on_missing.insert(pid).second || grew;
    }
  }
  struct HungComm {
    const CommView* comm;
    CommHealth health;
    std::map<int, const InflightWait*> blocked;
    double limit;
  };
  std::vector<HungComm> hung;
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
    // The call each member's host is blocked in now (its oldest): a collective
    // on this communicator, or a synchronize charged to it (see charged_here).
    std::map<int, const InflightWait*> blocked;
    for (const auto& f : inflight) {
      auto m = c.members.find(f.pid);
      if (m == c.members.end()) continue;
      if (f.sync ? !charged_here(c, m->second, latest_arrival) : f.comm != c.comm) continue;
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
    else if (all_blocked && c.newest_seq != 0 &&
             std::none_of(c.members.begin(), c.members.end(), [&](const auto& kv) { return waits_on_missing.count(kv.first) != 0; }))
      since = std::max(last_blocked, c.newest_arrival_ns);
    // Everyone issued it and waits, but a member's GPU still completes work:
    // the collective is slow, not stuck (its data moves); the stall counts
    // from the last sign of it.
    if (since != 0 && behind.empty()) {
      uint64_t gpu_latest = 0;
      for (const auto& [pid, m] : c.members)
        if (auto it = ranks.find(pid); it != ranks.end() && !it->second.exited)
          gpu_latest = std::max(gpu_latest, static_cast<uint64_t>(it->second.gpu_last_activity_ns));
      if (gpu_latest > since) since = gpu_latest;
    }
    if (since != 0 && now_ns > since) h.stalled_seconds = static_cast<double>(now_ns - since) / 1e9;
    const double limit = limit_for(h.job_id, step);
    h.hung = h.stalled_seconds >= limit;
    if (h.hung) {
      // A rank that issued it and then died is as missing as one that never did.
      h.missing_pids = behind;
      h.missing_pids.insert(h.missing_pids.end(), died_in.begin(), died_in.end());
      h.none_missing = h.missing_pids.empty();
      hung.push_back({&c, h, std::move(blocked), limit});
    } else {
      reported_.erase(c.comm);
    }
    if (auto before = health_.find(c.comm); before != health_.end()) remember_recovery(before->second, h);
    next[c.comm] = std::move(h);
  }
  // A chain of waits has one root. A rank missing here that is itself blocked
  // in a call while it waits on a missing rank elsewhere (its tensor-parallel
  // all-reduce waits for the rank that hung) is a link of the chain: the
  // root's events name it, with the state of every rank. Where no missing rank
  // of the job is free of such a wait (a cycle, a GPU hung inside a call),
  // every communicator says what it sees.
  std::set<int> links;
  for (int pid : waits_on_missing)
    if (auto it = ranks.find(pid); it != ranks.end() && !it->second.exited && call_of(pid, inflight) != nullptr)
      links.insert(pid);
  auto held = [&](int pid) { return links.count(pid) != 0; };
  std::set<std::string> jobs_with_root;
  for (const auto& hc : hung)
    if (std::any_of(hc.health.missing_pids.begin(), hc.health.missing_pids.end(), [&](int pid) { return !held(pid); }))
      jobs_with_root.insert(hc.health.job_id);
  chain_links_.clear();
  for (int pid : links)
    if (auto it = ranks.find(pid); it != ranks.end() && jobs_with_root.count(it->second.job_id)) chain_links_.insert(pid);
  for (const auto& hc : hung) {
    const auto& missing_pids = hc.health.missing_pids;
    if (!missing_pids.empty() && jobs_with_root.count(hc.health.job_id) &&
        std::all_of(missing_pids.begin(), missing_pids.end(), held)) {
      reported_.erase(hc.comm->comm);
      continue;
    }
    // One event when the hang is found, and one each time who is missing changes.
    const std::set<int> missing(missing_pids.begin(), missing_pids.end());
    auto was = reported_.find(hc.comm->comm);
    if (was == reported_.end() || was->second != missing) {
      events.push_back(hang_event(*hc.comm, hc.health, hc.limit, hc.blocked, inflight, ranks, now_ns, now_unix));
      reported_[hc.comm->comm] = missing;
    }
  }
  // A communicator the tracker forgot (its ranks are gone) is forgotten here too.
  std::erase_if(reported_, [&](const auto& kv) { return !next.count(kv.first); });
  health_ = std::move(next);
  for (auto& ev : evaluate_p2p(comms, p2p, ranks, inflight, now_ns, now_unix, links, jobs_with_root))
    events.push_back(std::move(ev));
  for (auto& ev : evaluate_unheard(ranks, inflight, now_ns, now_unix)) events.push_back(std::move(ev));
  return events;
}

// A job none of whose ranks here made a call the agent saw (it started while
// they hung): the calls in flight it sees on their stacks (waits that began
// before the agent) say who waits; a rank inside no NCCL or CUDA call is the
// one they wait for.
std::vector<DetectedEvent> HangDetector::evaluate_unheard(const std::map<int, RankInfoForHang>& ranks,
                                                          const std::vector<InflightWait>& inflight, uint64_t now_ns,
                                                          double now_unix) {
  std::vector<DetectedEvent> events;
  std::map<std::string, std::vector<int>> jobs;
  std::set<std::string> heard_jobs;
  for (const auto& [pid, r] : ranks) {
    if (r.exited || r.job_id.empty()) continue;
    if (r.heard) heard_jobs.insert(r.job_id);
    jobs[r.job_id].push_back(pid);
  }
  std::set<std::string> still;
  for (const auto& [job, pids] : jobs) {
    if (heard_jobs.count(job) || pids.size() < 2) continue;
    std::vector<int> waiting, missing;
    uint64_t since = 0;
    double step = 0;
    for (int pid : pids) {
      step = std::max(step, ranks.at(pid).step_seconds);
      const InflightWait* w = call_of(pid, inflight);
      if (w && w->before_agent) {
        waiting.push_back(pid);
        since = std::max(since, w->start_ns);
      } else {
        missing.push_back(pid);
      }
    }
    if (waiting.empty() || now_ns <= since) continue;
    const double stalled = static_cast<double>(now_ns - since) / 1e9;
    if (stalled < limit_for(job, step)) continue;
    still.insert(job);
    if (unheard_reported_.count(job)) continue;
    unheard_reported_.insert(job);
    DetectedEvent ev;
    ev.time = now_unix;
    ev.kind = EventKind::kHang;
    ev.job_id = job;
    nlohmann::json missing_json = nlohmann::json::array(), waiting_json = nlohmann::json::array();
    std::string names;
    for (int pid : missing) {
      const RankInfoForHang& info = ranks.at(pid);
      nlohmann::json j = {{"pid", pid}, {"rank", info.rank}};
      auto [state, phrase] = whereabouts(pid, info, inflight, j);
      j["state"] = state;
      missing_json.push_back(std::move(j));
      names += (names.empty() ? "" : ", ") + ("rank " + std::to_string(info.rank) + " (" + phrase + ")");
    }
    for (int pid : waiting)
      waiting_json.push_back({{"pid", pid}, {"rank", ranks.at(pid).rank}, {"call", call_of(pid, inflight)->api}});
    const std::string head = "job " + job + ": " + std::to_string(waiting.size()) + " of its " +
                             std::to_string(pids.size()) + " ranks here have been blocked inside NCCL or CUDA since " +
                             "before the agent started (seen for " + fmt("%.0f", stalled) + " s; no call returned)";
    HangCause cause;
    if (!missing.empty()) {
      ev.rank = ranks.at(missing.front()).rank;
      ev.summary = head + ": they wait for " + names;
      cause = HangCause::kMissingRank;
    } else {
      ev.rank = -1;
      ev.summary = head + ": every rank here waits; a rank on another node, or the collective itself, holds them";
      cause = HangCause::kNoLocalRankMissing;
    }
    ev.evidence = {{"cause", label_of(cause)},
                   {"seen_from", "stacks"},
                   {"stalled_seconds", stalled},
                   {"stall_threshold_seconds", limit_for(job, step)},
                   {"missing", missing_json},
                   {"waiting", waiting_json}};
    events.push_back(std::move(ev));
  }
  std::erase_if(unheard_reported_, [&](const std::string& j) { return !still.count(j); });
  return events;
}

// The stall that makes a hang: the flag, a few steps, or half again the
// longest stall this job has shown and recovered from (a checkpoint on one
// rank, an evaluation), whichever is longest.
double HangDetector::limit_for(const std::string& job, double step) const {
  double limit = std::max(opts_.min_stall_seconds, opts_.step_multiple * step);
  if (auto it = longest_recovered_.find(job); it != longest_recovered_.end())
    limit = std::max(limit, opts_.healthy_stall_multiple * it->second);
  return limit;
}

// A stall that ended before it was called a hang was healthy: remember how long it was.
void HangDetector::remember_recovery(const CommHealth& before, const CommHealth& now) {
  const bool recovered = before.stalled_seconds > 0 && !before.hung &&
                         (now.newest_seq != before.newest_seq || now.stalled_seconds < before.stalled_seconds);
  if (!recovered || before.job_id.empty()) return;
  double& longest = longest_recovered_[before.job_id];
  longest = std::max(longest, before.stalled_seconds);
}

bool HangDetector::missing(int pid) const {
  if (chain_links_.count(pid)) return false;  // held up by the rank that is: a link of its chain
  for (const auto& [comm, h] : health_)
    if (std::find(h.missing_pids.begin(), h.missing_pids.end(), pid) != h.missing_pids.end()) return true;
  return false;
}

}  // namespace argus

namespace argus {

// A point-to-point operation (a pipeline stage's receive, an all-to-all's
// part) that waited longer than the limit for its other side: a hang that
// names both, the rank that never sent (or never received) and the one that waits.
std::vector<DetectedEvent> HangDetector::evaluate_p2p(const std::vector<CommView>& comms,
                                                      const std::vector<P2pPending>& p2p,
                                                      const std::map<int, RankInfoForHang>& ranks,
                                                      const std::vector<InflightWait>& inflight, uint64_t now_ns,
                                                      double now_unix, const std::set<int>& links,
                                                      std::set<std::string> jobs_with_root) {
  // The operations waited on past the limit, with the pid of their other side
  // when it is on this node (by its rank in the communicator).
  struct Overdue {
    const P2pPending* wait;
    const RankInfoForHang* waiter;
    double waited;
    int peer_pid = 0;
    int comm_ranks = 0;
  };
  std::vector<Overdue> overdue;
  for (const auto& w : p2p) {
    auto waiter = ranks.find(w.waiter_pid);
    if (waiter == ranks.end() || waiter->second.exited || now_ns <= w.since_ns) continue;
    Overdue o{&w, &waiter->second, static_cast<double>(now_ns - w.since_ns) / 1e9};
    if (o.waited < limit_for(waiter->second.job_id, waiter->second.step_seconds)) continue;
    for (const auto& c : comms)
      if (c.comm == w.comm) {
        o.comm_ranks = c.nranks;
        for (const auto& [pid, m] : c.members)
          if (m.comm_rank == w.peer_rank) o.peer_pid = pid;
      }
    if (o.peer_pid == 0) continue;  // its other side is on another node: not seen here, not judged here
    if (!links.count(o.peer_pid)) jobs_with_root.insert(o.waiter->job_id);
    overdue.push_back(o);
  }
  std::vector<DetectedEvent> events;
  std::set<std::string> still;
  for (const auto& o : overdue) {
    const P2pPending& w = *o.wait;
    const double waited = o.waited;
    const int peer_pid = o.peer_pid, comm_ranks = o.comm_ranks;
    // A peer that is a link of a chain whose root is named elsewhere (it sits
    // in its synchronize while its GPU waits for the rank that hung).
    if (links.count(peer_pid) && jobs_with_root.count(o.waiter->job_id)) continue;
    const std::string key = w.comm + ":" + std::to_string(w.waiter_pid) + (w.waiter_sends ? ">" : "<") +
                            std::to_string(w.peer_rank);
    still.insert(key);
    if (p2p_reported_.count(key)) continue;
    p2p_reported_.insert(key);
    const RankInfoForHang& me = *o.waiter;
    auto peer = ranks.find(peer_pid);
    nlohmann::json peer_json = {{"comm_rank", w.peer_rank}, {"here", peer != ranks.end()}};
    std::string peer_phrase = "rank " + std::to_string(w.peer_rank) + " of communicator " + w.comm;
    if (peer != ranks.end()) {
      peer_json["rank"] = peer->second.rank;
      peer_json["pid"] = peer_pid;
      peer_phrase = "rank " + std::to_string(peer->second.rank);
      if (peer->second.exited) {
        peer_json["state"] = "exited";
        peer_phrase += " (it died: " + (peer->second.exit_summary.empty() ? std::string(label_of(peer->second.exit_reason))
                                                                          : peer->second.exit_summary) + ")";
      } else {
        auto [state, phrase] = whereabouts(peer_pid, peer->second, inflight, peer_json);
        peer_json["state"] = state;
        peer_phrase += " (" + phrase + ")";
      }
    }
    DetectedEvent ev;
    ev.time = now_unix;
    ev.kind = EventKind::kHang;
    ev.job_id = me.job_id;
    ev.rank = peer != ranks.end() ? peer->second.rank : me.rank;
    const char* what = w.waiter_sends ? "send" : "receive";
    ev.summary = "rank " + std::to_string(me.rank) + " of job " + me.job_id + " has waited " + fmt("%.0f", waited) +
                 " s for its point-to-point " + what + (w.waiter_sends ? " to " : " from ") + peer_phrase + ": " +
                 (w.waiter_sends ? "it never received it" : "it never sent it");
    const InflightWait* my_call = call_of(w.waiter_pid, inflight);
    ev.evidence = {{"comm", w.comm},
                   {"cause", label_of(HangCause::kPeerNeverSent)},
                   {"waiting", {{"rank", me.rank}, {"pid", w.waiter_pid}, {"posted", w.waiter_sends ? "send" : "recv"},
                                {"operations_unmatched", w.posted}, {"call", my_call ? my_call->api : ""}}},
                   {"missing", peer_json},
                   {"stalled_seconds", waited},
                   {"stall_threshold_seconds", limit_for(me.job_id, me.step_seconds)},
                   {"comm_ranks", comm_ranks}};
    events.push_back(std::move(ev));
  }
  std::erase_if(p2p_reported_, [&](const std::string& k) { return !still.count(k); });
  return events;
}

}  // namespace argus
