#include "rdma/link_events.h"

#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "rdma/link_model.h"

namespace argus {

std::vector<DetectedEvent> link_degraded_events(const rdma::LinkEvent& event, const rdma::LinkSnapshot& snap,
                                                const std::vector<rdma::RankGpu>& ranks) {
  std::vector<DetectedEvent> out;
  if (!event.raised) return out;
  std::map<std::string, std::set<int>> by_job;
  std::map<std::string, std::string> kind_by_job;
  for (const auto& rn : rdma::rank_nics(snap, ranks)) {
    if (rn.device != event.device || rn.port != event.port) continue;
    by_job[rn.job_id].insert(rn.rank);
    kind_by_job[rn.job_id] = rn.kind;
  }
  const std::string where = event.device + " port " + std::to_string(event.port);
  const std::string head = where + " degraded (" + event.reason + ")" + (event.detail.empty() ? "" : ": " + event.detail);
  auto make = [&](const std::string& job, int rank, const std::set<int>& rank_set, const std::string& affinity,
                  const std::string& tail) {
    nlohmann::json evidence = {{"reason", event.reason},
                               {"detail", event.detail},
                               {"ranks", nlohmann::json(std::vector<int>(rank_set.begin(), rank_set.end()))},
                               {"rate", event.rate_text},
                               {"link_layer", event.link_layer}};
    if (!affinity.empty()) evidence["affinity"] = affinity;
    for (const auto& [k, v] : event.evidence) evidence[k] = v;
    DetectedEvent ev;
    ev.time = event.time_unix;
    ev.kind = EventKind::kLinkDegraded;
    ev.job_id = job;
    ev.rank = rank;
    ev.device = event.device;
    ev.port = event.port;
    ev.summary = head + "; " + tail;
    ev.evidence = std::move(evidence);
    return ev;
  };
  for (const auto& [job, rset] : by_job) {
    std::string list;
    for (int r : rset) list += (list.empty() ? "" : ", ") + std::to_string(r);
    const std::string tail = std::string(rset.size() == 1 ? "carries rank " : "carries ranks ") + list + " of job " + job;
    out.push_back(make(job, *rset.begin(), rset, kind_by_job[job], tail));
  }
  if (out.empty()) out.push_back(make("", -1, {}, "", "no tracked rank's GPU sits next to it"));
  return out;
}

}  // namespace argus
