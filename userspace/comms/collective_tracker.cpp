#include "userspace/comms/collective_tracker.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "userspace/common/median.h"

namespace argus {
namespace {

// Sequence numbers may wrap: compare by signed distance.
bool seq_before(uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b) < 0; }

}  // namespace

CollectiveTracker::CollectiveTracker(TrackerOptions opts)
    : opts_(opts),
      p2p_({.window_seconds = opts.window_seconds, .caps = opts.caps}),
      order_({.window_seconds = opts.window_seconds}) {}

void CollectiveTracker::note_call(const std::string& comm, int pid, uint32_t op, uint64_t bytes, uint64_t ts_ns) {
  heard_.insert(pid);
  // The communicator by a hash of its name: no table that outlives the ranks.
  patterns_[pid].on_call(call_signature(static_cast<uint32_t>(std::hash<std::string>{}(comm)), op, bytes), ts_ns,
                         op != kSyncOp);
}

// The step each member is in, for grouping its operations by step.
void CollectiveTracker::order(const std::string& comm, const std::map<int, uint64_t>& arrivals, StepStatistic stat) {
  if (arrivals.size() < 2) return;
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& [pid, ts] : arrivals) {
    first = std::min(first, ts);
    last = std::max(last, ts);
  }
  // Each member's synchronize share over the same span right before its own
  // arrival: only its excess over its peers' says its GPU or stream held it.
  const uint64_t span = last - first;
  std::map<int, double> pre_sync, steps;
  for (const auto& [pid, ts] : arrivals) {
    if (span > 0) pre_sync[pid] = sync_share(pid, ts > span ? ts - span : 0, ts);
    steps[pid] = last_lag_stats(pid).step_seconds;
  }
  order_.add(comm, arrivals, pre_sync, steps, stat);
}

CollectiveTracker::Comm* CollectiveTracker::find_or_add(const std::string& comm) {
  if (auto it = comms_.find(comm); it != comms_.end()) return &it->second;
  if (comms_.size() >= opts_.max_comms) {
    count_into(opts_.caps, Cap::kCommunicators);
    return nullptr;
  }
  Comm& c = comms_[comm];
  c.view.comm = comm;
  return &c;
}

void CollectiveTracker::add_member(const std::string& comm, int pid, int nranks, int comm_rank) {
  Comm* cp = find_or_add(comm);
  if (!cp) return;
  Comm& c = *cp;
  if (nranks > 0) c.view.nranks = std::max(c.view.nranks, nranks);
  CommMember& m = c.view.members[pid];
  m.pid = pid;
  if (comm_rank >= 0) m.comm_rank = comm_rank;
}

void CollectiveTracker::add_split_member(const std::string& comm, int pid, int key, int parent_rank) {
  Comm* cp = find_or_add(comm);
  if (!cp) return;
  auto& order = split_order_[comm];
  order[pid] = {key, parent_rank};
  cp->view.members[pid].pid = pid;
  std::vector<std::pair<std::pair<int, int>, int>> ranked;
  for (const auto& [p, k] : order) ranked.push_back({k, p});
  std::sort(ranked.begin(), ranked.end());
  for (size_t i = 0; i < ranked.size(); ++i) cp->view.members[ranked[i].second].comm_rank = static_cast<int>(i);
}

void CollectiveTracker::on_p2p(const std::string& comm, int pid, bool send, int peer, uint64_t ts_ns) {
  Comm* cp = find_or_add(comm);
  if (!cp) return;
  CommMember& m = cp->view.members[pid];
  m.pid = pid;
  m.exited = false;
  note_call(comm, pid, send ? kSendOp : kRecvOp, 0, ts_ns);
  // Only a peer on this node can be matched: the other side of a send to a
  // rank elsewhere is never seen here (it would wait forever, a false hang).
  const bool peer_here = std::any_of(cp->view.members.begin(), cp->view.members.end(),
                                     [&](const auto& kv) { return kv.first != pid && kv.second.comm_rank == peer; });
  if (peer < 0 || !peer_here || m.comm_rank < 0) {
    count_into(opts_.caps, AgentCount::kP2pUnpaired);
    return;
  }
  if (const P2pMatch* match = p2p_.on_op(comm, pid, m.comm_rank, send, peer, ts_ns);
      match && match->sender_pid != match->receiver_pid)
    order(p2p_name(comm), {{match->sender_pid, match->send_ns}, {match->receiver_pid, match->recv_ns}},
          StepStatistic::kMean);
  trim(ts_ns);
}

void CollectiveTracker::on_arrival(const std::string& comm, int pid, uint64_t seq, uint64_t ts_ns, uint32_t op,
                                   uint64_t bytes) {
  if (seq == 0) return;  // p2p: no common numbering (on_p2p)
  note_call(comm, pid, op, bytes, ts_ns);
  Comm* cp = find_or_add(comm);
  if (!cp) return;
  Comm& c = *cp;
  CommMember& m = c.view.members[pid];
  m.pid = pid;
  m.exited = false;
  m.last_seq = seq;
  m.last_arrival_ns = ts_ns;
  if (c.view.newest_seq == 0 || seq_before(c.view.newest_seq, seq)) c.view.newest_seq = seq;
  c.view.newest_arrival_ns = std::max(c.view.newest_arrival_ns, ts_ns);
  auto& arrivals = arrivals_[pid];
  arrivals.push_back(ts_ns);
  for (; arrivals.size() > opts_.max_samples; arrivals.pop_front()) count_into(opts_.caps, Cap::kCollectiveSamples);

  c.open[seq].arrivals[pid] = ts_ns;
  try_complete(c, seq);
  // Bounded memory: collectives some member never reaches are dropped oldest first.
  for (; c.open.size() > opts_.max_open_seqs; c.open.erase(c.open.begin())) count_into(opts_.caps, Cap::kOpenCollectives);
  trim(ts_ns);
}

void CollectiveTracker::try_complete(Comm& c, uint64_t seq) {
  auto it = c.open.find(seq);
  if (it == c.open.end()) return;
  size_t expected = 0;
  for (const auto& [pid, m] : c.view.members) {
    if (m.exited) continue;
    ++expected;
    if (!it->second.arrivals.count(pid)) return;
  }
  if (expected == 0) return;
  complete(c, seq, it->second);
  c.open.erase(it);
}

void CollectiveTracker::complete(Comm& c, uint64_t, OpenSeq& s) {
  if (s.arrivals.size() < 2) return;  // a lone rank lags nobody
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& [pid, ts] : s.arrivals) {
    first = std::min(first, ts);
    last = std::max(last, ts);
  }
  // Only the first collective after a compute phase spreads the ranks out; the
  // rest of the burst arrives together: one spread-out collective per step.
  const bool spread = static_cast<double>(last - first) / 1e9 > opts_.late_threshold_s;
  if (spread) c.spread_starts.push_back(first);
  for (; c.spread_starts.size() > opts_.max_samples; c.spread_starts.pop_front())
    count_into(opts_.caps, Cap::kCollectiveSamples);
  for (const auto& [pid, ts] : s.arrivals) {
    auto& lags = lags_[pid];
    lags.push_back({first, static_cast<double>(ts - first) / 1e9});
    for (; lags.size() > opts_.max_samples; lags.pop_front()) count_into(opts_.caps, Cap::kCollectiveSamples);
  }
  order(c.view.comm, s.arrivals, StepStatistic::kLargest);
}

double CollectiveTracker::sync_share(int pid, uint64_t from_ns, uint64_t to_ns) const {
  auto it = syncs_.find(pid);
  if (it == syncs_.end() || to_ns <= from_ns) return 0;
  uint64_t covered = 0;
  for (const auto& [start, end] : it->second) {
    const uint64_t a = std::max(start, from_ns), b = std::min(end, to_ns);
    if (b > a) covered += b - a;
  }
  return std::min(1.0, static_cast<double>(covered) / static_cast<double>(to_ns - from_ns));
}

void CollectiveTracker::on_sync(int pid, uint64_t start_ns, uint64_t end_ns) {
  if (end_ns < start_ns) return;
  // A step usually ends in one (loss.item()): part of the step's pattern.
  note_call("", pid, kSyncOp, 0, start_ns);
  auto& d = syncs_[pid];
  d.emplace_back(start_ns, end_ns);
  while (d.size() > kMaxSyncSpans) d.pop_front();
}

void CollectiveTracker::on_exit(int pid) {
  for (auto& [name, c] : comms_) {
    auto it = c.view.members.find(pid);
    if (it == c.view.members.end()) continue;
    it->second.exited = true;
    // Collectives that only waited for this rank are complete among the rest.
    std::vector<uint64_t> seqs;
    for (const auto& [seq, s] : c.open) seqs.push_back(seq);
    for (uint64_t seq : seqs) try_complete(c, seq);
  }
}

void CollectiveTracker::forget(int pid) {
  for (auto it = comms_.begin(); it != comms_.end();) {
    it->second.view.members.erase(pid);
    for (auto& [seq, s] : it->second.open) s.arrivals.erase(pid);
    it = it->second.view.members.empty() ? comms_.erase(it) : std::next(it);
  }
  lags_.erase(pid);
  p2p_.forget(pid);
  order_.forget(pid);
  patterns_.erase(pid);
  heard_.erase(pid);
  for (auto& [comm, order] : split_order_) order.erase(pid);
  std::erase_if(split_order_, [](const auto& kv) { return kv.second.empty(); });
  arrivals_.erase(pid);
  syncs_.erase(pid);
  last_stats_.erase(pid);
  std::erase_if(blocked_, [pid](const InflightWait& w) { return w.pid == pid; });
}

void CollectiveTracker::retain(const std::set<int>& pids) {
  std::set<int> gone;
  for (const auto& [pid, samples] : lags_) gone.insert(pid);
  for (const auto& [pid, times] : arrivals_) gone.insert(pid);
  for (const auto& [pid, spans] : syncs_) gone.insert(pid);
  gone.insert(heard_.begin(), heard_.end());
  for (const auto& [name, c] : comms_)
    for (const auto& [pid, m] : c.view.members) gone.insert(pid);
  for (int pid : gone)
    if (!pids.count(pid)) forget(pid);
}

void CollectiveTracker::update(uint64_t now_ns) {
  std::map<int, double> own;
  for (int pid : heard_) own[pid] = step_of(pid, now_ns);
  std::map<int, RankLagStats> stats;
  for (int pid : heard_) stats[pid] = lag_stats_at(pid, now_ns, consensus_step(pid, own));
  last_stats_ = std::move(stats);
}

// The ranks that share a communicator share a step. An estimate is off by
// reading a part of a step as one: the straggler's calls look evenly spaced
// (its step boundary hides no wait), and with blocking calls its peers' arrivals
// come in two bursts a step (before and after their wait for it).
double CollectiveTracker::consensus_step(int pid, const std::map<int, double>& own) const {
  std::set<int> peers{pid};
  for (const auto& [name, c] : comms_)
    if (c.view.members.count(pid))
      for (const auto& [q, m] : c.view.members) peers.insert(q);
  std::vector<double> steps;
  for (int q : peers)
    if (auto it = own.find(q); it != own.end() && it->second > 0) steps.push_back(it->second);
  if (steps.empty()) return 0;
  // The longest: a wrong estimate is a part of a step (calls evenly spaced, or
  // a wait inside a blocking call splitting a step's calls in two bursts),
  // never more than one; a step read too long only merges steps.
  return *std::max_element(steps.begin(), steps.end());
}

RankLagStats CollectiveTracker::last_lag_stats(int pid) const {
  auto it = last_stats_.find(pid);
  return it == last_stats_.end() ? RankLagStats{} : it->second;
}

void CollectiveTracker::trim(uint64_t now_ns) {
  const auto window = static_cast<uint64_t>(opts_.window_seconds * 1e9);
  const uint64_t cutoff = now_ns > window ? now_ns - window : 0;
  for (auto& [pid, d] : lags_)
    while (!d.empty() && d.front().ts_ns < cutoff) d.pop_front();
  for (auto& [pid, d] : arrivals_)
    while (!d.empty() && d.front() < cutoff) d.pop_front();
  for (auto& [pid, d] : syncs_)
    while (!d.empty() && d.front().second < cutoff) d.pop_front();
  // The call pattern is kept by count (StepPattern::kMaxCalls), not by the
  // window: a step longer than a third of the window still shows its period.
  const uint64_t hour = 3600ull * 1'000'000'000;
  for (auto& [pid, p] : patterns_) p.trim_before(now_ns > hour ? now_ns - hour : 0);
  order_.trim(now_ns);
  for (auto& [name, c] : comms_)
    while (!c.spread_starts.empty() && c.spread_starts.front() < cutoff) c.spread_starts.pop_front();
  p2p_.trim(now_ns);
}

RankLagStats CollectiveTracker::lag_stats(int pid, uint64_t now_ns) const {
  std::map<int, double> own;
  for (int q : heard_) own[q] = step_of(q, now_ns);
  return lag_stats_at(pid, now_ns, consensus_step(pid, own));
}

RankLagStats CollectiveTracker::lag_stats_at(int pid, uint64_t now_ns, double step_s) const {
  RankLagStats out;
  const auto window = static_cast<uint64_t>(opts_.window_seconds * 1e9);
  const uint64_t cutoff = now_ns > window ? now_ns - window : 0;
  if (auto it = lags_.find(pid); it != lags_.end()) {
    double sum = 0;
    for (const auto& s : it->second) {
      if (s.ts_ns < cutoff) continue;
      ++out.samples;
      sum += s.lag_s;
    }
    if (out.samples > 0) out.mean_lag_s = sum / static_cast<double>(out.samples);
  }
  out.step_seconds = step_s;
  out.comms = order_.of(pid, out.step_seconds, now_ns);
  for (auto& c : out.comms) {
    const std::string name = is_p2p(c) ? c.comm.substr(0, c.comm.size() - kP2pSuffix.size()) : c.comm;
    if (auto it = comms_.find(name); it != comms_.end()) c.label = it->second.view.label;
  }
  // The summary is the communicator where it is most surely late.
  const CommLateness* worst = nullptr;
  for (const auto& c : out.comms)
    if (!worst || c.p_late < worst->p_late || (c.p_late == worst->p_late && c.t_score > worst->t_score)) worst = &c;
  if (worst) out.summarize_from(*worst);
  return out;
}

// The step: the period of the rank's call pattern (comms/step_pattern.h) when
// it has one; else the old estimate from bursts. Where the ranks spread out
// once a step (some rank computes longer), the period of those collectives;
// else the period of the bursts of this rank's collectives. In a healthy job
// the ranks spread out only now and then (noise): the intervals between those
// are several steps, so the spread-out collectives count only when at least
// half of this rank's bursts in the window have one. A pattern a whole number
// of burst periods long (calls that vary with the step number, as the legacy
// simulator's sizes do) is that many steps: the burst period is the step,
// when its bursts hold several calls each.
double CollectiveTracker::step_of(int pid, uint64_t now_ns) const {
  const auto window = static_cast<uint64_t>(opts_.window_seconds * 1e9);
  const uint64_t cutoff = now_ns > window ? now_ns - window : 0;
  double spread_period = 0;
  size_t spread_bursts = 0;
  for (const auto& [name, c] : comms_) {
    if (!c.view.members.count(pid) || c.spread_starts.size() < 4) continue;
    std::deque<uint64_t> recent;
    for (uint64_t t : c.spread_starts)
      if (t >= cutoff) recent.push_back(t);
    size_t bursts = 0;
    const double p = step_period_seconds(recent, &bursts);
    if (p > spread_period) {
      spread_period = p;
      spread_bursts = bursts;
    }
  }
  double own_period = 0;
  size_t own_bursts = 0, own_calls = 0;
  if (auto it = arrivals_.find(pid); it != arrivals_.end()) {
    std::deque<uint64_t> recent;
    for (uint64_t t : it->second)
      if (t >= cutoff) recent.push_back(t);
    own_calls = recent.size();
    own_period = step_period_seconds(recent, &own_bursts);
  }
  const double bursts =
      spread_period > 0 && (own_period == 0 || 2 * spread_bursts >= own_bursts) ? spread_period : own_period;
  const auto p = patterns_.find(pid);
  const double pattern = p == patterns_.end() ? 0 : p->second.step_seconds();
  if (pattern <= 0) return bursts;
  // Bursts of one call are the calls themselves (per-layer collectives evenly
  // spaced), not steps.
  const bool real_bursts = own_bursts > 0 && own_calls >= 2 * own_bursts;
  if (bursts > 0 && real_bursts) {
    const double k = std::round(pattern / bursts);
    if (k >= 2 && std::fabs(pattern - k * bursts) <= 0.15 * pattern) return bursts;
  }
  return pattern;
}

void CollectiveTracker::set_label(const std::string& comm, const std::string& label) {
  if (auto it = comms_.find(comm); it != comms_.end()) it->second.view.label = label;
}

std::vector<CommView> CollectiveTracker::comms() const {
  std::vector<CommView> out;
  for (const auto& [name, c] : comms_) {
    CommView v = c.view;
    for (auto& [pid, m] : v.members) m.pending = m.last_seq != 0 && c.open.count(m.last_seq) != 0;
    for (const auto& [pid, m] : v.members)
      if (m.last_seq == v.newest_seq && m.last_arrival_ns != 0 &&
          (v.newest_first_arrival_ns == 0 || m.last_arrival_ns < v.newest_first_arrival_ns))
        v.newest_first_arrival_ns = m.last_arrival_ns;
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::string> CollectiveTracker::comms_of(int pid) const {
  std::vector<std::string> out;
  for (const auto& [name, c] : comms_)
    if (c.view.members.count(pid)) out.push_back(name);
  return out;
}

double step_period_seconds(const std::deque<uint64_t>& arrivals_ns, size_t* bursts) {
  if (bursts) *bursts = 0;
  if (arrivals_ns.size() < 3) return 0;
  std::vector<uint64_t> gaps;
  uint64_t max_gap = 0;
  for (size_t i = 1; i < arrivals_ns.size(); ++i) {
    const uint64_t g = arrivals_ns[i] >= arrivals_ns[i - 1] ? arrivals_ns[i] - arrivals_ns[i - 1] : 0;
    gaps.push_back(g);
    max_gap = std::max(max_gap, g);
  }
  if (max_gap == 0) return 0;
  std::vector<uint64_t> burst_starts;
  for (size_t i = 1; i < arrivals_ns.size(); ++i)
    if (gaps[i - 1] * 2 >= max_gap) burst_starts.push_back(arrivals_ns[i]);
  if (bursts) *bursts = burst_starts.size();
  if (burst_starts.size() < 2) return 0;
  std::vector<double> periods;
  for (size_t i = 1; i < burst_starts.size(); ++i)
    periods.push_back(static_cast<double>(burst_starts[i] - burst_starts[i - 1]) / 1e9);
  return median_of(periods);
}

}  // namespace argus
