// Point-to-point traffic between the node's ranks (pipeline stages, MoE
// all-to-all done as grouped ncclSend/ncclRecv): each send matched with the
// receive it feeds, so that a stage late to send is seen by the rank that
// waits for it, and a receive that never gets its send is a hang with two names.
//
// NCCL matches point-to-point operations in order per (communicator, sender,
// receiver): the n-th send from A to B feeds B's n-th receive from A. Host call
// times on one node share a clock, so the wait is exact: a receive posted
// before its send waited (send - recv) for the sender. Pure logic on
// timestamps, no clock: tested on recorded streams.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "userspace/model/agent_counters.h"

namespace argus {

// A matched send and receive: who waited for whom, and how long.
struct P2pMatch {
  std::string comm;
  int sender_pid = 0, receiver_pid = 0;
  uint64_t send_ns = 0, recv_ns = 0;
  // > 0: the receiver posted first and waited this long for the sender; < 0: the
  // send came first (the sender was early).
  double sender_lag_s() const { return (static_cast<double>(send_ns) - static_cast<double>(recv_ns)) / 1e9; }
};

// A receive still waiting for its send (or a send for its receive).
struct P2pPending {
  std::string comm;
  int waiter_pid = 0;   // the side that posted
  bool waiter_sends = false;
  int peer_rank = -1;   // the side that has not, by its rank in comm
  uint64_t since_ns = 0;
  uint64_t posted = 0;  // operations of this pair posted by the waiter and not matched
};

struct P2pOptions {
  size_t max_pending = 256;   // unmatched operations kept per (comm, sender, receiver)
  size_t max_matches = 4096;  // matches kept (newest)
  double window_seconds = 30;
  AgentCounters* caps = nullptr;
};

class P2pTracker {
 public:
  explicit P2pTracker(P2pOptions opts = {}) : opts_(opts) {}
  // `rank` is `pid`'s rank in `comm`, `peer` the other side's; both known (the
  // caller counts what it cannot pair).
  // Returns the match this operation completed, if it did (valid until the next call).
  const P2pMatch* on_op(const std::string& comm, int pid, int rank, bool send, int peer, uint64_t ts_ns);
  // The pid of rank `rank` of `comm`, once it posted a point-to-point operation.
  int pid_of(const std::string& comm, int rank) const;
  // Matches in the window, oldest first.
  const std::deque<P2pMatch>& matches() const { return matches_; }
  // Operations still unmatched, oldest first per pair.
  std::vector<P2pPending> pending() const;
  void forget(int pid);
  void trim(uint64_t now_ns);

 private:
  struct Side {
    int pid;
    uint64_t ts_ns;
  };
  struct Pair {  // (comm, sender rank, receiver rank)
    std::deque<Side> sends, recvs;  // at most one of them is non-empty
  };
  using Key = std::tuple<std::string, int, int>;
  void push(std::deque<Side>& q, Side s);

  P2pOptions opts_;
  std::map<Key, Pair> pairs_;
  std::map<std::pair<std::string, int>, int> pids_;  // (comm, rank) -> pid
  std::deque<P2pMatch> matches_;
};

}  // namespace argus
