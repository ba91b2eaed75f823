#include "userspace/procfs/socket_owners.h"

#include "userspace/wire/labels.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>

namespace argus {
namespace {

std::vector<uint8_t> key_bytes(const argus_tcp_key& k) {
  const auto* p = reinterpret_cast<const uint8_t*>(&k);
  return {p, p + sizeof(k)};
}

struct DirCloser {
  void operator()(DIR* d) const { closedir(d); }
};

}  // namespace

std::optional<uint64_t> socket_inode_of_link(std::string_view target) {
  constexpr std::string_view kPrefix = "socket:[";
  if (target.size() <= kPrefix.size() + 1 || target.substr(0, kPrefix.size()) != kPrefix || target.back() != ']')
    return std::nullopt;
  const std::string_view digits = target.substr(kPrefix.size(), target.size() - kPrefix.size() - 1);
  if (digits.empty() || digits.size() > 20 || digits.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  uint64_t ino = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ino);
  if (ec != std::errc() || end != digits.data() + digits.size() || ino == 0) return std::nullopt;
  return ino;
}

std::vector<uint64_t> socket_inodes(const std::string& proc_root, int pid, size_t max_fds) {
  std::vector<uint64_t> out;
  const std::string dir = proc_root + "/" + std::to_string(pid) + "/fd";
  std::unique_ptr<DIR, DirCloser> d(opendir(dir.c_str()));
  if (!d) return out;
  size_t seen = 0;
  char target[64];
  while (dirent* e = readdir(d.get())) {
    if (e->d_name[0] == '.') continue;
    if (++seen > max_fds) break;
    const std::string link = dir + "/" + e->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof(target));
    if (n <= 0 || static_cast<size_t>(n) >= sizeof(target)) continue;  // not a link, or too long to be a socket
    if (auto ino = socket_inode_of_link(std::string_view(target, static_cast<size_t>(n)))) out.push_back(*ino);
  }
  return out;
}


void TcpRetransAttributor::rescan(const std::vector<int>& live_pids, const std::set<uint64_t>& active,
                                  TcpAttribution& out) {
  scanned_this_pass_ = true;
  std::map<uint64_t, int> fresh;
  std::vector<int> pids = live_pids;
  std::sort(pids.begin(), pids.end());  // a socket shared by two ranks goes to the lower pid
  for (int pid : pids) {
    ++out.fd_scans;
    for (uint64_t ino : socket_inodes(proc_root_, pid, max_fds_)) fresh.emplace(ino, pid);
  }
  // Sockets already matched keep their rank while BPF still counts them: the
  // rank may have closed them, or exited, since.
  for (const auto& [ino, pid] : owner_)
    if (active.count(ino)) fresh.emplace(ino, pid);
  owner_ = std::move(fresh);
  for (uint64_t ino : active)
    if (!owner_.count(ino)) unowned_.insert(ino);
}

std::optional<int> TcpRetransAttributor::owner(uint64_t ino, const std::vector<int>& live_pids,
                                               const std::set<uint64_t>& active, TcpAttribution& out) {
  if (ino == 0) return std::nullopt;  // no file: closed by its owner (orphaned), or a kernel socket
  if (auto it = owner_.find(ino); it != owner_.end()) return it->second;
  if (unowned_.count(ino) || scanned_this_pass_) return std::nullopt;
  rescan(live_pids, active, out);
  if (auto it = owner_.find(ino); it != owner_.end()) return it->second;
  return std::nullopt;
}

TcpAttribution TcpRetransAttributor::update(const std::vector<TcpRetransEntry>& entries,
                                            const std::vector<int>& live_pids, const TakeFn& take) {
  TcpAttribution out;
  scanned_this_pass_ = false;
  std::vector<int> ranks = live_pids;
  std::sort(ranks.begin(), ranks.end());
  if (ranks != last_ranks_) unowned_.clear();  // a new rank may hold them
  last_ranks_ = std::move(ranks);
  std::set<uint64_t> active;
  for (const auto& e : entries) active.insert(e.key.ino);
  std::map<std::vector<uint8_t>, uint64_t> next;
  for (const auto& e : entries) {
    auto kb = key_bytes(e.key);
    const auto prev_it = last_.find(kb);
    const uint64_t prev = prev_it == last_.end() ? 0 : prev_it->second;
    uint64_t now = e.segs;
    bool keep = true;
    if (prev_it != last_.end() && now == prev) {
      // Idle for a whole pass: take it out of BPF with whatever came meanwhile.
      if (auto last = take(e.key)) now = *last;
      keep = false;
    }
    const uint64_t delta = now >= prev ? now - prev : now;  // smaller: re-created since it was read
    if (keep) next[std::move(kb)] = now;
    if (delta == 0) continue;
    const std::string remote = tcp_remote_label(e.key.family, e.key.addr);
    if (auto pid = owner(e.key.ino, live_pids, active, out))
      out.by_pid[*pid][remote] += delta;
    else
      out.unattributed += delta;
  }
  last_ = std::move(next);
  // Forget inodes BPF no longer counts.
  std::erase_if(owner_, [&](const auto& kv) { return !active.count(kv.first); });
  std::erase_if(unowned_, [&](uint64_t ino) { return !active.count(ino); });
  return out;
}

}  // namespace argus
