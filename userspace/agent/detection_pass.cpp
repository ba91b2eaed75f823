#include "userspace/agent/detection_pass.h"

#include <algorithm>

#include "bpf/argus_sched.h"
#include "userspace/detect/rank_exit.h"

namespace argus {

namespace {

// Two seconds of looks (PythonCollector::kInputPollSeconds) before a share is read.
constexpr int kMinInputPolls = 10;

// Its main thread's share of looks in its DataLoader over the span its lag
// was measured over (its last steps), or the shortest longer one.
void set_input_share(RankSignal& sig, const InputWaitView& input, const RankLagStats& lag) {
  const double lag_span = lag.spread_samples * lag.step_seconds;
  const InputWaitView::Span* use = nullptr;
  for (const auto& s : input.spans) {
    if (s.polls < kMinInputPolls) continue;
    use = &s;
    if (s.seconds >= lag_span) break;
  }
  if (use == nullptr) return;
  sig.input_valid = true;
  sig.input_polls = use->polls;
  sig.input_share = static_cast<double>(use->in_input) / use->polls;
  sig.input_workers = use->workers;
}

}  // namespace

RankSignal DetectionPass::signal_of(const RankSnapshot& r, const RankLagStats& lag, const GpuRankView& gpu,
                                    double now_unix) const {
  RankSignal sig;
  sig.pid = r.pid;
  sig.job_id = r.job_id;
  sig.rank = r.rank;
  sig.cgroup = r.cgroup_cpu.path;  // named in a throttled straggler's summary
  sig.coll_wait_ratio = r.collective_wait_ratio;
  sig.sync_wait_ratio = r.sync_wait_ratio;
  sig.coverage = std::min(1.0, (now_unix - r.first_seen_unix) / opts_.window_seconds);
  sig.lag = lag;
  sig.gpu_valid = gpu.window_valid;
  sig.gpu_nccl_ratio = gpu.nccl_ratio;
  sig.bubble_ratio = gpu.bubble_ratio;
  sig.gc_valid = r.python_gc.present && r.python_gc.anchor != "none";
  sig.gc_seconds = r.python_gc.window_seconds;
  sig.gc_span_s = r.python_gc.window_span_seconds;
  sig.gc_pauses = r.python_gc.window_pauses;
  sig.gc_max_pause_s = r.python_gc.window_max_pause_seconds;
  set_input_share(sig, r.input, lag);
  sig.offcpu_valid = r.offcpu.present && r.offcpu.window_span_seconds > 0;
  sig.runqueue_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_RUNQUEUE];
  sig.io_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_IO];
  sig.lock_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_LOCK];
  sig.sleep_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_SLEEP];
  sig.oncpu_share = r.offcpu.window_oncpu_share;
  sig.stealers = r.offcpu.stealers;
  sig.throttle_valid = r.cgroup_cpu.present;
  sig.throttled_share = r.cgroup_cpu.window_throttled_share;
  return sig;
}

DetectionPass::Verdicts DetectionPass::run(const std::vector<RankSnapshot>& ranks, const CollectiveTracker& tracker,
                                           const NodeTimeline& timeline, uint64_t now_ns, double now_unix) {
  Verdicts out;
  std::vector<RankSignal> signals;
  std::map<int, RankInfoForHang> facts;
  for (const auto& r : ranks) {
    const RankLagStats lag = tracker.last_lag_stats(r.pid);
    const GpuRankView gpu = timeline.gpu_view(r.pid, now_ns);
    RankInfoForHang& f = facts[r.pid];
    f = {r.job_id, r.rank, r.exited, r.exit_reason, r.exit_code, lag.step_seconds, static_cast<double>(gpu.latest_end_ns)};
    f.offcpu_valid = r.offcpu.present && r.offcpu.window_span_seconds > 0;
    f.oncpu_share = r.offcpu.window_oncpu_share;
    f.io_share = r.offcpu.window_offcpu_share[ARGUS_OFFCPU_IO];
    f.heard = tracker.heard_from(r.pid);
    if (r.exited) {
      f.exit_summary = exit_phrase(r);
      f.exit_cause = exit_evidence(r);
      continue;
    }
    signals.push_back(signal_of(r, lag, gpu, now_unix));
  }
  for (auto& ev : stragglers_.evaluate(signals, now_unix)) out.events.push_back(std::move(ev));
  for (auto& ev : bubbles_.evaluate(signals, now_unix)) out.events.push_back(std::move(ev));
  const auto comms = tracker.comms();
  for (auto& ev : hangs_.evaluate(comms, tracker.blocked_calls(), facts, now_ns, now_unix, tracker.p2p().pending()))
    out.events.push_back(std::move(ev));

  std::map<int, std::map<std::string, uint64_t>> seqs;
  out.comms = comm_health(comms, facts, seqs);
  for (const auto& r : ranks) {
    RankDetection& d = out.ranks[r.pid];
    const RankLagStats lag = tracker.last_lag_stats(r.pid);
    d.arrival_lag_seconds = lag.mean_lag_s;
    d.late_fraction = lag.late_fraction;
    d.step_seconds = lag.step_seconds;
    const auto st = stragglers_.state(r.pid);
    d.straggler = st.straggler && !r.exited;
    d.straggler_score = r.exited ? 0 : st.score;
    d.straggler_reason = d.straggler ? st.reason : StragglerReason::kNone;
    d.pipeline_bubble = !r.exited && bubbles_.flagged(r.pid);
    d.hang_missing = hangs_.missing(r.pid);
    d.comm_seq = seqs[r.pid];
    if (!r.exited)
      d.gpu_memory_verdict = gpu_memory_.judge(r.pid, r.gpu_memory, d.step_seconds, static_cast<double>(now_ns) / 1e9);
  }
  return out;
}

// Each communicator as this node sees it, and each rank's newest collective on each.
std::vector<CommSnapshot> DetectionPass::comm_health(const std::vector<CommView>& comms,
                                                     const std::map<int, RankInfoForHang>& facts,
                                                     std::map<int, std::map<std::string, uint64_t>>& seqs) const {
  std::vector<CommSnapshot> health;
  for (const auto& c : comms) {
    CommSnapshot cs;
    cs.comm = c.comm;
    cs.nranks = c.nranks;
    cs.ranks_here = static_cast<int>(c.members.size());
    cs.newest_seq = c.newest_seq;
    cs.group = c.label;
    cs.ranks = member_ranks(c, facts);
    for (const auto& [pid, m] : c.members) {
      seqs[pid][c.comm] = m.last_seq;
      if (auto f = facts.find(pid); cs.job_id.empty() && f != facts.end()) cs.job_id = f->second.job_id;
    }
    if (auto h = hangs_.health().find(c.comm); h != hangs_.health().end()) {
      cs.stalled_seconds = h->second.stalled_seconds;
      cs.hung = h->second.hung;
      for (int pid : h->second.missing_pids) {
        auto f = facts.find(pid);
        cs.missing_ranks.push_back(f != facts.end() ? f->second.rank : -1);
      }
    }
    health.push_back(std::move(cs));
  }
  return health;
}

void DetectionPass::retain(const std::set<int>& pids) {
  stragglers_.retain(pids);
  bubbles_.retain(pids);
  gpu_memory_.retain(pids);
}

}  // namespace argus
