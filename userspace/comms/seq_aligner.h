// Numbers each rank's collectives the same way across the ranks of a
// communicator when the agent attached after some of them had begun.
//
// BPF counts a process's collectives on a communicator from the first call it
// saw. A process whose ncclCommInitRank the agent saw has every call counted,
// so its numbers are the communicator's. One that was already running (the
// agent started or restarted mid-job) counts from wherever its probes went
// live, and two ranks can be a few calls apart: the straggler detector would
// then compare a rank's call k with its peers' call k+1 and blame the wrong
// rank or the wrong cause.
//
// NCCL requires every rank of a communicator to make the same collectives in
// the same order with the same count and datatype, so each call's (op, bytes)
// is the same at the same number on every rank. A late rank's first calls are
// matched against a rank already numbered (anchored by its init, else the first
// late rank to make kProbeCalls calls): among the shifts under which every
// signature agrees, those under which the rank's lag is the most consistent
// from call to call (a shift by a few calls of identical DDP buckets pairs
// some calls across the gap between two steps' bursts), and of those the one
// whose calls are closest in time (a rank lags its peers by less than half a
// step; entry times alone cannot tell more when every call looks alike). Until then its arrivals are held back, not
// passed to the detectors; afterwards they pass at once. The shift found for a
// rank anchored ranks are numbered against is the count of collectives it made
// before the probes went live.
//
// Pure logic on (seq, time, signature): tested on recorded streams, no clock.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "userspace/model/agent_counters.h"
#include "userspace/model/pid_scoped.h"
#include "userspace/model/vocab.h"

namespace argus {

struct CallSignature {
  uint32_t op = 0;
  uint64_t bytes = 0;
  bool operator==(const CallSignature&) const = default;
};


struct AlignedArrival {
  uint64_t seq = 0;  // in the communicator's numbering
  uint64_t ts_ns = 0;
  bool first = false;                    // the first arrival of this process passed on for this communicator
  Numbering how = Numbering::kAnchored;  // how its numbering was settled
  int64_t shift = 0;                     // communicator seq - its own (BPF) seq
};

class SeqAligner final : public PidScoped {
 public:
  // Counts settled numberings and unnumbered calls into `counters` (its own when none).
  explicit SeqAligner(AgentCounters* counters = nullptr) : counters_(counters ? counters : &own_counters_) {}
  SeqAligner(const SeqAligner&) = delete;
  SeqAligner& operator=(const SeqAligner&) = delete;

  static constexpr size_t kProbeCalls = 16;               // a late process's calls matched
  static constexpr uint64_t kWaitNs = 1'000'000'000;      // reference calls after the probe before matching
  static constexpr uint64_t kGiveUpNs = 10'000'000'000;   // then match by time only
  static constexpr uint64_t kMaxLagNs = 5'000'000'000;    // counterparts further apart in time are not one call
  static constexpr uint64_t kHistoryNs = 15'000'000'000;  // calls kept per numbered process
  static constexpr size_t kHistoryMax = 16384;

  // One collective (seq from BPF, counted per process and communicator from 1).
  // `anchored`: the agent saw this process's init of the communicator. Returns
  // the arrival in the communicator's numbering, or nullopt while held back.
  std::optional<AlignedArrival> on_arrival(const std::string& comm, int pid, bool anchored, uint64_t seq,
                                           uint64_t ts_ns, CallSignature sig);
  void forget(int pid);  // the process ended
  void rank_ended(int pid) override { forget(pid); }
  void retain(const std::set<int>& pids) override;

  // Settled numberings so far, by how (counted in the agent's counters).
  uint64_t settled(Numbering n) const { return counters_->get(n); }
  // Calls held back and then dropped (superseded by the newest once matched, or
  // their process ended first): AgentCount::kCollectivesUnnumbered.
  uint64_t held_dropped() const { return counters_->get(AgentCount::kCollectivesUnnumbered); }
  // The shift of a numbered process (communicator seq - its BPF seq); nullopt
  // while held back or unknown. Against an anchored process this is the
  // collectives it made before the probes went live.
  std::optional<int64_t> shift(const std::string& comm, int pid) const;
  bool holding(const std::string& comm, int pid) const;

 private:
  struct Call {
    uint64_t seq;
    uint64_t ts_ns;
    CallSignature sig;
  };
  struct Member {
    bool numbered = false;
    bool passed_any = false;
    Numbering how = Numbering::kAnchored;
    int64_t shift = 0;
    std::deque<Call> history;  // numbered: its calls, communicator seq, oldest first
    std::vector<Call> probe;   // held back: its first calls, own seq
    uint64_t held = 0;         // held back calls after the probe
    uint64_t probe_full_ns = 0;
    uint64_t next_try_ns = 0;  // signatures disagreed: the next match no sooner
  };
  using Comm = std::map<int, Member>;

  void settle(Member& m, int64_t shift, Numbering how);
  void remember(Member& m, const Call& c);
  const Member* reference(const Comm& c, const Member& self) const;
  bool try_match(Comm& c, Member& m, uint64_t now_ns);
  // How well a shift lines the probe up with the reference: the spread of the
  // time apart (a consistent lag has none), then how far apart.
  struct Fit {
    double spread_ns = 0;  // mean absolute deviation of the signed time apart from its median
    double apart_ns = 0;   // median absolute time apart
  };
  static std::optional<Fit> score(const Member& ref, const std::vector<Call>& probe, int64_t shift, bool signatures);
  static std::optional<int64_t> best_shift(const Member& ref, const std::vector<Call>& probe,
                                           const std::set<int64_t>& shifts, bool signatures);

  std::map<std::string, Comm> comms_;
  AgentCounters own_counters_;  // where it counts when given no counters
  AgentCounters* counters_;
};

}  // namespace argus
