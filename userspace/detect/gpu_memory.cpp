#include "userspace/detect/gpu_memory.h"

#include <algorithm>
#include <cmath>

#include "userspace/detect/rank_exit.h"

namespace argus {

namespace {

constexpr double kPairSeconds = 0.1;       // a stack and its OOM: the same return, microseconds apart
constexpr size_t kMaxUnpairedStacks = 64;  // stacks whose OOM record was lost do not pile up
constexpr double kUnknownStepWindowSeconds = 60;

double seconds_between(uint64_t a_ns, uint64_t b_ns) {
  return std::fabs(static_cast<double>(a_ns) - static_cast<double>(b_ns)) / 1e9;
}

std::string innermost_frame(const nlohmann::json& stack) {
  if (!stack.is_array() || stack.empty()) return "";
  return stack.back().get<std::string>();
}

std::string who(const OomRecord& r, const std::optional<RankSnapshot>& rank) {
  if (rank && rank->identified())
    return "rank " + std::to_string(rank->rank) + " of job " + rank->job_id + " (pid " + std::to_string(r.pid) + ")";
  return "pid " + std::to_string(r.pid);
}

nlohmann::json bytes_or_null(uint64_t v) { return v != 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }

}  // namespace

std::string held_phrase(uint64_t held, uint64_t total) {
  if (total == 0) return format_bytes(held);
  return format_bytes(held) + " of " + format_bytes(total);
}

std::string gpu_oom_phrase(const nlohmann::json& g) {
  if (!g.is_object()) return "";
  const uint64_t held = g.value("held_bytes", uint64_t{0});
  const uint64_t total = g["total_bytes"].is_number() ? g["total_bytes"].get<uint64_t>() : 0;
  return g.value("api", std::string("an allocation")) + " of " + format_bytes(g.value("asked_bytes", uint64_t{0})) +
         " failed (" + g.value("code", std::string("CUDA_ERROR_OUT_OF_MEMORY")) + ") while it held " +
         held_phrase(held, total) + " of GPU memory";
}

bool OomReports::attach_stack(Pending& p, const Stack& s) const {
  if (s.pid != p.first.pid || s.tid != p.first.tid || seconds_between(s.ts_ns, p.first.ts_ns) > kPairSeconds)
    return false;
  p.stack = s.frames;
  return true;
}

void OomReports::on_oom(const OomRecord& r) {
  auto it = by_pid_.find(r.pid);
  // The framework's retry after freeing its cache, or the next failure of the
  // same burst: counted in the event already made (or still pending).
  if (it != by_pid_.end() && seconds_between(r.ts_ns, it->second.first.ts_ns) < kBurstSeconds) {
    ++it->second.failed_calls;
    return;
  }
  Pending& p = by_pid_[r.pid];
  p = Pending{r};
  for (auto s = stacks_.begin(); s != stacks_.end(); ++s)
    if (attach_stack(p, *s)) {
      stacks_.erase(s);
      break;
    }
}

void OomReports::on_stack(int pid, uint32_t tid, uint64_t ts_ns, std::vector<std::string> frames_root_first) {
  Stack s{pid, tid, ts_ns, std::move(frames_root_first)};
  if (auto it = by_pid_.find(pid); it != by_pid_.end() && it->second.stack.is_null() && attach_stack(it->second, s))
    return;
  stacks_.push_back(std::move(s));
  while (stacks_.size() > kMaxUnpairedStacks) stacks_.pop_front();
}

DetectedEvent OomReports::event_of(const Pending& p, const std::optional<RankSnapshot>& rank) const {
  OomRecord r = p.first;
  // The total as learnt since, where the failing call had none: a framework
  // asks for it to word its error, after the failure.
  if (r.total_bytes == 0 && rank) r.total_bytes = rank->gpu_memory.total_bytes;
  DetectedEvent ev;
  ev.time = r.unix_time;
  ev.kind = EventKind::kOom;
  if (rank && rank->identified()) {
    ev.job_id = rank->job_id;
    ev.rank = rank->rank;
  }
  ev.summary = who(r, rank) + " ran out of GPU memory: " + r.api + " of " + format_bytes(r.asked_bytes) +
               " failed (" + r.code + ") while it held " +
               held_phrase(static_cast<uint64_t>(std::max<int64_t>(r.held_bytes, 0)), r.total_bytes) + " (peak " +
               format_bytes(r.peak_bytes) + ")";
  if (const std::string where = innermost_frame(p.stack); !where.empty()) ev.summary += ", in " + where;
  ev.evidence = {{"pid", r.pid},
                 {"tid", r.tid},
                 {"api", r.api},
                 {"code", r.code},
                 {"asked_bytes", r.asked_bytes},
                 {"held_bytes", r.held_bytes},
                 {"peak_bytes", r.peak_bytes},
                 {"total_bytes", bytes_or_null(r.total_bytes)},
                 {"failed_calls", p.failed_calls},
                 {"python_stack", p.stack}};
  return ev;
}

std::vector<DetectedEvent> OomReports::take_ready(uint64_t now_ns,
                                                  const std::function<std::optional<RankSnapshot>(int)>& rank_of) {
  std::vector<DetectedEvent> out;
  for (auto& [pid, p] : by_pid_) {
    if (p.reported) continue;
    if (p.stack.is_null() && seconds_between(now_ns, p.first.ts_ns) < kStackWaitSeconds) continue;
    p.reported = true;
    out.push_back(event_of(p, rank_of(pid)));
  }
  return out;
}

nlohmann::json OomReports::recent(int pid, uint64_t now_ns, uint64_t known_total) const {
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end() || seconds_between(now_ns, it->second.first.ts_ns) > kCauseSeconds) return nullptr;
  const OomRecord& r = it->second.first;
  return {{"api", r.api},
          {"code", r.code},
          {"asked_bytes", r.asked_bytes},
          {"held_bytes", r.held_bytes},
          {"peak_bytes", r.peak_bytes},
          {"total_bytes", bytes_or_null(r.total_bytes != 0 ? r.total_bytes : known_total)},
          {"failed_calls", it->second.failed_calls},
          {"python_stack", it->second.stack}};
}

void OomReports::retain(const std::set<int>& pids) {
  std::erase_if(by_pid_, [&](const auto& kv) { return !pids.count(kv.first); });
  std::erase_if(stacks_, [&](const Stack& s) { return !pids.count(s.pid); });
}

namespace {

// Held at the end of each of kSegments parts of [now - window, now] (the newest
// sample at or before it): the growth over the window when every part grew, else 0.
double growth_in_every_part(const std::deque<std::pair<double, int64_t>>& track, double now_s, double window,
                            int segments) {
  auto held_at = [&](double t) {
    int64_t h = track.front().second;
    for (const auto& [ts, held] : track) {
      if (ts > t) break;
      h = held;
    }
    return h;
  };
  int64_t prev = held_at(now_s - window);
  const int64_t first = prev;
  for (int i = 1; i <= segments; ++i) {
    const int64_t h = held_at(now_s - window + window * i / segments);
    if (h <= prev) return 0;
    prev = h;
  }
  return static_cast<double>(prev - first);
}

}  // namespace

// Growth in every one of kSegments parts of the window: a pool that grew while
// the job warmed up and then held still is flat in its last parts; a leak
// climbs in all of them. A step period, where known, sets the window (a dozen
// steps), so a slow step's leak is judged over as many steps as a fast one's.
// A leak that climbs in stairs wider than a part (the virtual memory API maps
// 20 MiB pages, so a small leak takes a page every few steps) grows in every
// part of a longer window: the window doubles, up to kMaxWindowSeconds, as
// long as the rank was watched that long.
GpuMemoryVerdict GpuMemoryJudge::judge(int pid, const GpuMemoryView& m, double step_seconds, double now_s) {
  GpuMemoryVerdict v;
  if (m.total_bytes != 0 && m.held_bytes > 0)
    v.pressure = static_cast<double>(m.held_bytes) >= kPressureShare * static_cast<double>(m.total_bytes);
  if (!m.seen() && m.held_bytes == 0) return v;
  auto& track = tracks_[pid];
  track.emplace_back(now_s, m.held_bytes);
  while (track.size() > 2 && track[1].first <= now_s - kMaxWindowSeconds) track.pop_front();
  const double shortest = step_seconds > 0
                              ? std::clamp(kStepsPerWindow * step_seconds, kMinWindowSeconds, kMaxWindowSeconds)
                              : kUnknownStepWindowSeconds;
  for (double window = shortest; window <= kMaxWindowSeconds; window *= 2) {
    if (track.front().first > now_s - window) break;  // not watched that long yet
    const double grown = growth_in_every_part(track, now_s, window, kSegments);
    if (grown <= 0) continue;
    v.growth_window_seconds = window;
    v.growth_bytes_per_second = grown / window;
    if (m.total_bytes != 0 && static_cast<double>(m.total_bytes) > static_cast<double>(m.held_bytes))
      v.seconds_to_full =
          (static_cast<double>(m.total_bytes) - static_cast<double>(m.held_bytes)) / v.growth_bytes_per_second;
    break;
  }
  return v;
}

void GpuMemoryJudge::retain(const std::set<int>& pids) {
  std::erase_if(tracks_, [&](const auto& kv) { return !pids.count(kv.first); });
}

}  // namespace argus
