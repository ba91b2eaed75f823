#include "userspace/gpu_timeline/timeline.h"

#include <algorithm>
#include <iterator>

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

// Length of the union of [start, end) intervals (sorted by start) clipped to [lo, hi).
template <typename Pred>
uint64_t union_ns(const std::deque<argus_gpu_rec>& ks, uint64_t lo, uint64_t hi, Pred keep) {
  uint64_t total = 0, cur_s = 0, cur_e = 0;
  bool open = false;
  for (const auto& k : ks) {
    if (!keep(k)) continue;
    const uint64_t s = std::max<uint64_t>(k.start_ns, lo), e = std::min<uint64_t>(k.end_ns, hi);
    if (e <= s) continue;
    if (open && s <= cur_e) {
      cur_e = std::max(cur_e, e);
      continue;
    }
    if (open) total += cur_e - cur_s;
    cur_s = s;
    cur_e = e;
    open = true;
  }
  if (open) total += cur_e - cur_s;
  return total;
}

}  // namespace

const char* copy_direction_label(uint32_t dir) {
  switch (dir) {
    case ARGUS_GPU_COPY_HTOD: return "htod";
    case ARGUS_GPU_COPY_DTOH: return "dtoh";
    case ARGUS_GPU_COPY_DTOD: return "dtod";
    case ARGUS_GPU_COPY_HTOH: return "htoh";
    case ARGUS_GPU_COPY_PTOP: return "ptop";
    default: return "other";
  }
}

void Timeline::set_name(uint32_t id, std::string name) { names_[id] = std::move(name); }

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
  auto by_start = [](const argus_gpu_rec& a, const argus_gpu_rec& b) { return a.start_ns < b.start_ns; };
  if (!std::is_sorted(batch.begin(), batch.end(), by_start)) std::stable_sort(batch.begin(), batch.end(), by_start);
  std::vector<argus_gpu_rec> batch_kernels;  // sorted by start, as the batch
  for (const auto& r : batch) {
    if (r.end_ns < r.start_ns) {  // malformed: counted as such, never used
      totals_.malformed += 1;
      continue;
    }
    totals_.records += 1;
    recent_.push_back(r);
    switch (r.kind) {
      case ARGUS_GPU_KERNEL:
        add_kernel(r, max_gap_ns);
        batch_kernels.push_back(r);
        break;
      case ARGUS_GPU_MEMCPY:
        totals_.memcpys += 1;
        totals_.memcpy_bytes[copy_direction_label(r.flags >> ARGUS_GPU_COPY_SHIFT)] += r.bytes;
        break;
      case ARGUS_GPU_MEMSET:
        totals_.memsets += 1;
        break;
      default:
        break;
    }
  }
  merge_kernels(batch_kernels);
  trim();
}

// kernels_ stays sorted by start. Batches nearly always follow the previous
// one (an append); one that goes back in time is merged in one pass.
void Timeline::merge_kernels(const std::vector<argus_gpu_rec>& sorted) {
  if (sorted.empty()) return;
  if (kernels_.empty() || kernels_.back().start_ns <= sorted.front().start_ns) {
    kernels_.insert(kernels_.end(), sorted.begin(), sorted.end());
    return;
  }
  std::vector<argus_gpu_rec> merged;
  merged.reserve(kernels_.size() + sorted.size());
  auto by_start = [](const argus_gpu_rec& a, const argus_gpu_rec& b) { return a.start_ns < b.start_ns; };
  std::merge(kernels_.begin(), kernels_.end(), sorted.begin(), sorted.end(), std::back_inserter(merged), by_start);
  kernels_.assign(merged.begin(), merged.end());
}

void Timeline::add_kernel(const argus_gpu_rec& r, uint64_t max_gap_ns) {
  const uint64_t d = r.end_ns - r.start_ns;
  totals_.kernels += 1;
  totals_.kernel_ns += d;
  if (is_nccl(r)) totals_.nccl_kernel_ns += d;
  if (first_ns_ == 0 || r.start_ns < first_ns_) first_ns_ = r.start_ns;
  if (frontier_ns_ != 0 && r.start_ns > frontier_ns_) {
    const uint64_t gap = r.start_ns - frontier_ns_;
    if (gap <= max_gap_ns) {
      const bool bubble = ends_in_receive(r);
      totals_.idle_ns += gap;
      if (bubble) totals_.bubble_ns += gap;
      gaps_.push_back({r.start_ns, gap, bubble});
      recent_gaps_.push_back({r.start_ns, gap, bubble});
    }
  }
  frontier_ns_ = std::max<uint64_t>(frontier_ns_, r.end_ns);
  sketch_kernel(r);
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

void Timeline::sketch_kernel(const argus_gpu_rec& r) {
  while (!marks_.empty() && r.start_ns >= marks_.front()) {
    close_step(marks_.front());
    marks_.pop_front();
  }
  open_.add(r.name_id, r.end_ns - r.start_ns);
}

void Timeline::close_step(uint64_t next_start_ns) {
  if (!open_.empty() && open_step_ns_ != 0) {
    steps_.push_back({open_step_ns_, open_.encode()});
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
  while (!recent_.empty() && (recent_.size() > opts_.max_records ||
                              (frontier_ns_ > keep_ns && recent_.front().end_ns < frontier_ns_ - keep_ns)))
    recent_.pop_front();
  const uint64_t lo = frontier_ns_ > window_ns ? frontier_ns_ - window_ns : 0;
  // Long kernels (a hung collective) may start before lo and still matter: keep by end.
  while (!kernels_.empty() && (kernels_.size() > opts_.max_records || kernels_.front().end_ns < lo))
    kernels_.pop_front();
  while (!gaps_.empty() && gaps_.front().end_ns < lo) gaps_.pop_front();
  const uint64_t keep_lo = frontier_ns_ > keep_ns ? frontier_ns_ - keep_ns : 0;
  while (!recent_gaps_.empty() && (recent_gaps_.size() > opts_.max_records || recent_gaps_.front().end_ns < keep_lo))
    recent_gaps_.pop_front();
}

WindowStats Timeline::window(uint64_t now_ns) const {
  WindowStats w;
  const auto window_ns = static_cast<uint64_t>(opts_.window_seconds * kNs);
  if (frontier_ns_ == 0 || kernels_.empty()) return w;
  // Records arrive after they complete; a rank whose GPU has gone quiet for a
  // whole window has no current figures.
  if (now_ns > frontier_ns_ && now_ns - frontier_ns_ > window_ns) return w;
  const uint64_t hi = frontier_ns_;
  const uint64_t lo = std::max(first_ns_, hi > window_ns ? hi - window_ns : 0);
  if (hi <= lo) return w;
  const double span = static_cast<double>(hi - lo);
  w.has_data = true;
  w.span_s = span / kNs;
  w.busy_ratio = static_cast<double>(union_ns(kernels_, lo, hi, [](const argus_gpu_rec&) { return true; })) / span;
  w.nccl_ratio = static_cast<double>(union_ns(kernels_, lo, hi, is_nccl)) / span;
  uint64_t idle = 0, bubble = 0;
  for (const auto& g : gaps_) {
    if (g.end_ns <= lo || g.end_ns > hi) continue;
    const uint64_t ns = std::min(g.ns, g.end_ns - lo);
    idle += ns;
    if (g.bubble) bubble += ns;
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
