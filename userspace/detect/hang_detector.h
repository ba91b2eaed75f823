// Hung collectives: a communicator whose newest collective stops moving, who
// holds it up, and what every rank here is doing. Pure: the tracker's view, the
// calls hosts are blocked in and the ranks' facts in.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "userspace/comms/p2p_tracker.h"
#include "userspace/model/event.h"
#include "userspace/model/signals.h"

namespace argus {

struct HangOptions {
  double min_stall_seconds = 10;  // a communicator stalled this long is hung (--hang-threshold) ...
  double step_multiple = 5;       // ... or this many step periods, whichever is longer ...
  double healthy_stall_multiple = 1.5;  // ... or this many times the longest stall the job recovered from
  double gpu_moving_seconds = 2;  // a GPU record this recent: the collective's data still moves
};

struct CommHealth {
  std::string comm;
  std::string job_id;
  double stalled_seconds = 0;
  uint64_t newest_seq = 0;
  bool hung = false;
  bool none_missing = false;      // hung with every local rank at newest_seq (and blocked)
  std::vector<int> missing_pids;  // local ranks that never reached newest_seq, then exited ones that did
};


// A hang is a communicator whose newest collective stops moving:
// - some ranks issued collective n and others never did (for >= the limit):
//   the missing ones are named (with NCCL's async semantics the waiting ranks
//   sit in a synchronize, not in the collective call);
// - every rank here issued n and all of them are blocked (in the call or a
//   synchronize) for >= the limit: no rank here is missing; the collective
//   itself is stuck, or a rank on another node never issued it.
class HangDetector {
 public:
  explicit HangDetector(HangOptions opts = {}) : opts_(opts) {}
  // comms from the tracker, calls the hosts are blocked in (from BPF), rank facts by pid.
  // `p2p`: point-to-point operations still waiting for their other side.
  std::vector<DetectedEvent> evaluate(const std::vector<CommView>& comms, const std::vector<InflightWait>& inflight,
                                      const std::map<int, RankInfoForHang>& ranks, uint64_t now_ns, double now_unix,
                                      const std::vector<P2pPending>& p2p = {});
  const std::map<std::string, CommHealth>& health() const { return health_; }
  bool missing(int pid) const;

 private:
  double limit_for(const std::string& job, double step) const;
  void remember_recovery(const CommHealth& before, const CommHealth& now);
  std::vector<DetectedEvent> evaluate_unheard(const std::map<int, RankInfoForHang>& ranks,
                                              const std::vector<InflightWait>& inflight, uint64_t now_ns,
                                              double now_unix);
  std::vector<DetectedEvent> evaluate_p2p(const std::vector<CommView>& comms, const std::vector<P2pPending>& p2p,
                                          const std::map<int, RankInfoForHang>& ranks,
                                          const std::vector<InflightWait>& inflight, uint64_t now_ns, double now_unix,
                                          const std::set<int>& links, std::set<std::string> jobs_with_root);

  HangOptions opts_;
  std::map<std::string, CommHealth> health_;
  std::map<std::string, double> longest_recovered_;  // job -> the longest stall it recovered from (s)
  std::set<std::string> p2p_reported_;  // pending point-to-point pairs already in an event
  std::set<std::string> unheard_reported_;  // jobs whose hang before the agent is in an event
  std::map<std::string, std::set<int>> reported_;  // comm -> missing pids already in an event
  std::set<int> chain_links_;  // missing ranks held up by a root named elsewhere (evaluate)
};

}  // namespace argus
