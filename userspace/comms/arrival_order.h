// How each rank arrives at the operations of each of its communicators against
// its peers there, step by step: the statistics a straggler is judged on.
//
// Why not "behind the earliest rank by more than N ms": per-rank compute varies
// from step to step in real jobs (sequence lengths), so some rank is always
// last, and a 2-rank tensor-parallel group has a last rank at every call. A
// straggler is the rank that is behind its peers at (nearly) every step, by a
// margin its peers' spread does not explain. So, per completed operation, each
// member's offset from the median of its peers (leave-one-out: in a 2-rank
// group, the other one; half a node slow is still behind the median peer);
// per step, the largest of a member's offsets (the operations of one step are
// not independent: a late host is late at all of them; for point-to-point
// pairs their mean, see StepStatistic); and over the recent
// steps a sign test (late at how many, against chance) and a robust t score
// (median offset over its standard error). Lateness that moves between ranks
// from step to step passes neither.
//
// Pure: timestamps in, no clock. Bounded per (communicator, rank).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "userspace/model/signals.h"

namespace argus {

// What stands for a step of a member's offsets on one communicator.
enum class StepStatistic {
  kLargest,  // the largest (signed): a late host is late at every collective of its step
  // The mean: a pipeline's sends and receives wait by its schedule, one side
  // at one exchange, the other at the next; which exchange is the largest
  // flips with jitter, their sum over a step does not (and is what a stage's
  // replicas share).
  kMean,
};

struct ArrivalOrderOptions {
  size_t max_bins = 40;  // steps kept per (communicator, rank)
  double window_seconds = 30;
  // Offsets within this of the peers' median are neither late nor early: the
  // larger of the floor and a share of the step (steps from 2 ms to a minute).
  double tie_floor_s = 20e-6;
  double tie_step_share = 0.005;
  // Consecutive steps are not independent: a rank whose host ran long finishes
  // its optimizer late and starts the next step late (nothing synchronizes the
  // ranks between), and a step whose operations span more than a bin shares
  // its jitter between two. The tests count the steps as the fewer
  // independent ones this correlation leaves (serial_correlation), learnt
  // with this decay per step from the steps where the rank was neither late
  // nor early, ...
  double serial_decay = 0.99;
  // ... once this many pairs of steps were seen, ...
  double serial_min_pairs = 10;
  // ... and at most this much (the evidence a straggler needs grows as
  // (1 + rho) / (1 - rho): 0.8 asks nine times as many steps).
  double serial_max = 0.8;
};

class ArrivalOrder {
 public:
  explicit ArrivalOrder(ArrivalOrderOptions opts = {}) : opts_(opts) {}

  // One operation of `comm` completed: each member's arrival (pid -> ns), and
  // each member's share of the same span before its own arrival spent in its own
  // synchronize calls (pid -> 0..1; absent: none). `step_s` says how long a step
  // of each pid is (0: unknown, and its offsets are not kept).
  void add(const std::string& comm, const std::map<int, uint64_t>& arrivals,
           const std::map<int, double>& pre_sync, const std::map<int, double>& step_s,
           StepStatistic stat = StepStatistic::kLargest);
  // The rank's lateness on each of its communicators, as of now_ns.
  std::vector<CommLateness> of(int pid, double step_s, uint64_t now_ns) const;
  void forget(int pid);
  void trim(uint64_t now_ns);

 private:
  struct Bin {
    uint64_t start_ns = 0;
    double offset_s = 0;       // the member's offset in this step (signed; the StepStatistic)
    double sync_excess = 0;    // with that offset: its pre-arrival sync share above its peers'
    double offset_sum_s = 0;   // of every operation of the step (kMean)
    double sync_sum = 0;
    int peers = 0;
    int ops = 1;  // operations in this step
  };
  using Key = std::pair<std::string, int>;  // (comm, pid)
  // The lag-1 correlation of a member's step offsets, learnt from its steps
  // on time (standardized residuals around the median of its kept steps,
  // exponentially weighted).
  struct Serial {
    double products = 0;  // sum of r[t] * r[t-1]
    double squares = 0;   // sum of r[t]^2
    double pairs = 0;     // weight of the pairs summed
    double prev = 0;      // the last step's residual ...
    bool has_prev = false;  // ... when it was on time (else the chain restarts)
  };
  CommLateness stats(const Key& key, const std::deque<Bin>& bins, double step_s, uint64_t now_ns) const;
  void learn_serial(const Key& key, const std::deque<Bin>& bins, double step_s);
  double serial_correlation(const Key& key) const;

  ArrivalOrderOptions opts_;
  std::map<Key, std::deque<Bin>> bins_;
  std::map<Key, Serial> serial_;
  std::map<Key, uint64_t> last_pause_ns_;  // when it was last behind by over half a step (kept past its bins)
};

// P(X >= k) for X ~ Binomial(n, 1/2): how unlikely k late steps of n are by chance.
double sign_test_tail(size_t k, size_t n);
// The share of n steps with lag-1 correlation rho that counts as independent
// (the variance of their mean grows by (1 + rho) / (1 - rho)).
double independent_share(double rho);

}  // namespace argus
