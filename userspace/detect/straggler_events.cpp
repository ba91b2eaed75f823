// What a straggler event says: the summary a person reads and the evidence
// behind it, from the detector's verdict (straggler_verdict.h).
#include <algorithm>
#include <cmath>
#include <string>

#include "userspace/detect/numbers.h"
#include "userspace/detect/straggler_verdict.h"

namespace argus {

using detect::fmt;

namespace {

// An event of this detector about rank r of `job`.
DetectedEvent event_about(EventKind kind, const std::string& job, const RankSignal& r, double now_unix) {
  DetectedEvent ev;
  ev.time = now_unix;
  ev.kind = kind;
  ev.job_id = job;
  ev.rank = r.rank;
  return ev;
}

std::string pct(double share) { return fmt("%.0f", share * 100) + "%"; }

// The ranks late alike with it (settle_sync_partners: pid -> rank), in rank order.
std::vector<int> alike_ranks(const std::map<int, int>& alike) {
  std::vector<int> out;
  for (const auto& [pid, rank] : alike) out.push_back(rank);
  std::sort(out.begin(), out.end());
  return out;
}

std::string alike_text(const std::map<int, int>& alike) {
  const std::vector<int> ranks = alike_ranks(alike);
  if (ranks.empty()) return "";
  std::string list;
  for (size_t i = 0; i < ranks.size(); ++i)
    list += (i == 0 ? "" : i + 1 == ranks.size() ? " or " : ", ") + std::to_string(ranks[i]);
  const bool one = ranks.size() == 1;
  return " — or that of rank " + list + (one ? ", which it meets on a communicator and is" : ", which it meets on a communicator and are") +
         " late alike in " + (one ? "its" : "their") +
         " synchronize: a GPU waiting for a slow peer's GPU holds its synchronize as a slow GPU does, and without the "
         "GPU layer nothing tells them apart";
}

// Its DataLoader workers: null before the agent has read them twice.
nlohmann::json workers_evidence(const InputWorkersView& w) {
  if (!w.valid) return nullptr;
  return {{"count", w.workers},
          {"span_seconds", w.seconds},
          {"cpu_seconds_per_second", w.cpu_per_s},
          {"read_bytes_per_second", w.read_bytes_per_s},
          {"chars_read_per_second", w.rchar_per_s}};
}

// What its workers say of the wait: none (the batch is made in the main
// thread), busy on CPU, or neither (waiting on something else: storage, a lock).
std::string workers_phrase(const InputWorkersView& own, const InputWorkersView& peers) {
  if (!own.valid) return "";
  if (own.workers == 0) return "; it has no DataLoader workers (its batches are made in its main thread)";
  std::string s = "; its " + std::to_string(own.workers) + " DataLoader worker" + (own.workers > 1 ? "s" : "") +
                  " used " + fmt("%.2f", own.cpu_per_s) + " CPU-s/s";
  if (peers.valid) s += " (peers' " + fmt("%.2f", peers.cpu_per_s) + ")";
  s += " and read " + fmt("%.1f", own.rchar_per_s / 1e6) + " MB/s";
  if (peers.valid) s += " (peers' " + fmt("%.1f", peers.rchar_per_s / 1e6) + ")";
  return s;
}

}  // namespace

DetectedEvent StragglerDetector::straggler_event(const std::string& job, const RankSignal& r, const Verdict& v,
                                                 const std::vector<const RankSignal*>& members,
                                                 const std::map<int, Verdict>& verdicts, double now_unix) const {
  DetectedEvent ev = event_about(EventKind::kStraggler, job, r, now_unix);
  const std::string who = "rank " + std::to_string(r.rank) + " of job " + job;
  // Who waits for it: a rank ahead of its peers where this one is behind.
  nlohmann::json waiting = nlohmann::json::array();
  std::string waiting_ranks;
  for (const auto* p : members) {
    if (p->pid == r.pid) continue;
    const Verdict& pv = verdicts.at(p->pid);
    std::vector<const CommLateness*> waits = pv.early_on;
    waits.insert(waits.end(), pv.waits_on.begin(), pv.waits_on.end());
    if (pv.waits_for_pid == r.pid && pv.waits_for_comm) {  // a peer gated by its GPU (settle_sync_partners)
      waiting.push_back({{"rank", p->rank}, {"pid", p->pid}, {"comm", pv.waits_for_comm->comm},
                         {"ahead_seconds", v.decisive && pv.decisive ? v.decisive->median_offset_s - pv.decisive->median_offset_s : 0.0},
                         {"late_elsewhere", pv.late}});
      waiting_ranks += (waiting_ranks.empty() ? "" : ", ") + std::to_string(p->rank);
      continue;
    }
    for (const auto* e : waits) {
      // Where it waits, this rank is behind (surely late, or simply later).
      const bool shared = std::any_of(r.lag.comms.begin(), r.lag.comms.end(),
                                      [&](const CommLateness& c) { return c.comm == e->comm && c.median_offset_s > 0; });
      if (!shared) continue;
      waiting.push_back({{"rank", p->rank}, {"pid", p->pid}, {"comm", e->comm}, {"ahead_seconds", -e->median_offset_s},
                         {"late_elsewhere", pv.late}});
      waiting_ranks += (waiting_ranks.empty() ? "" : ", ") + std::to_string(p->rank);
      break;
    }
  }
  const CommLateness* d = v.decisive;
  const std::string late =
      d ? " arrives " + fmt("%.1f", d->median_offset_s * 1e3) + " ms behind its " + std::to_string(d->peers) +
              (d->peers == 1 ? " peer" : " peers") + " on " + d->comm + " at " + fmt("%.0f", d->late_share * 100) + "% of its last " +
              std::to_string(d->bins) + " steps" +
              (r.lag.step_seconds > 0 ? " (step " + fmt("%.0f", r.lag.step_seconds * 1e3) + " ms)" : "") +
              (waiting_ranks.empty() ? "" : waiting.size() > 1 ? "; ranks " + waiting_ranks + " wait for it" : "; rank " + waiting_ranks + " waits for it")
        : "";
  if (v.decided_by != HostTest::kNone && v.decided_by != HostTest::kNoKernelLayer && v.decided_by != HostTest::kGcExcess)
    ev.summary = host_cause_summary(r, v);
  else if (v.reason == StragglerReason::kHost)
    ev.summary = who + late + ": its host is slow — it spends only " + fmt("%.0f", total_wait(r) * 100) +
                 "% of its time waiting in collectives and synchronize, the median rank " + fmt("%.0f", v.wait_median * 100) +
                 "%, and its own synchronize calls, beyond its peers', explain " +
                 fmt("%.0f", std::max(0.0, r.lag.late_sync_share) * 100) + "% of its lag";
  else if (v.reason == StragglerReason::kGcPause)
    ev.summary = who + late + ": " + gc_summary(r, v);
  else if (v.reason == StragglerReason::kSync)
    ev.summary = who + late + ": it spent " + fmt("%.0f", r.lag.late_sync_share * 100) +
                 (r.lag.sync_comm.empty() ? "% of that lag" : "% of its lag on " + r.lag.sync_comm) +
                 " blocked in its own CUDA synchronize calls: its GPU or stream is slow, not its host" +
                 alike_text(v.alike);
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
  nlohmann::json late_on = nlohmann::json::array();
  for (const auto* c : v.late_on)
    late_on.push_back({{"comm", c->comm},
                       {"group", c->label.empty() ? nlohmann::json() : nlohmann::json(c->label)},
                       {"peers", c->peers},
                       {"steps", c->bins},
                       {"late_share", c->late_share},
                       {"median_offset_seconds", c->median_offset_s},
                       {"t_score", c->t_score},
                       {"chance", c->p_late},
                       {"serial_correlation", c->serial_correlation}});
  ev.evidence = {{"source", label_of(v.reason)},
                 {"reason", label_of(v.reason)},
                 {"pid", r.pid},
                 {"late", v.late},
                 {"late_fraction", r.lag.late_fraction},
                 {"median_lag_seconds", r.lag.median_lag_s},
                 {"mean_lag_seconds", r.lag.mean_lag_s},
                 {"lag_margin_seconds", v.lag_margin_s},
                 {"late_sync_share", r.lag.late_sync_share},
                 {"late_sync_comm", r.lag.sync_comm.empty() && d ? d->comm : r.lag.sync_comm},
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
                 {"late_on", late_on},
                 {"late_alike_ranks", alike_ranks(v.alike)},
                 {"waited_for_by", waiting},
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
  if (v.decided_by != HostTest::kNone) {
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
                     " ms; behind its peers at " + pct(r.lag.late_fraction) + " of its last " +
                     std::to_string(r.lag.spread_samples) + " steps): ";
  if (v.reason == StragglerReason::kCpuContention) {
    std::string who;
    if (!r.stealers.empty()) {
      const CpuStealer& top = r.stealers.front();
      who = " (pid " + std::to_string(top.pid) + " `" + top.comm + "` took " + (r.stealers.size() > 1 ? "most of it" : "it") +
            ")";
    }
    return head + pct(v.own.runqueue) + " of its time runnable but waiting for a CPU" + who + ", peers " +
           pct(v.peers.runqueue);
  }
  if (v.reason == StragglerReason::kDataloader) {
    const int looks = r.input_polls, in = static_cast<int>(std::lround(r.input_share * looks));
    return head + "it waits for its input: its main thread was in its DataLoader's next batch at " +
           std::to_string(in) + " of the agent's " + std::to_string(looks) + " looks (" + pct(r.input_share) +
           "), its peers' at " + pct(v.input_peer_share) + ": about " + fmt("%.0f", v.input_excess_per_step_s * 1e3) +
           " ms a step, " + pct(std::min(9.99, v.input_explained_share)) + " of its lag" +
           workers_phrase(r.input_workers, v.input_peer_workers);
  }
  if (v.reason == StragglerReason::kThrottled)
    return head + "its cgroup " + (r.cgroup.empty() ? "" : r.cgroup + " ") + "was throttled " + pct(v.own.throttled) +
           " of the time (CPU quota), peers " + pct(v.peers.throttled);
  if (v.reason == StragglerReason::kIo)
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
  nlohmann::json j = {{"decided_by", label_of(v.decided_by)},
                      {"kernel_layer", r.offcpu_valid},
                      {"throttle_read", r.throttle_valid},
                      {"min_explained_share", opts_.min_host_cause_share},
                      {"lag_per_step_seconds", r.lag.median_lag_s},
                      {"peers_median_lag_seconds", v.peers_lag_s},
                      {"lag_behind_peers_seconds", v.lag_behind_peers_s},
                      {"step_seconds", r.lag.step_seconds}};
  if (r.input_valid) {
    j["input"] = {{"looks", r.input_polls},
                  {"in_dataloader_share", r.input_share},
                  {"peers_median_share", v.input_peer_share},
                  {"excess_per_step_seconds", v.input_excess_per_step_s},
                  {"explained_share", v.input_explained_share},
                  {"min_explained_share", opts_.min_input_share}};
    j["input"]["workers"] = workers_evidence(r.input_workers);
    j["input"]["peers_median_workers"] = workers_evidence(v.input_peer_workers);
  }
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
                          {"gc_pause", v.gc_explained_share},
                          {"dataloader", v.input_explained_share}};
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
  DetectedEvent ev = event_about(EventKind::kGcPause, job, r, now_unix);
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

}  // namespace argus
