#include "userspace/comms/p2p_tracker.h"

#include <algorithm>

namespace argus {

void P2pTracker::push(std::deque<Side>& q, Side s) {
  q.push_back(s);
  // Bounded: a peer that never answers keeps its oldest operations only as long as there is room.
  for (; q.size() > opts_.max_pending; q.pop_front()) count_into(opts_.caps, Cap::kOpenCollectives);
}

const P2pMatch* P2pTracker::on_op(const std::string& comm, int pid, int rank, bool send, int peer, uint64_t ts_ns) {
  if (rank < 0 || peer < 0) return nullptr;
  pids_[{comm, rank}] = pid;
  const Key key = send ? Key{comm, rank, peer} : Key{comm, peer, rank};
  Pair& p = pairs_[key];
  std::deque<Side>& mine = send ? p.sends : p.recvs;
  std::deque<Side>& theirs = send ? p.recvs : p.sends;
  if (theirs.empty()) {
    push(mine, {pid, ts_ns});
    return nullptr;
  }
  const Side other = theirs.front();
  theirs.pop_front();
  P2pMatch m;
  m.comm = comm;
  m.sender_pid = send ? pid : other.pid;
  m.receiver_pid = send ? other.pid : pid;
  m.send_ns = send ? ts_ns : other.ts_ns;
  m.recv_ns = send ? other.ts_ns : ts_ns;
  matches_.push_back(std::move(m));
  for (; matches_.size() > opts_.max_matches; matches_.pop_front()) count_into(opts_.caps, Cap::kCollectiveSamples);
  return &matches_.back();
}

int P2pTracker::pid_of(const std::string& comm, int rank) const {
  auto it = pids_.find({comm, rank});
  return it == pids_.end() ? 0 : it->second;
}

std::vector<P2pPending> P2pTracker::pending() const {
  std::vector<P2pPending> out;
  for (const auto& [key, p] : pairs_) {
    const auto& [comm, sender, receiver] = key;
    const bool sends = !p.sends.empty();
    const auto& q = sends ? p.sends : p.recvs;
    if (q.empty()) continue;
    P2pPending w;
    w.comm = comm;
    w.waiter_pid = q.front().pid;
    w.waiter_sends = sends;
    w.peer_rank = sends ? receiver : sender;
    w.since_ns = q.front().ts_ns;
    w.posted = q.size();
    out.push_back(std::move(w));
  }
  return out;
}

void P2pTracker::forget(int pid) {
  for (auto it = pairs_.begin(); it != pairs_.end();) {
    auto gone = [pid](const Side& s) { return s.pid == pid; };
    std::erase_if(it->second.sends, gone);
    std::erase_if(it->second.recvs, gone);
    it = it->second.sends.empty() && it->second.recvs.empty() ? pairs_.erase(it) : std::next(it);
  }
  std::erase_if(pids_, [pid](const auto& kv) { return kv.second == pid; });
  std::erase_if(matches_, [pid](const P2pMatch& m) { return m.sender_pid == pid || m.receiver_pid == pid; });
}

void P2pTracker::trim(uint64_t now_ns) {
  const auto window = static_cast<uint64_t>(opts_.window_seconds * 1e9);
  const uint64_t cutoff = now_ns > window ? now_ns - window : 0;
  while (!matches_.empty() && std::max(matches_.front().send_ns, matches_.front().recv_ns) < cutoff) matches_.pop_front();
}

}  // namespace argus
