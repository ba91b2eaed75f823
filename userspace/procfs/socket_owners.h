// TCP retransmits to ranks (issue 12, part 4). BPF counts retransmitted
// segments per (socket inode, remote address), because the tracepoint runs in
// softirq and timer context where `current` is nobody in particular. Here the
// inodes are matched to the ranks' open sockets (/proc/PID/fd -> "socket:[N]"):
// scanned only when an unknown inode retransmits, bounded per process, cached.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "bpf/argus_netblk.h"

namespace argus {

inline constexpr size_t kMaxFdsScannedPerRank = 4096;

// Retransmitted TCP segments of one socket to one remote, since BPF created the key.
struct TcpRetransEntry {
  argus_tcp_key key;
  uint64_t segs = 0;
};

// "socket:[12345]" -> 12345; anything else (pipes, files, junk, overflow) -> nullopt.
std::optional<uint64_t> socket_inode_of_link(std::string_view target);

// The socket inodes among the first `max_fds` entries of PROC/PID/fd (empty
// when the directory cannot be read: gone, or not ours to read).
std::vector<uint64_t> socket_inodes(const std::string& proc_root, int pid, size_t max_fds);


struct TcpAttribution {
  std::map<int, std::map<std::string, uint64_t>> by_pid;  // pid -> remote -> new retransmits
  uint64_t unattributed = 0;                              // new retransmits no rank owns
  size_t fd_scans = 0;                                    // processes whose fds were read this pass
};

class TcpRetransAttributor {
 public:
  // Removes an idle key from BPF and returns its last count (nullopt: gone already).
  using TakeFn = std::function<std::optional<uint64_t>(const argus_tcp_key&)>;

  explicit TcpRetransAttributor(std::string proc_root, size_t max_fds = kMaxFdsScannedPerRank)
      : proc_root_(std::move(proc_root)), max_fds_(max_fds) {}

  // One stats pass: the counts BPF holds now and the live ranks. Returns what
  // is new since the last pass, by rank and remote. Keys unchanged since the
  // last pass are taken out of BPF (so the map holds only active sockets).
  TcpAttribution update(const std::vector<TcpRetransEntry>& entries, const std::vector<int>& live_pids,
                        const TakeFn& take);

  size_t cached_inodes() const { return owner_.size(); }

 private:
  std::optional<int> owner(uint64_t ino, const std::vector<int>& live_pids, const std::set<uint64_t>& active,
                           TcpAttribution& out);
  void rescan(const std::vector<int>& live_pids, const std::set<uint64_t>& active, TcpAttribution& out);

  std::string proc_root_;
  size_t max_fds_;
  std::map<std::vector<uint8_t>, uint64_t> last_;  // key bytes -> count read last pass
  std::map<uint64_t, int> owner_;                  // socket inode -> rank pid
  std::set<uint64_t> unowned_;                     // inodes no rank held at a scan after they appeared
  std::vector<int> last_ranks_;                    // the live ranks of the last pass, ascending
  bool scanned_this_pass_ = false;
};

}  // namespace argus
