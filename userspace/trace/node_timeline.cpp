#include "userspace/trace/node_timeline.h"
#include "userspace/wire/labels.h"

#include <algorithm>
#include <cstring>

namespace argus {
namespace {

constexpr double kNs = 1e9;
// How far back a collective's return looks for the span its entry opened:
// spans that other threads of the rank added while it ran (a blocked call).
constexpr size_t kCallSearchDepth = 256;

std::string kernel_category(const argus_gpu_rec& r) {
  if (r.kind == ARGUS_GPU_MEMCPY) return "memcpy";
  if (r.kind == ARGUS_GPU_MEMSET) return "memset";
  if (r.kind == ARGUS_GPU_SPAN) return "kernels";
  return (r.flags & ARGUS_GPU_F_NCCL) ? "nccl_kernel" : "kernel";
}

// Folded spans, one slice each on a track per device. Spans of kernels on several
// streams can overlap; a track's slices must not partly overlap, so a span that
// starts inside the previous one starts at its end, and one wholly inside it is
// merged into it (its kernels counted there).
void add_folded_spans(TraceRank& tr, std::vector<argus_gpu_span> spans) {
  std::sort(spans.begin(), spans.end(), [](const argus_gpu_span& a, const argus_gpu_span& b) {
    return a.device_id != b.device_id ? a.device_id < b.device_id : a.start_ns < b.start_ns;
  });
  const size_t first = tr.spans.size();
  uint64_t kernels = 0, busy_ns = 0;
  auto finish = [&] {
    if (tr.spans.size() == first) return;
    TraceSpan& last = tr.spans.back();
    last.name = std::to_string(kernels) + (kernels == 1 ? " kernel" : " kernels");
    last.args["kernels"] = std::to_string(kernels);
    last.args["busy_us"] = std::to_string(busy_ns / 1000);
  };
  for (size_t i = 0; i < spans.size(); ++i) {
    const argus_gpu_span& sp = spans[i];
    const bool same_track = i > 0 && spans[i - 1].device_id == sp.device_id && tr.spans.size() > first;
    if (same_track && sp.end_ns <= tr.spans.back().end_ns) {  // inside the previous slice
      kernels += sp.kernels;
      busy_ns += sp.busy_ns;
      continue;
    }
    finish();
    TraceSpan s;
    s.track = "GPU compute (folded)" + (sp.device_id != 0 ? " device " + std::to_string(sp.device_id) : std::string());
    s.category = "kernels";
    s.start_ns = same_track ? std::max<uint64_t>(sp.start_ns, tr.spans.back().end_ns) : sp.start_ns;
    s.end_ns = sp.end_ns;
    s.args["device"] = std::to_string(sp.device_id);
    tr.spans.push_back(std::move(s));
    kernels = sp.kernels;
    busy_ns = sp.busy_ns;
  }
  finish();
}

}  // namespace

NodeTimeline::Rank& NodeTimeline::rank(int pid) {
  auto it = ranks_.find(pid);
  if (it == ranks_.end()) it = ranks_.emplace(pid, Rank(opts_.gpu)).first;
  return it->second;
}

void NodeTimeline::on_gpu_name(int pid, uint32_t id, std::string name) {
  std::lock_guard lock(mu_);
  rank(pid).gpu.set_name(id, std::move(name));
}

void NodeTimeline::on_gpu_batch(int pid, std::vector<argus_gpu_rec> recs, uint64_t lost, double step_seconds) {
  std::lock_guard lock(mu_);
  Rank& r = rank(pid);
  r.gpu_seen = true;
  r.gpu.add_batch(std::move(recs), lost, step_seconds);
}

void NodeTimeline::add_host_span(Rank& r, HostSpan span) {
  const uint64_t end_ns = span.end_ns;
  r.host.push_back(std::move(span));
  const auto keep_ns = static_cast<uint64_t>(opts_.host_trace_seconds * kNs);
  while (!r.host.empty() && end_ns > keep_ns && r.host.front().end_ns < end_ns - keep_ns) r.host.pop_front();
  for (; r.host.size() > opts_.max_host_spans; r.host.pop_front()) count_into(opts_.caps, Cap::kHostTraceSpans);
}

void NodeTimeline::on_call(int pid, bool collective, const std::string& label, const std::string& comm,
                           uint64_t start_ns, uint64_t end_ns, int ret) {
  std::lock_guard lock(mu_);
  Rank& r = rank(pid);
  if (collective) {
    // Its entry came first (same thread, same ring) and opened the span: a
    // return event carries the same clock reading as the entry's start. Only
    // the newest few are searched: the calls after it on this rank.
    size_t looked = 0;
    for (auto it = r.host.rbegin(); it != r.host.rend() && looked < kCallSearchDepth; ++it, ++looked) {
      if (it->collective && it->return_unseen && it->start_ns == start_ns && it->label == label) {
        it->end_ns = end_ns;
        it->ret = ret;
        it->return_unseen = false;
        return;
      }
    }
  }
  add_host_span(r, {collective, label, comm, start_ns, end_ns, ret});
}

void NodeTimeline::on_collective_call(int pid, const std::string& label, const std::string& comm,
                                      uint64_t start_ns) {
  std::lock_guard lock(mu_);
  add_host_span(rank(pid), {true, label, comm, start_ns, start_ns, 0, true});
}

void NodeTimeline::on_collective_enter(int pid, uint64_t ts_ns, double step_seconds) {
  std::lock_guard lock(mu_);
  Rank& r = rank(pid);
  // The collectives of a step come in a burst after its compute: a quiet gap of
  // half a step (10 ms while the period is unknown) means a new step began.
  const auto quiet_ns = static_cast<uint64_t>((step_seconds > 0 ? step_seconds / 2 : 0.01) * kNs);
  if (r.last_enter_ns == 0 || ts_ns >= r.last_enter_ns + quiet_ns) r.gpu.mark_step(ts_ns);
  r.last_enter_ns = std::max(r.last_enter_ns, ts_ns);
}

void NodeTimeline::forget(int pid) {
  std::lock_guard lock(mu_);
  ranks_.erase(pid);
}

void NodeTimeline::retain(const std::set<int>& pids) {
  std::lock_guard lock(mu_);
  std::erase_if(ranks_, [&](const auto& kv) { return !pids.count(kv.first); });
}

GpuRankView NodeTimeline::gpu_view(int pid, uint64_t now_ns) const {
  GpuRankView v;
  std::lock_guard lock(mu_);
  auto it = ranks_.find(pid);
  if (it == ranks_.end() || !it->second.gpu_seen) return v;
  const Rank& r = it->second;
  const auto& t = r.gpu.totals();
  v.seen = true;
  const auto w = r.gpu.window(now_ns);
  v.window_valid = w.has_data;
  v.busy_ratio = w.busy_ratio;
  v.nccl_ratio = w.nccl_ratio;
  v.bubble_ratio = w.bubble_ratio;
  v.records = t.records;
  v.kernels = t.kernels;
  v.folded_kernels = t.folded_kernels;
  v.unheard_records = t.unheard_records;
  v.unheard_kernels = t.unheard_kernels;
  v.unheard_nccl_kernels = t.unheard_nccl_kernels;
  v.memcpys = t.memcpys;
  v.memsets = t.memsets;
  v.kernel_ns = t.kernel_ns;
  v.nccl_kernel_ns = t.nccl_kernel_ns;
  v.idle_ns = t.idle_ns;
  v.bubble_ns = t.bubble_ns;
  v.lost = t.dropped + t.malformed + t.unheard_records;
  v.memcpy_bytes = t.memcpy_bytes;
  v.step_summary_bytes = r.gpu.mean_step_bytes(100);
  v.steps_summarized = r.gpu.steps().size();
  v.latest_end_ns = r.gpu.latest_end_ns();
  return v;
}

StepHistory NodeTimeline::step_history(int pid, size_t last) const {
  StepHistory h;
  std::lock_guard lock(mu_);
  auto it = ranks_.find(pid);
  if (it == ranks_.end()) return h;
  const auto& steps = it->second.gpu.steps();
  const size_t n = std::min(last, steps.size());
  h.steps.assign(steps.end() - static_cast<std::ptrdiff_t>(n), steps.end());
  h.names = it->second.gpu.names();
  return h;
}

// Items overlap [from, to] when they end at or after from and start at or before to.
NodeTimeline::RawTrace NodeTimeline::copy_trace(int pid, const Rank& r, uint64_t from_ns, uint64_t to_ns,
                                                size_t budget) {
  RawTrace raw;
  raw.pid = pid;
  auto in = [&](uint64_t start, uint64_t end) { return end >= from_ns && start <= to_ns; };
  const auto& recs = r.gpu.recent_records();
  const auto& gaps = r.gpu.recent_gaps();
  // Over budget: keep the newest (by end), found by one selection over the ends.
  uint64_t cutoff = 0;
  size_t at_cutoff = 0;  // over budget: items ending exactly at cutoff still taken
  {
    std::vector<uint64_t> ends;
    for (const auto& g : recs)
      if (in(g.start_ns, g.end_ns)) ends.push_back(g.end_ns);
    for (const auto& g : gaps)
      if (in(g.end_ns - g.ns, g.end_ns)) ends.push_back(g.end_ns);
    for (const auto& h : r.host)
      if (in(h.start_ns, h.end_ns)) ends.push_back(h.end_ns);
    if (ends.size() > budget) {
      raw.left_out = ends.size() - budget;
      if (budget == 0) return raw;
      const auto nth = ends.end() - static_cast<std::ptrdiff_t>(budget);
      std::nth_element(ends.begin(), nth, ends.end());
      cutoff = *nth;
      at_cutoff = static_cast<size_t>(std::count(nth, ends.end(), cutoff));
    }
  }
  auto take = [&](uint64_t start, uint64_t end) {
    if (!in(start, end) || end < cutoff) return false;
    if (raw.left_out != 0 && end == cutoff) {
      if (at_cutoff == 0) return false;
      --at_cutoff;
    }
    return true;
  };
  for (const auto& g : recs)
    if (take(g.start_ns, g.end_ns)) raw.gpu.push_back(g);
  for (const auto& g : gaps)
    if (take(g.end_ns - g.ns, g.end_ns)) raw.gaps.push_back(g);
  for (const auto& h : r.host)
    if (take(h.start_ns, h.end_ns)) raw.host.push_back(h);
  for (const auto& g : raw.gpu)
    if (g.kind == ARGUS_GPU_KERNEL && !raw.names.count(g.name_id)) raw.names[g.name_id] = r.gpu.name(g.name_id);
  return raw;
}

TraceRank NodeTimeline::build_trace(const RawTrace& raw) const {
  std::vector<argus_gpu_span> folded;
  TraceRank tr;
  tr.pid = raw.pid;
  tr.left_out = raw.left_out;
  tr.spans.reserve(raw.host.size() + raw.gpu.size() + raw.gaps.size());
  for (const auto& h : raw.host) {
    TraceSpan s{h.collective ? "NCCL calls" : "CUDA synchronize", h.label, h.start_ns, h.end_ns,
                h.collective ? "collective" : "sync", {}};
    if (!h.comm.empty()) s.args["comm"] = h.comm;
    if (h.ret != 0) s.args["result"] = std::to_string(h.ret);
    // No return event yet: it returned within the span threshold, or it is still running.
    if (h.return_unseen) s.args["return"] = "within " + std::to_string(opts_.span_min_us) + " us, or not yet";
    tr.spans.push_back(std::move(s));
  }
  for (const auto& g : raw.gpu) {
    TraceSpan s;
    s.start_ns = g.start_ns;
    s.end_ns = g.end_ns;
    s.category = kernel_category(g);
    if (g.kind == ARGUS_GPU_KERNEL) {
      s.track = "GPU stream " + std::to_string(g.stream_id);
      s.name = raw.names.at(g.name_id);
    } else if (g.kind == ARGUS_GPU_SPAN) {  // compute kernels the producer folded: drawn below
      argus_gpu_span span;
      std::memcpy(&span, &g, sizeof span);
      folded.push_back(span);
      continue;
    } else {
      s.track = "GPU copies";
      s.name = s.category == "memcpy"
                   ? std::string("memcpy ") + copy_direction_label(g.flags >> ARGUS_GPU_COPY_SHIFT)
                   : "memset";
      s.args["bytes"] = std::to_string(g.bytes);
    }
    s.args["device"] = std::to_string(g.device_id);
    s.args["correlation_id"] = std::to_string(g.correlation_id);
    tr.spans.push_back(std::move(s));
  }
  add_folded_spans(tr, std::move(folded));
  // The in-step idle gaps the metrics count (gaps outside steps are not drawn),
  // bubbles named as such.
  for (const auto& g : raw.gaps)
    tr.spans.push_back({"GPU idle", g.bubble ? "pipeline bubble" : "idle", g.end_ns - g.ns, g.end_ns,
                        g.bubble ? "bubble" : "idle", {}});
  return tr;
}

std::vector<TraceRank> NodeTimeline::trace(uint64_t from_ns, uint64_t to_ns) const {
  std::vector<RawTrace> raws;
  {
    std::lock_guard lock(mu_);
    const size_t budget = opts_.max_trace_spans / std::max<size_t>(1, ranks_.size());
    raws.reserve(ranks_.size());
    for (const auto& [pid, r] : ranks_) raws.push_back(copy_trace(pid, r, from_ns, to_ns, budget));
  }
  std::vector<TraceRank> out;
  for (const auto& raw : raws) {
    count_into(opts_.caps, Cap::kTraceAnswerSpans, raw.left_out);
    auto tr = build_trace(raw);
    if (!tr.spans.empty() || tr.left_out != 0) out.push_back(std::move(tr));
  }
  return out;
}

}  // namespace argus
