#include "userspace/agent/evidence.h"

#include <algorithm>

namespace argus {

void Evidence::add(DetectedEvent& ev, const std::vector<RankSnapshot>& ranks, uint64_t now_ns) const {
  // A straggler, and the GC pause that goes with one: the frames that make it late.
  if (ev.kind == EventKind::kStraggler || ev.kind == EventKind::kGcPause) add_python_frames(ev, ranks, now_ns);
  if (ev.kind == EventKind::kHang) add_hang_context(ev, ranks);
}

// A straggler's own Python frames against its peers' (the other ranks of its
// job here), over the window (at least 30 s, so that a 19 Hz sampler has seen
// enough): the functions that hold a much larger share of its samples.
void Evidence::add_python_frames(DetectedEvent& ev, const std::vector<RankSnapshot>& ranks, uint64_t now_ns) const {
  const auto span = static_cast<uint64_t>(std::max(window_seconds_, 30.0) * 1e9);
  std::vector<int> own, peers;
  for (const auto& r : ranks) {
    if (r.exited || r.job_id != ev.job_id) continue;
    (r.rank == ev.rank ? own : peers).push_back(r.pid);
  }
  python_.add_evidence(ev, own, peers, now_ns > span ? now_ns - span : 0);
}

// The links' state, and the grouped Python stacks of the job's live ranks on this
// node: bounded (16 ranks, 64 frames a thread); a few ms a rank, and hangs are rare.
void Evidence::add_hang_context(DetectedEvent& ev, const std::vector<RankSnapshot>& ranks) const {
  std::function<nlohmann::json()> links;
  {
    std::lock_guard lock(mu_);
    links = links_;
  }
  if (links) ev.evidence["links"] = links();
  std::vector<std::pair<int, int>> rank_pids;
  for (const auto& r : ranks)
    if (!r.exited && r.job_id == ev.job_id && r.rank >= 0) rank_pids.emplace_back(r.rank, r.pid);
  std::sort(rank_pids.begin(), rank_pids.end());
  ev.evidence["python_stacks"] = python_.grouped_stacks(rank_pids);
}

}  // namespace argus
