// A link's raised degradation as the contract's events: one per job whose ranks
// use the port ("rank" the lowest of them, evidence.ranks all of them), or one
// with job_id and rank unset when no known rank uses it.
//   {"time": RFC 3339, "kind": "link_degraded", "job_id", "rank", "device", "port",
//    "summary": "mlx5_2 port 1 degraded (errors): ...; carries ranks 4, 5 of job J",
//    "evidence": {"reason", "detail", "ranks": [...], "affinity", "rate", "link_layer",
//                 <the detector's numbers>}}
// A cleared reason gives none.
#pragma once
#include <vector>

#include "rdma/link_model.h"
#include "userspace/model/event.h"

namespace argus {

std::vector<DetectedEvent> link_degraded_events(const rdma::LinkEvent& event, const rdma::LinkSnapshot& snap,
                                                 const std::vector<rdma::RankGpu>& ranks);

}  // namespace argus
