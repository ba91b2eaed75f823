#include "userspace/gpu_timeline/timeline.h"
#include "userspace/wire/labels.h"

#include <algorithm>
#include <cstring>
#include <string_view>

namespace argus::gpu {
namespace {

constexpr double kNs = 1e9;

// A pipeline stage waits for its input at a P2P kernel that receives: one known to
// receive, or a send/recv kernel that may (CUPTI cannot tell which half), never a
// pure send.
bool ends_in_receive(const argus_gpu_rec& r) {
  return (r.flags & ARGUS_GPU_F_P2P) != 0 && (r.flags & ARGUS_GPU_F_SEND) == 0;
}
bool is_nccl(const argus_gpu_rec& r) { return (r.flags & ARGUS_GPU_F_NCCL) != 0; }

// Producers send records nearly in start order: a folding producer sends a span
// (and its sketch records) when it closes, after the copies and kept kernels that
// came during it, so a typical batch has one run of records a few places too
// late. A stable insertion sort moves just those; a batch with more disorder
// than 8 moves a record falls back to a merge sort (which allocates and moves
// every record: it was a tenth of the agent's GPU cost when run on every batch).
void sort_by_start(std::vector<argus_gpu_rec>& v) {
  auto by_start = [](const argus_gpu_rec& a, const argus_gpu_rec& b) { return a.start_ns < b.start_ns; };
  const size_t budget = 8 * v.size();
  size_t moves = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i].start_ns >= v[i - 1].start_ns) continue;
    const argus_gpu_rec r = v[i];
    size_t j = i;
    for (; j > 0 && v[j - 1].start_ns > r.start_ns; --j) v[j] = v[j - 1];
    v[j] = r;
    moves += i - j;
    if (moves > budget) {  // what is done so far is stable: the merge sort keeps it so
      std::stable_sort(v.begin(), v.end(), by_start);
      return;
    }
  }
}

// Counted as malformed and never used: a record that ends before it starts, or
// of a kind this agent does not know (a producer newer than it: not guessed at).
// A sketch record's second word is a sum, not an end.
bool malformed(const argus_gpu_rec& r) {
  switch (r.kind) {
    case ARGUS_GPU_SKETCH:
    case ARGUS_GPU_SKETCH_PAIR:
      return false;
    case ARGUS_GPU_KERNEL:
    case ARGUS_GPU_MEMCPY:
    case ARGUS_GPU_MEMSET:
    case ARGUS_GPU_SPAN:
    case ARGUS_GPU_GAP:
    case ARGUS_GPU_UNHEARD:
      return r.end_ns < r.start_ns;
    default:
      return true;
  }
}

}  // namespace


void IntervalUnion::add(uint64_t start_ns, uint64_t end_ns) {
  if (end_ns <= start_ns) return;
  if (spans_.empty() || start_ns > spans_.back().end) {
    spans_.push_back({start_ns, end_ns});
    total_ += end_ns - start_ns;
    return;
  }
  if (start_ns >= spans_.back().start) {  // overlaps or touches the newest span
    if (end_ns > spans_.back().end) {
      total_ += end_ns - spans_.back().end;
      spans_.back().end = end_ns;
    }
    return;
  }
  // Back in time: the first span that ends at or after start, then every span it reaches.
  auto it = std::lower_bound(spans_.begin(), spans_.end(), start_ns,
                             [](const Span& s, uint64_t v) { return s.end < v; });
  if (end_ns < it->start) {
    spans_.insert(it, {start_ns, end_ns});
    total_ += end_ns - start_ns;
    return;
  }
  Span merged{std::min(start_ns, it->start), std::max(end_ns, it->end)};
  auto last = it;
  for (; last != spans_.end() && last->start <= merged.end; ++last) {
    merged.end = std::max(merged.end, last->end);
    total_ -= last->end - last->start;
  }
  total_ += merged.end - merged.start;
  *it = merged;
  spans_.erase(std::next(it), last);
}

size_t IntervalUnion::trim(uint64_t lo, size_t max_spans) {
  while (!spans_.empty() && spans_.front().end < lo) {
    total_ -= spans_.front().end - spans_.front().start;
    spans_.pop_front();
  }
  size_t capped = 0;
  for (; spans_.size() > max_spans; ++capped) {
    total_ -= spans_.front().end - spans_.front().start;
    spans_.pop_front();
  }
  return capped;
}

uint64_t IntervalUnion::covered_since(uint64_t lo, uint64_t& visited) const {
  uint64_t below = 0;
  for (const auto& s : spans_) {  // only the spans that start before lo: one after a trim at lo
    ++visited;
    if (s.start >= lo) break;
    below += std::min(s.end, lo) - s.start;
  }
  return total_ - below;
}

void Timeline::set_name(uint32_t id, std::string name) {
  auto it = names_.find(id);
  if (it != names_.end()) {
    it->second = std::move(name);
  } else if (names_.size() < opts_.max_names) {
    names_.emplace(id, std::move(name));
  } else {
    count_into(opts_.caps, Cap::kKernelNames);
  }
}

std::string Timeline::name(uint32_t id) const {
  auto it = names_.find(id);
  return it != names_.end() ? it->second : "kernel#" + std::to_string(id);
}

void Timeline::add_batch(std::vector<argus_gpu_rec> batch, uint64_t dropped, double step_seconds) {
  totals_.dropped += dropped;
  const double max_gap_s = std::max(opts_.min_step_gap_s, 2 * step_seconds);
  const auto max_gap_ns = static_cast<uint64_t>(max_gap_s * kNs);
  // Producers send completed records roughly in completion order; gaps are
  // measured in start order.
  sort_by_start(batch);
  for (const auto& r : batch) {
    if (malformed(r)) {
      totals_.malformed += 1;
      continue;
    }
    totals_.records += 1;
    switch (r.kind) {
      case ARGUS_GPU_KERNEL:
        recent_.push_back(r);
        if (r.flags & ARGUS_GPU_F_FOLDED) {
          add_kept_kernel(r);
        } else {
          add_kernel(r, max_gap_ns);
        }
        break;
      case ARGUS_GPU_SPAN: {
        recent_.push_back(r);
        argus_gpu_span span;
        std::memcpy(&span, &r, sizeof span);
        add_span(span);
        break;
      }
      case ARGUS_GPU_SKETCH: {
        argus_gpu_sketch_rec k;
        std::memcpy(&k, &r, sizeof k);
        add_sketch_entry(k.start_ns, k.name_id, k.bucket, k.count, k.sum_ns);
        break;
      }
      case ARGUS_GPU_SKETCH_PAIR: {
        argus_gpu_sketch_pair k;
        std::memcpy(&k, &r, sizeof k);
        for (int e = 0; e < 2; ++e)
          if (k.count[e] != 0) add_sketch_entry(k.start_ns, k.name_id[e], k.bucket[e], k.count[e], k.sum_ns[e]);
        break;
      }
      case ARGUS_GPU_UNHEARD: {
        argus_gpu_unheard_rec u;
        std::memcpy(&u, &r, sizeof u);
        totals_.unheard_records += u.records;
        totals_.unheard_kernels += u.kernels;
        totals_.unheard_nccl_kernels += u.nccl_kernels;
        break;
      }
      case ARGUS_GPU_GAP:
        add_gap(r.start_ns, r.end_ns, (r.flags & ARGUS_GPU_GAP_F_BUBBLE) != 0, max_gap_ns);
        break;
      case ARGUS_GPU_MEMCPY:
        recent_.push_back(r);
        totals_.memcpys += 1;
        totals_.memcpy_bytes[copy_direction_label(r.flags >> ARGUS_GPU_COPY_SHIFT)] += r.bytes;
        break;
      case ARGUS_GPU_MEMSET:
        recent_.push_back(r);
        totals_.memsets += 1;
        break;
      default:
        break;
    }
  }
  trim();
}

// One (name, bucket) entry of the span sent before it.
void Timeline::add_sketch_entry(uint64_t span_start_ns, uint32_t name_id, int32_t bucket, uint32_t count,
                                uint64_t sum_ns) {
  if (open_.count() >= opts_.max_step_kernels) {  // a producer that sends no span: still bounded
    count_into(opts_.caps, Cap::kStepSketchRecords);
    close_step(span_start_ns, "kernels");
  }
  if (open_.empty()) open_first_ns_ = span_start_ns;  // normally its span's start, set by sketch_start()
  open_.add_bucket(name_id, bucket, count, sum_ns);
}

void Timeline::add_kernel(const argus_gpu_rec& r, uint64_t max_gap_ns) {
  const uint64_t d = r.end_ns - r.start_ns;
  totals_.kernels += 1;
  totals_.kernel_ns += d;
  if (is_nccl(r)) totals_.nccl_kernel_ns += d;
  if (first_ns_ == 0 || r.start_ns < first_ns_) first_ns_ = r.start_ns;
  busy_.add(r.start_ns, r.end_ns);
  if (is_nccl(r)) nccl_.add(r.start_ns, r.end_ns);
  if (frontier_ns_ != 0 && r.start_ns > frontier_ns_) add_gap(frontier_ns_, r.start_ns, ends_in_receive(r), max_gap_ns);
  frontier_ns_ = std::max<uint64_t>(frontier_ns_, r.end_ns);
  sketch_start(r.start_ns);
  open_.add(r.name_id, r.end_ns - r.start_ns);
}

// An idle gap: counted when it is inside a step (not longer than max_gap_ns).
void Timeline::add_gap(uint64_t start_ns, uint64_t end_ns, bool bubble, uint64_t max_gap_ns) {
  if (end_ns <= start_ns) return;
  const uint64_t gap = end_ns - start_ns;
  if (gap > max_gap_ns) return;
  totals_.idle_ns += gap;
  if (bubble) totals_.bubble_ns += gap;
  gaps_.push_back({end_ns, gap, bubble});
  gaps_idle_ns_ += gap;
  if (bubble) gaps_bubble_ns_ += gap;
  recent_gaps_.push_back({end_ns, gap, bubble});
}

void Timeline::add_busy_chunk(uint64_t end_ns, uint64_t ns) {
  if (ns == 0) return;
  busy_chunks_.push_back({end_ns, ns, false});
  busy_chunks_ns_ += ns;
}

void Timeline::note_extent(uint64_t start_ns, uint64_t end_ns) {
  if (first_ns_ == 0 || start_ns < first_ns_) first_ns_ = start_ns;
  frontier_ns_ = std::max<uint64_t>(frontier_ns_, end_ns);
}

// A kernel a folding producer kept: the producer already accounted the gap before
// it (a gap record) and its share of busy time (`bytes`).
void Timeline::add_kept_kernel(const argus_gpu_rec& r) {
  const uint64_t d = r.end_ns - r.start_ns;
  totals_.kernels += 1;
  totals_.kernel_ns += d;
  if (is_nccl(r)) {
    totals_.nccl_kernel_ns += d;
    nccl_.add(r.start_ns, r.end_ns);
  }
  add_busy_chunk(r.end_ns, std::min<uint64_t>(r.bytes, d));
  note_extent(r.start_ns, r.end_ns);
  sketch_start(r.start_ns);
  open_.add(r.name_id, d);
}

// Compute kernels a producer folded: their sketch records follow in the batch.
void Timeline::add_span(const argus_gpu_span& s) {
  if (s.end_ns < s.start_ns || s.kernels == 0) {
    totals_.malformed += 1;
    return;
  }
  totals_.kernels += s.kernels;
  totals_.folded_kernels += s.kernels;
  totals_.kernel_ns += s.kernel_ns;
  add_busy_chunk(s.end_ns, std::min<uint64_t>(s.busy_ns, s.end_ns - s.start_ns));
  if (s.idle_ns != 0) {  // short in-step gaps (each < ARGUS_GPU_GAP_MIN_NS): window only, never drawn
    totals_.idle_ns += s.idle_ns;
    gaps_.push_back({s.end_ns, s.idle_ns, false});
    gaps_idle_ns_ += s.idle_ns;
  }
  note_extent(s.start_ns, s.end_ns);
  sketch_start(s.start_ns);
}

void Timeline::mark_step(uint64_t ts_ns) {
  if (!marks_.empty() && ts_ns <= marks_.back()) return;
  if (marks_.empty() && ts_ns <= open_step_ns_) return;
  marks_.push_back(ts_ns);
  while (marks_.size() > 64) {  // records stopped coming: close what is overdue
    close_step(marks_.front());
    marks_.pop_front();
  }
}

// Closes the sketches that a kernel starting at start_ns is past: steps whose next
// mark it reached, or one open too long or holding too many kernels.
void Timeline::sketch_start(uint64_t start_ns) {
  while (!marks_.empty() && start_ns >= marks_.front()) {
    close_step(marks_.front());
    marks_.pop_front();
  }
  // No step mark for too long (a producer that never calls NCCL: inference, one
  // GPU, Gloo), or too many kernels: the sketch closes anyway, so it stays bounded.
  if (!open_.empty()) {
    const uint64_t begun = open_step_ns_ != 0 ? open_step_ns_ : open_first_ns_;
    const auto max_ns = static_cast<uint64_t>(opts_.max_step_seconds * kNs);
    if (start_ns >= begun + max_ns) {
      count_into(opts_.caps, Cap::kStepSketchTime);
      close_step(start_ns, "time");
    } else if (open_.count() >= opts_.max_step_kernels) {
      count_into(opts_.caps, Cap::kStepSketchRecords);
      close_step(start_ns, "kernels");
    }
  }
  if (open_.empty()) open_first_ns_ = start_ns;
}

// closed_by "step": a step mark closes it, kept when a mark also opened it (the
// partial step before the first mark is not). Cut short: always kept.
void Timeline::close_step(uint64_t next_start_ns, const char* closed_by) {
  const bool cut = std::string_view(closed_by) != "step";
  const uint64_t start = open_step_ns_ != 0 ? open_step_ns_ : (cut ? open_first_ns_ : 0);
  if (!open_.empty() && start != 0) {
    steps_.push_back({start, open_.encode(), closed_by});
    while (steps_.size() > opts_.max_steps) steps_.pop_front();
  }
  open_.clear();  // keeps its buffer: no allocation per record
  open_step_ns_ = next_start_ns;
}

double Timeline::mean_step_bytes(size_t last) const {
  if (steps_.empty()) return 0;
  const size_t n = std::min(last, steps_.size());
  uint64_t total = 0;
  for (size_t i = steps_.size() - n; i < steps_.size(); ++i) total += steps_[i].sketch.size();
  return static_cast<double>(total) / static_cast<double>(n);
}

void Timeline::trim() {
  const auto keep_ns = static_cast<uint64_t>(opts_.trace_seconds * kNs);
  const auto window_ns = static_cast<uint64_t>(opts_.window_seconds * kNs);
  const uint64_t keep_lo = frontier_ns_ > keep_ns ? frontier_ns_ - keep_ns : 0;
  while (!recent_.empty() && recent_.front().end_ns < keep_lo) recent_.pop_front();
  if (recent_.size() > opts_.max_records) {
    count_into(opts_.caps, Cap::kGpuTraceRecords, recent_.size() - opts_.max_records);
    recent_.erase(recent_.begin(), recent_.end() - static_cast<std::ptrdiff_t>(opts_.max_records));
  }
  const uint64_t lo = frontier_ns_ > window_ns ? frontier_ns_ - window_ns : 0;
  // Long kernels (a hung collective) may start before lo and still matter: kept by end.
  count_into(opts_.caps, Cap::kGpuWindowIntervals, busy_.trim(lo, opts_.max_intervals));
  count_into(opts_.caps, Cap::kGpuWindowIntervals, nccl_.trim(lo, opts_.max_intervals));
  auto pop_gap = [this] {
    gaps_idle_ns_ -= gaps_.front().ns;
    if (gaps_.front().bubble) gaps_bubble_ns_ -= gaps_.front().ns;
    gaps_.pop_front();
  };
  while (!gaps_.empty() && gaps_.front().end_ns < lo) pop_gap();
  auto pop_chunk = [this] {
    busy_chunks_ns_ -= busy_chunks_.front().ns;
    busy_chunks_.pop_front();
  };
  while (!busy_chunks_.empty() && busy_chunks_.front().end_ns < lo) pop_chunk();
  for (; busy_chunks_.size() > opts_.max_intervals; pop_chunk()) count_into(opts_.caps, Cap::kGpuWindowIntervals);
  for (; gaps_.size() > opts_.max_intervals; pop_gap()) count_into(opts_.caps, Cap::kGpuGaps);
  while (!recent_gaps_.empty() && recent_gaps_.front().end_ns < keep_lo) recent_gaps_.pop_front();
  for (; recent_gaps_.size() > opts_.max_records; recent_gaps_.pop_front()) count_into(opts_.caps, Cap::kGpuGaps);
}

WindowStats Timeline::window(uint64_t now_ns) const {
  WindowStats w;
  const auto window_ns = static_cast<uint64_t>(opts_.window_seconds * kNs);
  window_visits_ = 0;
  if (frontier_ns_ == 0 || (busy_.size() == 0 && busy_chunks_.empty())) return w;
  // Records arrive after they complete; a rank whose GPU has gone quiet for a
  // whole window has no current figures.
  if (now_ns > frontier_ns_ && now_ns - frontier_ns_ > window_ns) return w;
  const uint64_t hi = frontier_ns_;
  const uint64_t lo = std::max(first_ns_, hi > window_ns ? hi - window_ns : 0);
  if (hi <= lo) return w;
  const double span = static_cast<double>(hi - lo);
  w.has_data = true;
  w.span_s = span / kNs;
  // Every span and gap ends at or before hi (the latest kernel end); the ones
  // that start before lo are the oldest few, clipped.
  // Busy time a folding producer summed (spans, kept kernels) comes as chunks
  // [end - ns, end), clipped like the gaps: exact to within one span (50 ms).
  uint64_t chunks = busy_chunks_ns_;
  for (const auto& c : busy_chunks_) {
    ++window_visits_;
    if (c.end_ns - c.ns >= lo) break;
    chunks -= c.end_ns <= lo ? c.ns : lo - (c.end_ns - c.ns);
  }
  w.busy_ratio = static_cast<double>(busy_.covered_since(lo, window_visits_) + chunks) / span;
  w.nccl_ratio = static_cast<double>(nccl_.covered_since(lo, window_visits_)) / span;
  uint64_t idle = gaps_idle_ns_, bubble = gaps_bubble_ns_;
  for (const auto& g : gaps_) {  // by end; they never overlap
    ++window_visits_;
    if (g.end_ns - g.ns >= lo) break;
    const uint64_t outside = g.end_ns <= lo ? g.ns : lo - (g.end_ns - g.ns);
    idle -= outside;
    if (g.bubble) bubble -= outside;
  }
  w.idle_s = static_cast<double>(idle) / kNs;
  w.bubble_ratio = static_cast<double>(bubble) / span;
  return w;
}

std::vector<Timeline::Gap> Timeline::gaps_since(uint64_t since_ns) const {
  std::vector<Gap> out;
  for (const auto& g : recent_gaps_)
    if (g.end_ns >= since_ns) out.push_back(g);
  return out;
}

std::vector<argus_gpu_rec> Timeline::recent(uint64_t since_ns) const {
  std::vector<argus_gpu_rec> out;
  for (const auto& r : recent_)
    if (r.end_ns >= since_ns) out.push_back(r);
  return out;
}

}  // namespace argus::gpu
