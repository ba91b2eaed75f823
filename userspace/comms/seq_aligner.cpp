#include "userspace/comms/seq_aligner.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "userspace/common/median.h"

namespace argus {

std::optional<AlignedArrival> SeqAligner::on_arrival(const std::string& comm, int pid, bool anchored, uint64_t seq,
                                                     uint64_t ts_ns, CallSignature sig) {
  Comm& c = comms_[comm];
  Member& m = c[pid];
  const Call call{seq, ts_ns, sig};
  if (!m.numbered && m.probe.empty() && anchored) settle(m, 0, Numbering::kAnchored);
  if (!m.numbered) {
    const bool in_probe = m.probe.size() < kProbeCalls;
    if (in_probe) {
      m.probe.push_back(call);
      if (m.probe.size() == kProbeCalls) m.probe_full_ns = ts_ns;
    } else {
      ++m.held;
    }
    if (!try_match(c, m, ts_ns)) return std::nullopt;
    // Its earlier calls are history now (kept to number others against), not
    // passed on: the detectors resume from its newest call.
    counters_->add(AgentCount::kCollectivesUnnumbered, m.probe.size() + m.held - 1);
    m.probe.clear();
    m.held = 0;
    if (!in_probe) remember(m, {seq + static_cast<uint64_t>(m.shift), ts_ns, sig});
  } else {
    remember(m, {seq + static_cast<uint64_t>(m.shift), ts_ns, sig});
  }
  // A call the reference numbering starts after (a late rank's first, when the
  // reference had made it before its probes went live): no number to give it.
  if (static_cast<int64_t>(seq) + m.shift < 1) {
    counters_->add(AgentCount::kCollectivesUnnumbered);
    return std::nullopt;
  }
  AlignedArrival a{seq + static_cast<uint64_t>(m.shift), ts_ns, !m.passed_any, m.how, m.shift};
  m.passed_any = true;
  return a;
}

void SeqAligner::settle(Member& m, int64_t shift, Numbering how) {
  m.numbered = true;
  m.shift = shift;
  m.how = how;
  for (const Call& p : m.probe) remember(m, {p.seq + static_cast<uint64_t>(shift), p.ts_ns, p.sig});
  counters_->add(how);
}

void SeqAligner::remember(Member& m, const Call& c) {
  if (static_cast<int64_t>(c.seq) < 1) return;  // before the numbering starts (see on_arrival)
  // Kept in seq order for the lookups; a count that went back (two communicators
  // the agent could not tell apart, a reused handle) starts it afresh.
  if (!m.history.empty() && c.seq <= m.history.back().seq) m.history.clear();
  m.history.push_back(c);
  while (m.history.size() > kHistoryMax || m.history.front().ts_ns + kHistoryNs < c.ts_ns) m.history.pop_front();
}

// The numbered process (not `self`) that called most recently.
const SeqAligner::Member* SeqAligner::reference(const Comm& c, const Member& self) const {
  const Member* best = nullptr;
  for (const auto& [pid, m] : c) {
    if (&m == &self || !m.numbered || m.history.empty()) continue;
    if (!best || m.history.back().ts_ns > best->history.back().ts_ns) best = &m;
  }
  return best;
}

// How the probe's calls line up with the reference's calls `shift` later in
// its numbering; nullopt when fewer than half have a counterpart or (with
// `signatures`) any counterpart's signature differs.
std::optional<SeqAligner::Fit> SeqAligner::score(const Member& ref, const std::vector<Call>& probe, int64_t shift,
                                                 bool signatures) {
  // Signed, in ns: probe call minus its counterpart (exact in a double for
  // anything under 104 days apart).
  std::vector<double> apart;
  for (const Call& p : probe) {
    const uint64_t want = p.seq + static_cast<uint64_t>(shift);
    auto it = std::lower_bound(ref.history.begin(), ref.history.end(), want,
                               [](const Call& h, uint64_t s) { return h.seq < s; });
    if (it == ref.history.end() || it->seq != want) continue;  // before its history, or a lost event
    if (signatures && !(it->sig == p.sig)) return std::nullopt;
    apart.push_back(static_cast<double>(static_cast<int64_t>(p.ts_ns - it->ts_ns)));
  }
  if (apart.empty() || apart.size() * 2 < probe.size()) return std::nullopt;
  const double mid = median_of(apart);
  double deviation = 0;
  std::vector<double> magnitude;
  for (double a : apart) {
    deviation += std::fabs(a - mid);
    magnitude.push_back(std::fabs(a));
  }
  return Fit{deviation / static_cast<double>(apart.size()), median_of(magnitude)};
}

// The shift whose lag is most consistent, then the nearest in time among
// those about as consistent (within twice the best spread and 1 ms: jitter
// moves every shift's spread alike; a shift that pairs calls across a step's
// gap adds a share of that gap).
std::optional<int64_t> SeqAligner::best_shift(const Member& ref, const std::vector<Call>& probe,
                                              const std::set<int64_t>& shifts, bool signatures) {
  constexpr double kSpreadSlackNs = 1e6;
  std::vector<std::pair<int64_t, Fit>> fits;
  for (int64_t s : shifts)
    if (auto f = score(ref, probe, s, signatures)) fits.emplace_back(s, *f);
  if (fits.empty()) return std::nullopt;
  double least = fits.front().second.spread_ns;
  for (const auto& [s, f] : fits) least = std::min(least, f.spread_ns);
  std::optional<int64_t> best;
  double nearest = 0;
  for (const auto& [s, f] : fits)
    if (f.spread_ns <= 2 * least + kSpreadSlackNs && (!best || f.apart_ns < nearest)) {
      nearest = f.apart_ns;
      best = s;
    }
  return best;
}

bool SeqAligner::try_match(Comm& c, Member& m, uint64_t now_ns) {
  if (m.probe.size() < kProbeCalls) return false;
  const Member* ref = reference(c, m);
  if (!ref) {  // nobody numbered yet: this one sets the numbering
    settle(m, 0, Numbering::kReference);
    return true;
  }
  const bool give_up = now_ns >= m.probe_full_ns + kGiveUpNs;
  if (now_ns < m.next_try_ns && !give_up) return false;  // tried within kWaitNs: at most once a kWaitNs
  // Wait until the reference has called well past the probe, so that its
  // counterparts are all there even when it lags.
  if (ref->history.back().ts_ns < m.probe.back().ts_ns + kWaitNs && !give_up) return false;
  for (bool signatures : {true, false}) {
    if (!signatures && !give_up) {  // signatures may agree once the reference has called more
      m.next_try_ns = now_ns + kWaitNs;
      return false;
    }
    // Candidate shifts: the probe's first or last call against a reference call
    // near it in time (with the same signature, on the first pass).
    std::set<int64_t> shifts;
    for (const Call* p : {&m.probe.front(), &m.probe.back()})
      for (const Call& h : ref->history)
        if (h.ts_ns + kMaxLagNs >= p->ts_ns && h.ts_ns <= p->ts_ns + kMaxLagNs && (!signatures || h.sig == p->sig))
          shifts.insert(static_cast<int64_t>(h.seq) - static_cast<int64_t>(p->seq));
    if (const auto best = best_shift(*ref, m.probe, shifts, signatures)) {
      settle(m, *best, signatures ? Numbering::kMatched : Numbering::kTimeOnly);
      return true;
    }
  }
  settle(m, 0, Numbering::kTimeOnly);  // nothing to go on: its own count
  return true;
}

void SeqAligner::retain(const std::set<int>& pids) {
  std::set<int> gone;
  for (const auto& [name, c] : comms_)
    for (const auto& [pid, m] : c)
      if (!pids.count(pid)) gone.insert(pid);
  for (int pid : gone) forget(pid);
}

void SeqAligner::forget(int pid) {
  for (auto it = comms_.begin(); it != comms_.end();) {
    auto m = it->second.find(pid);
    if (m != it->second.end()) {
      if (!m->second.numbered) counters_->add(AgentCount::kCollectivesUnnumbered, m->second.probe.size() + m->second.held);
      it->second.erase(m);
    }
    it = it->second.empty() ? comms_.erase(it) : std::next(it);
  }
}

std::optional<int64_t> SeqAligner::shift(const std::string& comm, int pid) const {
  auto c = comms_.find(comm);
  if (c == comms_.end()) return std::nullopt;
  auto m = c->second.find(pid);
  if (m == c->second.end() || !m->second.numbered) return std::nullopt;
  return m->second.shift;
}

bool SeqAligner::holding(const std::string& comm, int pid) const {
  auto c = comms_.find(comm);
  if (c == comms_.end()) return false;
  auto m = c->second.find(pid);
  return m != c->second.end() && !m->second.numbered;
}

}  // namespace argus
