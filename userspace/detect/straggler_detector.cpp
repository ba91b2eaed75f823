#include "userspace/detect/straggler_detector.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "userspace/detect/numbers.h"
#include "userspace/detect/straggler_verdict.h"

namespace argus {

using detect::fmt;
using detect::median_of;

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

// A communicator a and b share that `fits` (a's view of it), a point-to-point
// one first.
template <typename Fits>
const CommLateness* shared_comm(const RankSignal& a, const RankSignal& b, Fits fits) {
  const CommLateness* any = nullptr;
  for (const auto& x : a.lag.comms)
    if (fits(x))
      for (const auto& y : b.lag.comms)
        if (y.comm == x.comm) {
          if (is_p2p(x)) return &x;
          if (!any) any = &x;
        }
  return any;
}

// Whether two ranks meet on a collective communicator (replicas of one
// pipeline stage: its tensor- and data-parallel peers).
bool shares_a_collective(const RankSignal& a, const RankSignal& b) {
  return shared_comm(a, b, [](const CommLateness& c) { return !is_p2p(c); }) != nullptr;
}

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

// Whether the time its main thread spends in its DataLoader's __next__ (the
// share of the agent's looks, as time per step) above its peers' median
// explains at least min_input_share of its lag: its input cannot keep up.
namespace {

// The peers' DataLoader workers, each figure their median: what this rank's
// workers are compared with in the evidence (they do not decide the reason:
// the main thread's waits do).
InputWorkersView peer_workers(const RankSignal& r, const std::vector<const RankSignal*>& members) {
  std::vector<double> count, span, cpu, rchar, read;
  for (const auto* p : members) {
    if (p->pid == r.pid || !p->input_valid || !p->input_workers.valid) continue;
    count.push_back(p->input_workers.workers);
    span.push_back(p->input_workers.seconds);
    cpu.push_back(p->input_workers.cpu_per_s);
    rchar.push_back(p->input_workers.rchar_per_s);
    read.push_back(p->input_workers.read_bytes_per_s);
  }
  InputWorkersView out;
  if (count.empty()) return out;
  out.valid = true;
  out.workers = static_cast<int>(std::lround(median_of(count)));
  out.seconds = median_of(span);
  out.cpu_per_s = median_of(cpu);
  out.rchar_per_s = median_of(rchar);
  out.read_bytes_per_s = median_of(read);
  return out;
}

}  // namespace

bool StragglerDetector::input_explains_lag(const RankSignal& r, const std::vector<const RankSignal*>& members,
                                           Verdict& v) const {
  if (!r.input_valid || r.lag.step_seconds <= 0 || r.lag.median_lag_s <= 0) return false;
  std::vector<double> peers;
  for (const auto* p : members)
    if (p->pid != r.pid && p->input_valid) peers.push_back(p->input_share);
  if (peers.empty()) return false;
  v.input_peer_share = median_of(peers);
  v.input_peer_workers = peer_workers(r, members);
  // A look or two in its DataLoader is chance (every rank calls it once a
  // step): the share must rest on several looks and stand clear of its peers'.
  const double in = r.input_share * r.input_polls;
  if (in < opts_.min_input_looks || r.input_share < 2 * v.input_peer_share + opts_.min_input_share_gap) return false;
  v.input_excess_per_step_s = std::max(0.0, r.input_share - v.input_peer_share) * r.lag.step_seconds;
  v.input_explained_share = v.input_excess_per_step_s / r.lag.median_lag_s;
  return v.input_explained_share >= opts_.min_input_share;
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

}  // namespace

// What on its host makes a host straggler late (see StragglerOptions): each
// kernel cause's time above the peers' median, per step, against the lag per step.
StragglerReason StragglerDetector::host_reason(const RankSignal& r, const std::vector<const RankSignal*>& members,
                                               bool gc_explains, Verdict& v) const {
  if (r.offcpu_valid) {
    v.own = shares_of(r);
    v.peers = peer_medians(r, members);
  }
  // Its input comes first where it explains more than GC does: a rank that
  // waits for its next batch is off CPU, or busy making it, not computing.
  if (input_explains_lag(r, members, v) && (!gc_explains || v.input_explained_share >= v.gc_explained_share)) {
    v.decided_by = HostTest::kInputExcess;
    return StragglerReason::kDataloader;
  }
  if (!r.offcpu_valid) {
    v.decided_by = gc_explains ? HostTest::kGcExcess : HostTest::kNoKernelLayer;
    return gc_explains ? StragglerReason::kGcPause : StragglerReason::kHost;
  }
  // The lag to explain is the one behind the median peer (the shares are
  // compared with the peers' median too).
  std::vector<double> peer_lags;
  for (const auto* p : members)
    if (p->pid != r.pid) peer_lags.push_back(p->lag.median_lag_s);
  v.peers_lag_s = median_of(peer_lags);
  const double step = r.lag.step_seconds;
  // Its lag is already behind its peers' median arrival (comms/arrival_order.h);
  // at least the lateness margin: a sliver of lag is not explained by a sliver of excess.
  const double lag = std::max(r.lag.median_lag_s, v.lag_margin_s);
  v.lag_behind_peers_s = lag;
  auto explained = [&](double own, double peer, double& excess) {
    excess = std::max(0.0, own - peer) * step;
    return lag > 0 ? excess / lag : 0.0;
  };
  v.throttled_explained = r.throttle_valid ? explained(v.own.throttled, v.peers.throttled, v.throttled_excess_s) : 0;
  v.runqueue_explained = explained(v.own.runqueue, v.peers.runqueue, v.runqueue_excess_s);
  v.io_explained = explained(v.own.io, v.peers.io, v.io_excess_s);
  const double min = opts_.min_host_cause_share;
  StragglerReason cause = StragglerReason::kNone;
  HostTest test = HostTest::kNone;
  double cause_share = 0;
  if (r.throttle_valid && v.throttled_explained >= min) {
    cause = StragglerReason::kThrottled;
    test = HostTest::kThrottledExcess;
    cause_share = v.throttled_explained;
  } else if (v.runqueue_explained >= min) {
    cause = StragglerReason::kCpuContention;
    test = HostTest::kRunqueueExcess;
    cause_share = v.runqueue_explained;
  } else if (v.io_explained >= min) {
    cause = StragglerReason::kIo;
    test = HostTest::kIoExcess;
    cause_share = v.io_explained;
  }
  if (gc_explains && (cause == StragglerReason::kNone || v.gc_explained_share >= cause_share)) {
    v.decided_by = HostTest::kGcExcess;
    return StragglerReason::kGcPause;
  }
  if (cause != StragglerReason::kNone) {
    v.decided_by = test;
    return cause;
  }
  v.decided_by = HostTest::kNoneExplains;
  return StragglerReason::kCompute;
}

// Where the rank is surely behind its peers (late) and surely ahead of them
// (early: it waits for them there), by the tests of StragglerOptions.
void StragglerDetector::judge_arrivals(const RankSignal& r, Verdict& v) const {
  const double p_max =
      std::clamp(opts_.max_p_late * r.lag.step_seconds / 0.1, opts_.max_p_late, std::max(opts_.max_p_late, opts_.max_p_late_long));
  for (const auto& c : r.lag.comms) {
    // The margin is per operation: a rank behind by 40 ms a step over 8
    // blocking tensor-parallel calls is 5 ms behind at each.
    const double margin = std::max(opts_.min_lag_s, v.lag_margin_s / std::max(1.0, c.ops_per_step));
    if (c.p_late <= p_max && c.t_score >= opts_.min_t_score && c.median_offset_s >= margin) {
      v.late_on.push_back(&c);
      if (!v.decisive || c.p_late < v.decisive->p_late ||
          (c.p_late == v.decisive->p_late && c.median_offset_s > v.decisive->median_offset_s))
        v.decisive = &c;
    }
    // (No margin: a victim's wait per operation can be small, and the tests are strict.)
    if (c.p_early <= opts_.max_p_early && c.t_score <= -opts_.min_early_t_score && -c.median_offset_s >= opts_.min_lag_s)
      v.early_on.push_back(&c);
  }
  v.late = !v.late_on.empty();
  // Behind on one communicator only because it waited ahead of its peers on
  // another (blocking calls, or a synchronize gated by the other group's
  // collective): a victim of whoever is late there.
  v.victim = v.late && !v.early_on.empty();
}

// One evaluation of one job's ranks on this node: the job's medians, each
// rank's verdict, and the questions the phases of evaluate() ask of them.
struct StragglerDetector::JobPass {
  JobPass(const StragglerOptions& o, const std::vector<const RankSignal*>& m, std::map<int, RankSignal*>& b)
      : opts(o), members(m), by_pid(b) {}

  const StragglerOptions& opts;
  const std::vector<const RankSignal*>& members;
  std::map<int, RankSignal*>& by_pid;  // the evaluation's copies (a rank's lag is restated from where it is late)
  std::map<int, Verdict> verdicts;
  bool waits_visible = false;   // hosts wait at all (in collectives or synchronize): their waits compare
  double bubble_median = 0;     // of the ranks with the GPU layer
  bool gpu_comparable = false;  // two ranks or more have the GPU layer
  Spread dev;                   // their NCCL-kernel shares

  // A rank whose host waits less than its peers' computes longer itself.
  bool host_busy(const RankSignal& r) const {
    return waits_visible && total_wait(r) <= verdicts.at(r.pid).wait_threshold;
  }
  // Its whole stage busy: it and every replica (the ranks it meets on a collective).
  bool stage_busy(const RankSignal& r) const {
    if (!host_busy(r)) return false;
    for (const auto* q : members)
      if (q->pid != r.pid && shares_a_collective(r, *q) && !host_busy(*q)) return false;
    return true;
  }
  // Its GPU late because it idles on pipeline receives: in a bubble (the
  // bubble detector's), not on a slow GPU or stream.
  bool in_bubble(const RankSignal& r) const { return r.gpu_valid && r.bubble_ratio > bubble_median + opts.min_gpu_gap; }
  // Sync: it spent its lag in its own synchronize calls, more than its peers
  // spent before their arrivals (every rank synchronizes; only the excess
  // explains a lag).
  bool sync_explains(const RankSignal& r) const { return r.lag.late_sync_share >= opts.min_sync_share && !in_bubble(r); }
  // Whether a peer is surely early where r is surely late (it waits for r there).
  bool waited_for(const RankSignal& r) const {
    for (const auto* c : verdicts.at(r.pid).late_on)
      for (const auto* q : members)
        if (q->pid != r.pid)
          for (const auto* e : verdicts.at(q->pid).early_on)
            if (e->comm == c->comm) return true;
    return false;
  }
  static bool late_there(const Verdict& v, const CommLateness& c) {
    return std::any_of(v.late_on.begin(), v.late_on.end(), [&](const CommLateness* x) { return x->comm == c.comm; });
  }
  static bool early_on_p2p(const Verdict& v) {
    return std::any_of(v.early_on.begin(), v.early_on.end(), [](const CommLateness* c) { return is_p2p(*c); });
  }
  static bool late_on_collective(const Verdict& v) {
    return std::any_of(v.late_on.begin(), v.late_on.end(), [](const CommLateness* c) { return !is_p2p(*c); });
  }
  static bool member_of(const RankSignal& r, const std::string& comm) {
    return std::any_of(r.lag.comms.begin(), r.lag.comms.end(), [&](const CommLateness& x) { return x.comm == comm; });
  }
  // Whether a replica's pipeline partner is late on a collective (it waits
  // for a culprit then, whatever the schedule).
  bool partner_late(const RankSignal& q, const CommLateness& pair) const {
    for (const auto* o : members) {
      if (o->pid == q.pid) continue;
      if (member_of(*o, pair.comm) && late_on_collective(verdicts.at(o->pid))) return true;
    }
    return false;
  }
  // Of r's replicas' point-to-point pairs most like c (in operations per
  // step), the one that stands latest (or earliest, leaving out replicas
  // whose partner is late on a collective).
  const CommLateness* replica_pair(const RankSignal& r, const CommLateness& c, bool latest) const {
    const CommLateness* pick = nullptr;
    for (const auto* q : members) {
      if (q->pid == r.pid || !shares_a_collective(r, *q)) continue;
      const CommLateness* like = nullptr;
      for (const auto& x : q->lag.comms)
        if (is_p2p(x) && (!like || std::fabs(x.ops_per_step - c.ops_per_step) < std::fabs(like->ops_per_step - c.ops_per_step)))
          like = &x;
      if (like && !latest && partner_late(*q, *like)) continue;
      if (like && (!pick || (latest ? like->median_offset_s > pick->median_offset_s
                                     : like->median_offset_s < pick->median_offset_s)))
        pick = like;
    }
    return pick;
  }
  // Whether c's offset stands beyond the replica's (sign +1: later, -1:
  // earlier) by at least `share` of it, and by t standard errors.
  static bool beyond(const CommLateness& c, const CommLateness& replica, double sign, double share, double t) {
    const double own = sign * (c.median_offset_s - replica.median_offset_s);
    const double se = std::hypot(c.offset_se_s, replica.offset_se_s);  // of that difference
    return own >= share * sign * c.median_offset_s && own >= t * se && own > 0;
  }
};

// The job's medians, and where each rank is surely behind and ahead of its peers.
StragglerDetector::JobPass StragglerDetector::open_job(const std::vector<const RankSignal*>& members,
                                                       std::map<int, RankSignal*>& by_pid) const {
  JobPass p(opts_, members, by_pid);
  std::vector<double> waits, gpu, bubble;
  for (const auto* r : members) {
    waits.push_back(total_wait(*r));
    if (r->gpu_valid) {
      gpu.push_back(r->gpu_nccl_ratio);
      bubble.push_back(r->bubble_ratio);
    }
  }
  p.bubble_median = median_of(bubble);
  const double wait_median = median_of(waits);
  p.gpu_comparable = gpu.size() >= 2;
  if (p.gpu_comparable) p.dev = low_outlier_threshold(gpu, opts_.min_gpu_gap, opts_.mad_k);
  // (A rank whose host waits less than its peers' computes longer itself:
  // waiting for someone else does not explain its lateness away. Half a node
  // slow on its own hosts is late together, and at each tensor-parallel call
  // its ranks wait for the one of them that is last: each must still be named.)
  p.waits_visible = wait_median >= opts_.min_wait_gap;
  for (const auto* r : members) {
    Verdict& v = p.verdicts[r->pid];
    v.wait_median = wait_median;
    v.wait_threshold = wait_median - opts_.min_wait_gap;
    v.gpu_median = p.dev.median;
    v.gpu_threshold = p.dev.threshold;
    v.lag_margin_s = std::max(opts_.min_lag_s, opts_.min_lag_step_share * r->lag.step_seconds);
    judge_arrivals(*r, v);
  }
  return p;
}

// A rank's lag, and the synchronize share of it, as where it is late says
// them (the tracker summarized it from its surest communicator, which may be
// a pipeline pair the pipeline's shape explains; a GPU-slow last stage was
// summarized from its pair, where no synchronize comes before an arrival: its
// DP lag read as unexplained, and it a victim). Its synchronize share is
// read where its synchronize shows: no synchronize comes before a pair's
// arrival, nor before a tensor-parallel call in the middle of the step,
// though the one before its data-parallel call at the step's end is what
// put its host behind. So the largest share of a collective where it is late,
// or surely behind if not yet by the sign test's count of steps. (A slow GPU's
// TP rank was late on its TP pair with a share of 0.04, 0.31 on its DP group:
// a victim of nobody, never named; a PP 2 stage late on its pair and its DP
// group read 0.02 from the pair.)
void StragglerDetector::restate_lag(RankSignal& r, const Verdict& v) const {
  r.lag.summarize_from(*v.decisive);
  for (const auto& c : r.lag.comms) {
    if (is_p2p(c) || c.median_offset_s <= 0) continue;
    const bool late_there = JobPass::late_there(v, c);
    if (!late_there && c.t_score < opts_.min_early_t_score) continue;
    if (c.late_sync_excess > r.lag.late_sync_share) {
      r.lag.late_sync_share = c.late_sync_excess;
      r.lag.sync_comm = c.comm == v.decisive->comm ? "" : c.comm;
    }
  }
}

// Point-to-point lateness against the rank's replicas (the peers on its
// data- and tensor-parallel communicators: the same stage): a pipeline
// makes one side of each exchange wait by its schedule (the receiver posts
// first, the last stage computes the loss), the same on every replica and
// at nearly every step, so the sign test alone says nothing there. Only
// what stands above every replica's offset is the rank's own: at least half
// of its lateness, and surely so (min_t_score standard errors of the
// difference: the replicas' medians spread with jitter too). With
// replicas, its collectives compare it with them anyway (the DP
// all-reduce, its TP peers'); a 10-minute healthy TP2xPP2xDP2 run named a
// pair's side 17 times against the replicas' median.
// The same holds for earliness: a stage that waits for the next one's
// backward by the schedule is early on its pair on every replica; only
// earliness beyond the earliest replica's is a wait of its own (a victim's).
// (A slow stage-0 host in a blocking TP2xPP2xDP2 job was early on its pair by
// 26 ms against its replica's 34: called a victim, it was never named.)
// Replicas whose own partner is late on a collective wait for a culprit
// too (a TP peer's partner is gated by the same slow rank): they say
// nothing of the schedule's earliness, and are left out.
void StragglerDetector::set_pipeline_shape_aside(JobPass& p) const {
  for (const auto* r : p.members) {
    Verdict& v = p.verdicts.at(r->pid);
    std::erase_if(v.late_on, [&](const CommLateness* c) {
      if (!is_p2p(*c)) return false;
      const CommLateness* top = p.replica_pair(*r, *c, true);  // the replica whose pair stands latest
      // (No replica here: the pipeline's own shape cannot be told apart.)
      if (!top || JobPass::beyond(*c, *top, +1, 0.5, opts_.min_t_score)) return false;
      // A whole stage slow is late alike on every replica too; it is named,
      // rank by rank, where every host of the stage is busy (each waits
      // less than the job's ranks) and the pair's offset is a share of the
      // step. (A pipeline's shape is late on its pairs by up to a third of
      // the step with micro-batches, while its ranks wait much as the others.)
      return !(p.stage_busy(*r) && c->median_offset_s >= opts_.max_imbalance_step_share * r->lag.step_seconds);
    });
    std::erase_if(v.early_on, [&](const CommLateness* c) {
      if (!is_p2p(*c)) return false;
      const CommLateness* bottom = p.replica_pair(*r, *c, false);  // the replica whose pair stands earliest
      // (A victim's wait need not be most of the schedule's: only sure.)
      return bottom && !JobPass::beyond(*c, *bottom, -1, 0, opts_.min_early_t_score);
    });
    if (v.decisive && std::find(v.late_on.begin(), v.late_on.end(), v.decisive) == v.late_on.end()) {
      v.decisive = nullptr;
      for (const auto* c : v.late_on)
        if (!v.decisive || c->p_late < v.decisive->p_late) v.decisive = c;
    }
    if (v.decisive) restate_lag(*p.by_pid.at(r->pid), v);
    v.late = !v.late_on.empty();
    // (A busy host early on a collective is a slow rank among slower ones:
    // half a node slow waits at each TP call for the last of it. Early on
    // a pipeline pair, it waits for its partner's send: a victim, busy or not.)
    v.victim = v.late && !v.early_on.empty() && (JobPass::early_on_p2p(v) || !p.host_busy(*r));
  }
}

// Imbalance by design (the last pipeline stage computes the loss): a rank
// late only on its point-to-point pairs, by a small share of the step,
// whose every peer on its collective communicators (its data- and
// tensor-parallel replicas) is late the same way, is the pipeline's shape,
// not a sick worker. A stage that is much slower is named, rank by rank.
void StragglerDetector::mark_imbalance(JobPass& p) const {
  auto p2p_only = [](const Verdict& v) {
    return v.late && std::all_of(v.late_on.begin(), v.late_on.end(), [](const CommLateness* c) { return is_p2p(*c); });
  };
  for (const auto* r : p.members) {
    Verdict& v = p.verdicts.at(r->pid);
    if (!p2p_only(v) || !v.decisive || v.decisive->median_offset_s >= opts_.max_imbalance_step_share * r->lag.step_seconds)
      continue;
    bool replicas_alike = false;
    for (const auto& c : r->lag.comms) {
      if (is_p2p(c)) continue;
      for (const auto* q : p.members) {
        if (q->pid == r->pid) continue;
        if (!JobPass::member_of(*q, c.comm)) continue;
        replicas_alike = p2p_only(p.verdicts.at(q->pid));
        if (!replicas_alike) break;
      }
      if (!replicas_alike) break;
    }
    if (replicas_alike) v.imbalance = true;
  }
  for (const auto* r : p.members)
    if (p.verdicts.at(r->pid).imbalance) p.verdicts.at(r->pid).late = false;
}

// A rank late on one communicator that is on time on another where a peer
// is surely late waits for that peer there (its TP peers in a blocking
// call, ahead of it or not): a victim, whatever its lag elsewhere, unless
// its own host is busy too (on a collective; a pipeline pair's partner
// waits for the send whatever its host does).
// (Not where it is itself behind by as much as the least late of them:
// surely behind, if not yet by the sign test's count of steps, it waits
// for nobody there. A slow GPU's MoE peers were surely late on their data
// parallel group, it later still: it was called their victim.)
void StragglerDetector::find_waits_on_late_peers(JobPass& p) const {
  std::map<std::string, std::set<int>> late_here;
  std::map<std::string, double> least_late;  // the smallest offset of a rank surely late there
  for (const auto* r : p.members)
    for (const auto* c : p.verdicts.at(r->pid).late_on) {
      late_here[c->comm].insert(r->pid);
      auto [it, fresh] = least_late.try_emplace(c->comm, c->median_offset_s);
      if (!fresh) it->second = std::min(it->second, c->median_offset_s);
    }
  for (const auto* r : p.members) {
    Verdict& v = p.verdicts.at(r->pid);
    if (!v.late) continue;
    for (const auto& c : r->lag.comms) {
      auto it = late_here.find(c.comm);
      if (it == late_here.end() || it->second.count(r->pid)) continue;
      if (c.t_score >= opts_.min_early_t_score && c.median_offset_s >= least_late.at(c.comm)) continue;
      v.waits_on.push_back(&c);
      if (is_p2p(c) || !p.host_busy(*r)) v.victim = true;
    }
  }
}

// With the GPU layer, among the ranks late together the one whose NCCL
// kernels run least is the culprit: the others' kernels wait for it (their
// hosts were held by a synchronize gated on its GPU through a collective of
// another group): victims. Compared among the late ranks only: the job's
// spread of NCCL time is two-humped (waiters and the rest).
// Returns the late ranks whose kernels run least.
std::set<int> StragglerDetector::gpu_slow_among_late(JobPass& p) const {
  std::vector<double> late_gpu;
  for (const auto* r : p.members) {
    const Verdict& v = p.verdicts.at(r->pid);
    if (v.late && !v.victim && r->gpu_valid) late_gpu.push_back(r->gpu_nccl_ratio);
  }
  std::set<int> slow;
  if (late_gpu.size() >= 2) {
    const double late_median = median_of(late_gpu);
    for (const auto* r : p.members)
      if (p.verdicts.at(r->pid).late && r->gpu_valid && r->gpu_nccl_ratio < late_median - opts_.min_gpu_gap)
        slow.insert(r->pid);
  }
  for (const auto* r : p.members) {
    Verdict& v = p.verdicts.at(r->pid);
    if (v.late && !slow.empty() && !slow.count(r->pid) && !p.host_busy(*r)) v.victim = true;
  }
  return slow;
}

// Where each rank is behind its peers on a collective, held in its own
// synchronize, its host not busy: surely late there, or surely behind
// (t score) without yet the steps the sign test asks.
std::map<int, const CommLateness*> StragglerDetector::behind_in_sync(const JobPass& p) const {
  std::map<int, const CommLateness*> behind;
  for (const auto* r : p.members) {
    if (p.host_busy(*r) || p.in_bubble(*r)) continue;
    const Verdict& v = p.verdicts.at(r->pid);
    if (v.late && !v.victim && v.decisive && p.sync_explains(*r)) {
      behind[r->pid] = v.decisive;
      continue;
    }
    for (const auto& c : r->lag.comms)
      if (!is_p2p(c) && c.late_sync_excess >= opts_.min_sync_share && c.t_score >= opts_.min_early_t_score &&
          (!behind.count(r->pid) || c.median_offset_s > behind[r->pid]->median_offset_s))
        behind[r->pid] = &c;
  }
  return behind;
}

// Peers behind on their own collectives, each held in its own synchronize, at
// least one of them surely late (`behind`: where each is behind), that meet on
// a communicator where neither is late (a pipeline pair, an MoE exchange, a
// tensor-parallel group), cannot both be slow GPUs by the host's word: a
// receive or a collective that waits on the GPU for a slow peer holds that
// GPU's synchronize as a slow GPU holds its own. Told apart by
//  - the GPU layer: the one whose NCCL kernels run least computes, the other
//    waits in its NCCL kernels (a victim);
//  - their lags: a peer gated by the other finishes at most as late as that
//    one does (a pipeline's stages before it finish their tail on time after
//    it, the stages after it wait for its forwards; a TP peer finishes with
//    it), so the one surely less late waits.
// Returns the ranks held back: the GPU layer follows both and has not yet told
// them apart (it takes a window). Without it, each one named says that the
// other is late alike.
std::set<int> StragglerDetector::settle_sync_partners(JobPass& p, const std::map<int, const CommLateness*>& behind) const {
  std::set<int> held;
  const CommLateness* gate = nullptr;
  auto waits = [&](const RankSignal& victim, const RankSignal& culprit) {
    Verdict& v = p.verdicts.at(victim.pid);
    if (!v.late) return;
    v.victim = true;
    v.waits_for_pid = culprit.pid;
    v.waits_for_comm = shared_comm(victim, culprit, [&](const CommLateness& c) { return c.comm == gate->comm; });
  };
  for (const auto* a : p.members)
    for (const auto* b : p.members) {
      if (a->pid >= b->pid || !behind.count(a->pid) || !behind.count(b->pid)) continue;
      Verdict &va = p.verdicts.at(a->pid), &vb = p.verdicts.at(b->pid);
      if (!(va.late && !va.victim) && !(vb.late && !vb.victim)) continue;  // neither would be named
      // Through a communicator where neither is late, met at nearly every
      // step: the gate between them. (Two ranks late together on one group
      // may both be slow; a world communicator used now and then for logging
      // ties nobody's GPU to anybody's.)
      const CommLateness &ca = *behind.at(a->pid), &cb = *behind.at(b->pid);
      gate = shared_comm(*a, *b, [&](const CommLateness& c) {
        return !JobPass::late_there(va, c) && !JobPass::late_there(vb, c) && 2 * c.bins >= std::max(ca.bins, cb.bins);
      });
      if (!gate) continue;
      const bool gpu_layer = a->gpu_valid && b->gpu_valid;
      if (gpu_layer && a->gpu_nccl_ratio < b->gpu_nccl_ratio - opts_.min_gpu_gap) {
        waits(*b, *a);
        continue;
      }
      if (gpu_layer && b->gpu_nccl_ratio < a->gpu_nccl_ratio - opts_.min_gpu_gap) {
        waits(*a, *b);
        continue;
      }
      const double diff = ca.median_offset_s - cb.median_offset_s;
      const double se = std::hypot(ca.offset_se_s, cb.offset_se_s);
      auto surely_later = [&](double d, double lag) {
        return d >= opts_.min_early_t_score * se && d >= opts_.min_partner_lag_share * lag;
      };
      if (surely_later(diff, ca.median_offset_s)) {
        waits(*b, *a);
      } else if (surely_later(-diff, cb.median_offset_s)) {
        waits(*a, *b);
      } else if (gpu_layer) {
        held.insert(a->pid);
        held.insert(b->pid);
      } else {
        va.alike[b->pid] = b->rank;
        vb.alike[a->pid] = a->rank;
      }
    }
  return held;
}

// Found waiting for a peer within a window (settled above, or surely
// early on a pair), then late alike with it, or early there less surely
// (the tests are strict, and a window's evidence wavers): it still waits.
void StragglerDetector::recall_waits(JobPass& p, double now_unix) {
  for (const auto* r : p.members) {
    Verdict& v = p.verdicts.at(r->pid);
    Track& t = tracks_[r->pid];
    const bool still_early_on_p2p = std::any_of(r->lag.comms.begin(), r->lag.comms.end(), [&](const CommLateness& c) {
      return is_p2p(c) && c.t_score <= -opts_.min_still_early_t_score;
    });
    const bool recently = now_unix - t.waited_at < window_seconds_;
    if (v.waits_for_pid || (v.victim && JobPass::early_on_p2p(v))) {
      t.waited_for_pid = v.waits_for_pid;
      t.waited_on = v.waits_for_comm ? v.waits_for_comm->comm : "";
      t.waited_at = now_unix;
    } else if (recently && v.alike.count(t.waited_for_pid)) {
      v.victim = true;
      v.waits_for_pid = t.waited_for_pid;
      v.waits_for_comm = shared_comm(*r, *p.by_pid.at(t.waited_for_pid),
                                     [&](const CommLateness& c) { return c.comm == t.waited_on; });
      p.verdicts.at(t.waited_for_pid).alike.erase(r->pid);
      v.alike.clear();
    } else if (recently && v.late && !v.victim && !p.host_busy(*r) && still_early_on_p2p) {
      v.victim = true;
    }
  }
}

// Why a rank is slow, or that it is a victim after all: sets its reason
// (kNone: not named now). Returns whether its GPU is slow by the GPU layer.
bool StragglerDetector::decide_reason(JobPass& p, const RankSignal& r, const std::set<int>& late_gpu_slow) const {
  Verdict& v = p.verdicts.at(r.pid);
  // GPU (with the GPU layer): its NCCL kernels run least — its peers' kernels
  // wait for it (unless it is in a bubble).
  // (A rank away for a while, a checkpoint or an evaluation of its own, has
  // everyone's NCCL kernels waiting for it too: a pause, not a slow GPU.)
  const bool paused = std::any_of(r.lag.comms.begin(), r.lag.comms.end(), [&](const CommLateness& c) {
    return c.since_pause_s >= 0 && c.since_pause_s < opts_.pause_memory_seconds;
  });
  // (And a rank behind its peers, if not yet surely, is a late host whose
  // NCCL kernels are the shortest because everyone waits for it, unless
  // its host waits as much as its peers': then its GPU holds it back.)
  const bool host_behind = std::any_of(r.lag.comms.begin(), r.lag.comms.end(), [&](const CommLateness& c) {
    return c.late_share >= 0.5 && c.median_offset_s >= std::max(opts_.min_lag_s, v.lag_margin_s / std::max(1.0, c.ops_per_step));
  });
  const bool gpu_slow =
      (p.gpu_comparable && r.gpu_valid && r.gpu_nccl_ratio < p.dev.threshold && !p.in_bubble(r) &&
       (v.late || (!paused && (!host_behind || (p.waits_visible && !p.host_busy(r)))))) ||
      late_gpu_slow.count(r.pid);
  // A late rank is the culprit when something of its own explains the lag:
  // it waits less than its peers (its host computes longer; or no host
  // synchronizes in the window, so no waits to compare), its synchronize
  // calls before its arrival (its GPU), its GC, or what its host's kernel
  // layer shows. One whose lateness nothing of its own explains (it sat in
  // a synchronize gated by another group's collective, and so started its
  // step late) waits for someone: a victim.
  // (No waits to compare, when no host synchronizes in the window.)
  const bool waits_less = !p.waits_visible || p.host_busy(r);
  const bool candidate = v.late && !v.victim;
  const bool sync_explains_lag = candidate && p.sync_explains(r);
  const bool gc_explains = candidate && gc_explains_lag(r, p.members, v);
  // Its NCCL kernels running least among the late ranks, or in the whole
  // job (the ranks it holds up may all be victims by now: its MoE peers
  // wait in their receives), is its GPU's own, where its host waits as
  // much as its peers' (a host that computes longer waits less, and its
  // kernels are the shortest as well).
  const bool gpu_explains = (late_gpu_slow.count(r.pid) != 0 || gpu_slow) && !p.host_busy(r);
  // Its peers wait for it (surely early where it is surely late), it waits
  // for nobody, and its host waits as much as theirs: not its host's
  // compute, so its GPU or stream (its host may block in launches behind
  // a full queue, not in a synchronize; a slow GPU's MoE peers waited for
  // its all-to-all sends, and it was called a victim of nobody).
  // (Late on a collective too, and its synchronize holding a good part of
  // its lag: a pipeline's shape at a job's start is waited for on a pair.)
  const bool held_by_its_gpu = p.waits_visible && !p.host_busy(r) && JobPass::late_on_collective(v) &&
                               r.lag.late_sync_share >= opts_.min_waited_for_sync_share && p.waited_for(r);
  if (candidate) {
    Verdict probe = v;
    const StragglerReason host = host_reason(r, p.members, gc_explains, probe);
    const bool host_cause = host != StragglerReason::kCompute && host != StragglerReason::kHost;
    if (!(waits_less || sync_explains_lag || gc_explains || host_cause || gpu_explains || held_by_its_gpu))
      v.victim = true;
  }
  if (candidate && !v.victim) {
    // What on its host explains the lag comes first (runnable-but-waiting
    // time is CPU contention even where it lands inside a synchronize);
    // then its own synchronize calls (its GPU, when the GPU layer agrees);
    // else it computes longer. The GPU layer alone does not decide for a
    // late rank: a late host's NCCL kernels are the shortest too.
    v.reason = host_reason(r, p.members, gc_explains, v);
    const bool host_unexplained = v.reason == StragglerReason::kCompute || v.reason == StragglerReason::kHost;
    if (host_unexplained && (sync_explains_lag || gpu_explains || held_by_its_gpu)) {
      v.reason = gpu_slow ? StragglerReason::kGpu : StragglerReason::kSync;
      v.decided_by = HostTest::kNone;
    }
  }
  return gpu_slow;
}

// The flag follows the verdicts: raised after raise_after evaluations that
// name the rank (its event then), cleared after clear_after that do not.
void StragglerDetector::update_flag(JobPass& p, const std::string& job, const RankSignal& r, bool gpu_slow, bool held,
                                    double now_unix, std::vector<DetectedEvent>& events) {
  Verdict& v = p.verdicts.at(r.pid);
  Track& t = tracks_[r.pid];
  // On its GPU alone (its host on time): the window's NCCL-kernel share, which
  // chance moves too (jitter, uneven MoE token counts; a healthy EP 4 job
  // named a rank once in 3 minutes), and consecutive evaluations share most
  // of their window. So the share must stay low for a whole window of data
  // the first evaluation did not see; a slow GPU stays slow.
  const bool gpu_only = !v.late && gpu_slow;
  if (!gpu_only) t.gpu_low_since = -1;
  if (gpu_only) {
    if (t.gpu_low_since < 0) t.gpu_low_since = now_unix;
    if (t.st.straggler || now_unix - t.gpu_low_since >= window_seconds_) v.reason = StragglerReason::kGpu;
  }
  // Late alike with a peer that the GPU layer has not yet
  // told apart: held back, for a window at most (its shares take one).
  if (!held) t.held_since = -1;
  if (held) {
    if (t.held_since < 0) t.held_since = now_unix;
    if (!t.st.straggler && now_unix - t.held_since < window_seconds_) v.reason = StragglerReason::kNone;
  }
  if (v.late && r.lag.step_seconds > 0) v.score = r.lag.median_lag_s / r.lag.step_seconds;
  if (gpu_slow && p.dev.median < 1)
    v.score = std::max(v.score, std::max(0.0, (1.0 - r.gpu_nccl_ratio) / std::max(1e-3, 1.0 - p.dev.median) - 1.0));
  const bool flagged_now = v.reason != StragglerReason::kNone;
  t.st.score = flagged_now ? v.score : 0;
  if (flagged_now) {
    ++t.hits;
    t.misses = 0;
  } else {
    ++t.misses;
    t.hits = 0;
  }
  if (!t.st.straggler && t.hits >= opts_.raise_after) {
    t.st.straggler = true;
    t.st.reason = v.reason;
    events.push_back(straggler_event(job, r, v, p.members, p.verdicts, now_unix));
    if (v.reason == StragglerReason::kGcPause) events.push_back(gc_pause_event(job, r, v, p.members, now_unix));
  } else if (t.st.straggler && t.misses >= opts_.clear_after) {
    t.st.straggler = false;
    t.st.reason = StragglerReason::kNone;
  } else if (t.st.straggler && flagged_now) {
    t.st.reason = v.reason;
  }
}

// Each job of the node in phases: where each rank is late and early; the
// pipeline's shape and its imbalance set aside; who waits for whom (on a
// late peer's communicator, by the GPU layer, by a shared synchronize gate,
// and as remembered); then each rank's reason and flag.
std::vector<DetectedEvent> StragglerDetector::evaluate(const std::vector<RankSignal>& signals, double now_unix) {
  std::vector<DetectedEvent> events;
  // A copy: a rank's lag summary is restated from the communicator that
  // decides it (RankLagStats::summarize_from), its communicators themselves untouched.
  std::vector<RankSignal> ranks = signals;
  std::map<int, RankSignal*> by_pid;
  std::map<std::string, std::vector<const RankSignal*>> jobs;
  for (auto& r : ranks) {
    by_pid[r.pid] = &r;
    if (!r.job_id.empty() && r.rank >= 0 && r.coverage >= opts_.min_coverage) jobs[r.job_id].push_back(&r);
  }

  std::set<int> judged;
  for (const auto& [job, members] : jobs) {
    if (members.size() < 2) continue;  // nobody to compare with here: the cross-node rules do it
    JobPass pass = open_job(members, by_pid);
    set_pipeline_shape_aside(pass);
    mark_imbalance(pass);
    find_waits_on_late_peers(pass);
    const std::set<int> late_gpu_slow = gpu_slow_among_late(pass);
    const std::set<int> held = settle_sync_partners(pass, behind_in_sync(pass));
    recall_waits(pass, now_unix);
    for (const auto* r : members) {
      judged.insert(r->pid);
      const bool gpu_slow = decide_reason(pass, *r, late_gpu_slow);
      update_flag(pass, job, *r, gpu_slow, held.count(r->pid) != 0, now_unix, events);
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

void StragglerDetector::retain(const std::set<int>& pids) {
  std::erase_if(tracks_, [&](const auto& kv) { return !pids.count(kv.first); });
}

}  // namespace argus
