#include "userspace/detect/bubble_detector.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "userspace/detect/numbers.h"

namespace argus {

using detect::fmt;
using detect::median_of;

std::vector<DetectedEvent> BubbleDetector::evaluate(const std::vector<RankSignal>& ranks, double now_unix) {
  std::vector<DetectedEvent> events;
  std::map<std::string, std::vector<const RankSignal*>> jobs;
  for (const auto& r : ranks)
    if (!r.job_id.empty() && r.rank >= 0 && r.gpu_valid && r.coverage >= opts_.min_coverage)
      jobs[r.job_id].push_back(&r);
  std::set<int> judged;
  for (const auto& [job, members] : jobs) {
    std::vector<double> ratios;
    for (const auto* r : members) ratios.push_back(r->bubble_ratio);
    const double med = median_of(ratios);
    std::vector<double> dev;
    for (double x : ratios) dev.push_back(std::fabs(x - med));
    const double mad = 1.4826 * median_of(dev);
    const double peer_limit = med + std::max(opts_.min_excess, opts_.mad_k * mad);
    for (const auto* r : members) {
      judged.insert(r->pid);
      Track& t = tracks_[r->pid];
      // A stage's idle before its receives spreads to the stages after it (they
      // wait for its sends): their bubbles rise too, the job's spread widens and
      // the outlier test above can miss the cause. The cause is the stage that
      // stands clear above all the rest: its ranks (within a tolerance of one
      // another) above the next group down by twice the excess.
      double next_down = -1;
      for (const auto* q : members)
        if (q->bubble_ratio < r->bubble_ratio - opts_.same_stage_tolerance) next_down = std::max(next_down, q->bubble_ratio);
      bool top = true;
      for (const auto* q : members) top = top && q->bubble_ratio <= r->bubble_ratio + opts_.same_stage_tolerance;
      const bool stands_clear = top && next_down >= 0 && r->bubble_ratio - next_down >= 2 * opts_.min_excess &&
                                r->bubble_ratio >= med + opts_.min_excess;
      const bool vs_peers = members.size() >= 2 && (r->bubble_ratio > peer_limit || stands_clear);
      const bool baseline_ready = t.evaluations >= opts_.baseline_evaluations;
      const bool vs_past = baseline_ready && r->bubble_ratio >= t.baseline + opts_.min_excess &&
                           r->bubble_ratio >= opts_.past_factor * t.baseline;
      if (vs_peers || vs_past) {
        ++t.hits;
        t.misses = 0;
      } else {
        ++t.misses;
        t.hits = 0;
        // The baseline learns only from unremarkable windows.
        t.baseline = t.evaluations == 0 ? r->bubble_ratio
                                        : (1 - opts_.baseline_alpha) * t.baseline + opts_.baseline_alpha * r->bubble_ratio;
        ++t.evaluations;
      }
      if (!t.flagged && t.hits >= opts_.raise_after) {
        t.flagged = true;
        DetectedEvent ev;
        ev.time = now_unix;
        ev.kind = EventKind::kPipelineBubble;
        ev.job_id = job;
        ev.rank = r->rank;
        const std::string than = vs_peers ? "the median rank of its job " + fmt("%.0f", med * 100) + "%"
                                          : "its own past " + fmt("%.0f", t.baseline * 100) + "%";
        ev.summary = "rank " + std::to_string(r->rank) + " of job " + job + ": its GPU idles " +
                     fmt("%.0f", r->bubble_ratio * 100) + "% of the time waiting on pipeline receives (" + than + ")";
        nlohmann::json peers = nlohmann::json::array();
        for (const auto* p : members) peers.push_back({{"rank", p->rank}, {"pid", p->pid}, {"bubble_ratio", p->bubble_ratio}});
        ev.evidence = {{"pid", r->pid},
                       {"bubble_ratio", r->bubble_ratio},
                       {"median_bubble_ratio", med},
                       {"peer_threshold", peer_limit},
                       {"baseline_bubble_ratio", t.baseline},
                       {"compared_with", vs_peers ? "peers" : "own_past"},
                       {"window_seconds", window_seconds_},
                       {"peers", peers}};
        events.push_back(std::move(ev));
      } else if (t.flagged && t.misses >= opts_.clear_after) {
        t.flagged = false;
      }
    }
  }
  for (auto& [pid, t] : tracks_)
    if (!judged.count(pid)) {
      t.hits = 0;
      t.flagged = false;
    }
  return events;
}

bool BubbleDetector::flagged(int pid) const {
  auto it = tracks_.find(pid);
  return it != tracks_.end() && it->second.flagged;
}

}  // namespace argus
