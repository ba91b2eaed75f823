#include "userspace/comms/step_pattern.h"

#include <algorithm>
#include <vector>

namespace argus {
namespace {

// A period's verdict on the recent calls: the spans it is judged on, back to
// back, the newest ending with the last call. A call inserted now and then (a
// synchronize for logging every tenth step) breaks the match in the span that
// holds it, not in the others: the verdict is the majority's.
class PeriodCheck {
 public:
  static constexpr size_t kSpans = 5;
  static constexpr size_t kMaxSlip = 4;  // calls inserted at once that only slip the match

  PeriodCheck(const std::deque<StepPattern::Call>& calls, size_t p)
      : calls_(calls), p_(p), span_(std::max(3 * p, StepPattern::kMinSpan)) {
    spans_ = calls.size() < span_ + p + kMaxSlip ? 0 : std::min(kSpans, (calls.size() - p - kMaxSlip) / span_);
  }
  size_t spans() const { return spans_; }
  size_t span() const { return span_; }
  size_t end_of(size_t k) const { return calls_.size() - k * span_; }

  // Whether call i is the call p before it, or a few calls off (calls inserted
  // since put the next p calls that many off; only the inserted calls miss).
  enum class Match { kExact, kSlipped, kMiss };
  Match match_at(size_t i) const {
    const uint64_t c = calls_[i].signature;
    if (c == calls_[i - p_].signature) return Match::kExact;
    for (size_t d = 1; d <= kMaxSlip; ++d)
      if (c == calls_[i - p_ - d].signature || (p_ > d && c == calls_[i - p_ + d].signature)) return Match::kSlipped;
    return Match::kMiss;
  }

  // Whether span k (0: the newest) repeats: 98% of its calls match, at least
  // half exactly (a call off everywhere is a wrong period). Misses allowed: 2%,
  // and at least two (one event of two calls inserted).
  bool span_repeats(size_t k) const {
    const size_t allowed =
        std::max<size_t>(2, static_cast<size_t>(static_cast<double>(span_) * (1 - StepPattern::kMinMatch)));
    size_t misses = 0, slipped = 0;
    for (size_t i = end_of(k) - span_; i < end_of(k) && misses <= allowed && 2 * slipped <= span_; ++i) {
      const Match m = match_at(i);
      misses += m == Match::kMiss;
      slipped += m == Match::kSlipped;
    }
    return misses <= allowed && 2 * slipped <= span_;
  }

  // Most recent spans repeat, and the period holds more than one kind of call
  // (one call repeated says nothing of steps).
  bool repeats() const {
    if (spans_ == 0) return false;
    size_t held = 0;
    for (size_t k = 0; k < spans_; ++k) held += span_repeats(k);
    if (2 * held <= spans_) return false;
    const size_t n = calls_.size();
    for (size_t i = n - p_; i < n; ++i)
      if (calls_[i].signature != calls_[n - 1].signature) return true;
    return false;
  }

  // Calls of the newest span that match exactly.
  size_t exact_matches() const {
    size_t exact = 0;
    for (size_t i = end_of(0) - span_; i < end_of(0); ++i) exact += calls_[i].signature == calls_[i - p_].signature;
    return exact;
  }

  // NCCL operations that miss (slips forgiven) among calls [from, to), counted
  // no further than limit.
  size_t collective_misses(size_t from, size_t to, size_t limit) const {
    size_t misses = 0;
    for (size_t i = from; i < to && misses <= limit; ++i)
      misses += calls_[i].collective && match_at(i) == Match::kMiss;
    return misses;
  }

  // The same for every prefix of the calls: any range then costs O(1).
  std::vector<size_t> running_collective_misses() const {
    std::vector<size_t> before(calls_.size() + 1, 0);
    for (size_t i = 0; i < calls_.size(); ++i)
      before[i + 1] = before[i] + (i >= p_ + kMaxSlip && calls_[i].collective && match_at(i) == Match::kMiss);
    return before;
  }

 private:
  const std::deque<StepPattern::Call>& calls_;
  size_t p_, span_, spans_ = 0;
};

// Forgiving slips lets a period a few calls short pass where most calls are
// one repeated collective (a tensor-parallel all-reduce per layer): of the
// periods from the smallest that repeats to a few calls longer, the one that
// matches exactly most often.
size_t exact_period_near(const std::deque<StepPattern::Call>& calls, size_t p) {
  const PeriodCheck shortest(calls, p);
  size_t best = p, best_exact = shortest.exact_matches();
  for (size_t q = p + 1; q <= std::min(StepPattern::kMaxPeriod, p + 2 * PeriodCheck::kMaxSlip); ++q) {
    const PeriodCheck check(calls, q);
    if (check.spans() == 0) break;
    // Per as many calls as the shortest's span (a longer period's span is longer).
    const size_t exact = check.exact_matches() * shortest.span() / check.span();
    if (exact > best_exact && check.repeats()) {
      best = q;
      best_exact = exact;
    }
  }
  return best;
}

// A period whose NCCL operations miss at every repetition is a part of the
// step: gradient accumulation's micro-batches look alike, and only the step's
// gradient reduction tells one micro-batch from the next (1 call in 530 at 8
// micro-batches of 16 layers). The step is then the longer period whose NCCL
// operations miss at most half as often over the same calls, in most recent
// spans (not always a multiple: the step-end calls stand between). Calls
// inserted now and then only slip a match; a synchronize every tenth step is
// not a collective: neither makes a longer period. Most longer shifts fail
// within a few comparisons; the short period's misses are running sums.
size_t whole_step_period(const std::deque<StepPattern::Call>& calls, size_t p) {
  size_t best = p;
  std::vector<size_t> missed = PeriodCheck(calls, best).running_collective_misses();
  if (missed.back() == 0) return p;  // every NCCL operation repeats: p is the step
  for (size_t q = p + 1; q <= StepPattern::kMaxPeriod; ++q) {
    const PeriodCheck longer(calls, q);
    if (longer.spans() == 0) break;
    size_t better = 0;
    for (size_t k = 0; k < longer.spans(); ++k) {
      const size_t end = longer.end_of(k), from = end - longer.span();
      const size_t short_misses = missed[end] - missed[from];
      if (short_misses > 0 && longer.collective_misses(from, end, short_misses / 2) <= short_misses / 2) ++better;
    }
    if (2 * better > longer.spans() && longer.repeats()) {
      q = best = exact_period_near(calls, q);
      missed = PeriodCheck(calls, best).running_collective_misses();
    }
  }
  return best;
}

}  // namespace

void StepPattern::on_call(uint64_t signature, uint64_t ts_ns, bool collective) {
  calls_.push_back({signature, ts_ns, collective});
  ++calls_since_search_;
  while (calls_.size() > kMaxCalls) calls_.pop_front();
}

void StepPattern::trim_before(uint64_t cutoff_ns) {
  while (!calls_.empty() && calls_.front().ts_ns < cutoff_ns) calls_.pop_front();
}

// The smallest period that repeats (most shifts fail within a few
// comparisons), then the whole step it may be a part of; 0: none.
size_t StepPattern::search_period() const {
  for (size_t p = 1; p <= kMaxPeriod; ++p) {
    const PeriodCheck check(calls_, p);
    if (check.spans() == 0) break;
    if (check.repeats()) return whole_step_period(calls_, exact_period_near(calls_, p));
  }
  return 0;
}

double StepPattern::step_seconds(size_t* calls) const {
  if (calls) *calls = 0;
  if (period_ == 0 || calls_since_search_ >= kMaxCalls / 4 || !PeriodCheck(calls_, period_).repeats()) {
    period_ = search_period();
    calls_since_search_ = 0;
  }
  const size_t p = period_;
  if (p == 0) return 0;
  // The time the period spans over its newest span, the median (a pause
  // lengthens one period, not the median).
  const size_t n = calls_.size();
  std::vector<uint64_t> periods;
  for (size_t i = n - PeriodCheck(calls_, p).span(); i < n; ++i) periods.push_back(calls_[i].ts_ns - calls_[i - p].ts_ns);
  std::nth_element(periods.begin(), periods.begin() + periods.size() / 2, periods.end());
  if (calls) *calls = p;
  return static_cast<double>(periods[periods.size() / 2]) / 1e9;
}

}  // namespace argus
