#include "userspace/comms/arrival_order.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "userspace/common/median.h"

namespace argus {
namespace {

// Each value's peers' median: the median of every value but that one. One
// sort for all (an operation of a 64-rank group asks 64 times): in the sorted
// list, dropping one occurrence of x shifts the elements after it down by one.
std::vector<double> peers_medians(const std::vector<double>& v) {
  std::vector<double> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  const size_t m = v.size() - 1;  // values left
  std::vector<double> out;
  out.reserve(v.size());
  for (double x : v) {
    const auto k = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), x) - sorted.begin());
    auto at = [&](size_t i) { return sorted[i < k ? i : i + 1]; };
    out.push_back(m % 2 ? at(m / 2) : (at(m / 2 - 1) + at(m / 2)) / 2);
  }
  return out;
}

// The median of a member's step offsets and their robust spread (sigma from
// the MAD), at least `floor`: a rank that is late by exactly the same every
// step has no spread, and is as sure as it gets.
struct Center {
  double median = 0, sigma = 0;
};
Center robust_center(const std::vector<double>& offsets, double floor) {
  Center c;
  c.median = median_of(offsets);
  std::vector<double> dev;
  dev.reserve(offsets.size());
  for (double x : offsets) dev.push_back(std::fabs(x - c.median));
  c.sigma = std::max(1.4826 * median_of(dev), floor);
  return c;
}

// Recent steps tried by the sign test: a straggler that just turned slow shows
// in the shortest; one that has been slow all along in the longest. The chance
// is multiplied by how many were tried (Bonferroni), so trying several costs
// nothing in false alarms.
constexpr size_t kSignWindows[] = {16, 24, 32, 40};

}  // namespace

double sign_test_tail(size_t k, size_t n) {
  if (k == 0) return 1;
  if (k > n) return 0;
  // sum_{i=k}^{n} C(n,i) / 2^n, in logs (n is at most a few hundred).
  double tail = 0;
  for (size_t i = k; i <= n; ++i)
    tail += std::exp(std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
                     std::lgamma(static_cast<double>(n - i) + 1) - static_cast<double>(n) * std::log(2.0));
  return std::min(1.0, tail);
}

void ArrivalOrder::add(const std::string& comm, const std::map<int, uint64_t>& arrivals,
                       const std::map<int, double>& pre_sync, const std::map<int, double>& step_s,
                       StepStatistic stat) {
  if (arrivals.size() < 2) return;  // a lone rank lags nobody
  std::vector<int> pids;
  std::vector<double> at, sync;
  const uint64_t base = arrivals.begin()->second;
  for (const auto& [pid, ts] : arrivals) {
    pids.push_back(pid);
    at.push_back((static_cast<double>(ts) - static_cast<double>(base)) / 1e9);
    auto s = pre_sync.find(pid);
    sync.push_back(s == pre_sync.end() ? 0.0 : s->second);
  }
  uint64_t first = UINT64_MAX;
  for (const auto& [pid, ts] : arrivals) first = std::min(first, ts);
  const std::vector<double> peers_at = peers_medians(at), peers_sync = peers_medians(sync);
  for (size_t i = 0; i < pids.size(); ++i) {
    const double offset = at[i] - peers_at[i];
    const double excess = sync[i] - peers_sync[i];
    auto st = step_s.find(pids[i]);
    const double step = st == step_s.end() ? 0.0 : st->second;
    // Until the step is known an operation cannot be put in its step, and the
    // operations of one step are not independent evidence: none is kept.
    if (step <= 0) continue;
    if (offset > 0.5 * step) last_pause_ns_[{comm, pids[i]}] = first;
    auto& bins = bins_[{comm, pids[i]}];
    // A new step's bin once 80% of a step has passed since the open one began
    // (the operations of a step are not independent evidence). Operations
    // complete out of order (a pipeline's exchange is matched when its second
    // side posts): one that began a little before the open bin is of its step.
    const double apart_ns = bins.empty() ? 0 : std::fabs(static_cast<double>(first) - static_cast<double>(bins.back().start_ns));
    const bool same_step = !bins.empty() && apart_ns < 0.8 * step * 1e9;
    if (same_step) bins.back().start_ns = std::min(bins.back().start_ns, first);
    if (!same_step) {
      learn_serial({comm, pids[i]}, bins, step);  // its last step is complete
      bins.push_back({first, offset, excess, offset, excess, static_cast<int>(pids.size()) - 1, 1});
      while (bins.size() > opts_.max_bins) bins.pop_front();
      continue;
    }
    Bin& bin = bins.back();
    ++bin.ops;
    bin.offset_sum_s += offset;
    bin.sync_sum += excess;
    if (stat == StepStatistic::kMean) {
      bin.offset_s = bin.offset_sum_s / bin.ops;
      bin.sync_excess = bin.sync_sum / bin.ops;
      bin.peers = std::max(bin.peers, static_cast<int>(pids.size()) - 1);
    } else if (std::fabs(offset) > std::fabs(bin.offset_s)) {
      bin.offset_s = offset;
      bin.sync_excess = excess;
      bin.peers = static_cast<int>(pids.size()) - 1;
    }
  }
}

double independent_share(double rho) {
  rho = std::clamp(rho, 0.0, 0.99);
  return (1 - rho) / (1 + rho);
}

// Learns from the member's newest complete step how its offsets follow one
// another, when that step and the few before it say nothing of lateness: a
// straggler's steps, all on one side, would read as correlation (a level
// shift), and a pause (a checkpoint) as an outlier.
void ArrivalOrder::learn_serial(const Key& key, const std::deque<Bin>& bins, double step_s) {
  constexpr size_t kMinSteps = 8;   // a median and a spread to stand on
  constexpr double kOutlier = 3;    // robust deviations: a pause, or a rank turning late
  Serial& s = serial_[key];
  if (bins.size() < kMinSteps) return;
  std::vector<double> offsets;
  for (const auto& b : bins) offsets.push_back(b.offset_s);
  const double tie = std::max(opts_.tie_floor_s, opts_.tie_step_share * step_s);
  const Center center = robust_center(offsets, tie);
  const double r = (bins.back().offset_s - center.median) / center.sigma;
  // On one side at each of its last steps: late or early now, not evidence of
  // how healthy steps follow one another.
  size_t late = 0, early = 0;
  for (size_t i = bins.size() - kMinSteps; i < bins.size(); ++i) {
    if (bins[i].offset_s > tie) ++late;
    if (bins[i].offset_s < -tie) ++early;
  }
  if (std::fabs(r) > kOutlier || late == kMinSteps || early == kMinSteps) {
    s.has_prev = false;
    return;
  }
  if (s.has_prev) {
    s.products = opts_.serial_decay * s.products + r * s.prev;
    s.squares = opts_.serial_decay * s.squares + 0.5 * (r * r + s.prev * s.prev);
    s.pairs = opts_.serial_decay * s.pairs + 1;
  }
  s.prev = r;
  s.has_prev = true;
}

double ArrivalOrder::serial_correlation(const Key& key) const {
  auto it = serial_.find(key);
  if (it == serial_.end() || it->second.pairs < opts_.serial_min_pairs || it->second.squares <= 0) return 0;
  return std::clamp(it->second.products / it->second.squares, 0.0, opts_.serial_max);
}

CommLateness ArrivalOrder::stats(const Key& key, const std::deque<Bin>& all, double step_s, uint64_t now_ns) const {
  CommLateness out;
  out.comm = key.first;
  if (auto p = last_pause_ns_.find(key); p != last_pause_ns_.end() && now_ns >= p->second)
    out.since_pause_s = static_cast<double>(now_ns - p->second) / 1e9;
  // The steps compared: the window's, or the last max_bins steps where steps
  // are long (a minute-long step gives no evidence in a 10-s window).
  const auto window = static_cast<uint64_t>(std::max(opts_.window_seconds, step_s * (static_cast<double>(opts_.max_bins) + 5)) * 1e9);
  const uint64_t cutoff = now_ns > window ? now_ns - window : 0;
  std::vector<const Bin*> bins;
  for (const auto& b : all)
    if (b.start_ns >= cutoff) bins.push_back(&b);
  out.bins = bins.size();
  if (bins.empty()) return out;
  out.peers = bins.back()->peers;
  std::vector<double> ops;
  for (const auto* b : bins) ops.push_back(b->ops);
  out.ops_per_step = std::max(1.0, median_of(ops));
  const double tie = std::max(opts_.tie_floor_s, opts_.tie_step_share * step_s);
  std::vector<double> offsets;
  size_t late = 0, early = 0;
  double sync_sum = 0;
  for (const auto* b : bins) {
    offsets.push_back(b->offset_s);
    if (b->offset_s > tie) {
      ++late;
      sync_sum += b->sync_excess;
    } else if (b->offset_s < -tie) {
      ++early;
    }
  }
  const double n = static_cast<double>(bins.size());
  out.late_share = static_cast<double>(late) / n;
  out.early_share = static_cast<double>(early) / n;
  if (late > 0) out.late_sync_excess = sync_sum / static_cast<double>(late);
  const Center center = robust_center(offsets, tie);
  out.median_offset_s = center.median;
  out.max_offset_s = *std::max_element(offsets.begin(), offsets.end());
  // Standard error of a median: 1.2533 sigma / sqrt(n), sigma at least the tie band.
  const double sigma = center.sigma;
  // Correlated steps are fewer independent ones: for the median's standard
  // error, as the offsets' correlation says; for the sign tests, as that of
  // their signs does (2/pi asin(rho), for normal offsets).
  out.serial_correlation = serial_correlation(key);
  const double share = independent_share(out.serial_correlation);
  const double sign_share = independent_share(2 / std::numbers::pi * std::asin(out.serial_correlation));
  out.offset_se_s = 1.2533 * sigma / std::sqrt(n * share);
  out.t_score = out.median_offset_s / out.offset_se_s;
  auto independent = [&](size_t count) { return static_cast<size_t>(std::lround(static_cast<double>(count) * sign_share)); };
  // Sign tests over the recent steps: late (early) at k of the last w steps.
  const size_t tries = std::size(kSignWindows);
  for (size_t w : kSignWindows) {
    const size_t m = std::min(w, bins.size());
    size_t k_late = 0, k_early = 0;
    for (size_t i = bins.size() - m; i < bins.size(); ++i) {
      if (bins[i]->offset_s > tie) ++k_late;
      if (bins[i]->offset_s < -tie) ++k_early;
    }
    const size_t m_ind = std::max<size_t>(1, independent(m));
    out.p_late = std::min(out.p_late, std::min(1.0, sign_test_tail(std::min(m_ind, independent(k_late)), m_ind) * static_cast<double>(tries)));
    out.p_early = std::min(out.p_early, std::min(1.0, sign_test_tail(std::min(m_ind, independent(k_early)), m_ind) * static_cast<double>(tries)));
    if (m == bins.size()) break;  // the longer windows are this one
  }
  return out;
}

std::vector<CommLateness> ArrivalOrder::of(int pid, double step_s, uint64_t now_ns) const {
  std::vector<CommLateness> out;
  for (const auto& [key, bins] : bins_)
    if (key.second == pid) {
      CommLateness c = stats(key, bins, step_s, now_ns);
      if (c.bins > 0) out.push_back(std::move(c));
    }
  return out;
}

void ArrivalOrder::forget(int pid) {
  std::erase_if(bins_, [pid](const auto& kv) { return kv.first.second == pid; });
  std::erase_if(serial_, [pid](const auto& kv) { return kv.first.second == pid; });
  std::erase_if(last_pause_ns_, [pid](const auto& kv) { return kv.first.second == pid; });
}

void ArrivalOrder::trim(uint64_t now_ns) {
  // Long steps keep their bins past the window (stats() picks what counts);
  // an hour bounds what a rank that stopped communicating leaves behind.
  const uint64_t horizon = std::max<uint64_t>(static_cast<uint64_t>(opts_.window_seconds * 1e9), 3600ull * 1'000'000'000);
  const uint64_t cutoff = now_ns > horizon ? now_ns - horizon : 0;
  for (auto it = bins_.begin(); it != bins_.end();) {
    auto& d = it->second;
    while (!d.empty() && d.front().start_ns < cutoff) d.pop_front();
    if (d.empty()) serial_.erase(it->first);
    it = d.empty() ? bins_.erase(it) : std::next(it);
  }
  std::erase_if(last_pause_ns_, [&](const auto& kv) { return kv.second < cutoff; });
}

}  // namespace argus
