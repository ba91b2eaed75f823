#include "userspace/collectors/stuck_calls.h"

#include <spdlog/spdlog.h>

#include "userspace/procfs/thread_calls.h"

namespace argus {

void StuckCallCollector::refresh(double now, const std::vector<int>& live_pids) {
  for (int pid : live_pids) {
    if (!silent_(pid)) {
      seen_.erase(pid);  // it calls again: whatever held it is over
      continue;
    }
    auto it = seen_.find(pid);
    if (it == seen_.end()) {
      seen_[pid].silent_since = now;
      continue;
    }
    const Sighting& last = it->second;
    if (now - last.silent_since < kMinSilentSeconds) continue;
    const double every = last.empty_scans >= 2 ? kIdleRescanSeconds : kRescanSeconds;
    if (last.scanned_at > 0 && now - last.scanned_at < every) continue;
    auto maps_text = procfs::read_file(proc_root_ + "/" + std::to_string(pid) + "/maps");
    if (!maps_text) continue;  // vanished, or not readable: nothing to say
    const auto libs = procfs::library_texts(procfs::parse_maps(*maps_text), {"libnccl.so", "libcuda.so"});
    const auto inside = procfs::threads_inside(proc_root_, pid, libs);
    Sighting next;
    next.silent_since = last.silent_since;
    next.scanned_at = now;
    next.empty_scans = inside.empty() ? last.empty_scans + 1 : 0;
    for (const auto& t : inside) next.threads[t.tid] = {t.sp, t.syscall};
    if (!inside.empty()) next.library = inside.front().library;
    // Believed once a thread sits in the same place at two scans.
    for (const auto& [tid, place] : next.threads)
      if (auto old = last.threads.find(tid); old != last.threads.end() && old->second == place) next.confirmed = true;
    next.first_seen_ns = last.first_seen_ns;
    if (next.confirmed && !last.confirmed)
      spdlog::info("pid {}: blocked inside {} since before the agent saw any of its calls", pid, next.library);
    if (next.threads.empty())
      next.first_seen_ns = 0;
    else if (next.first_seen_ns == 0)
      next.first_seen_ns = now_ns_();
    seen_[pid] = std::move(next);
  }
}

std::vector<InflightWait> StuckCallCollector::waits() const {
  std::vector<InflightWait> out;
  for (const auto& [pid, s] : seen_)
    if (s.confirmed && s.first_seen_ns != 0) {
      InflightWait w;
      w.pid = pid;
      w.sync = true;  // no communicator is known: a wait of the process
      w.api = "inside " + s.library;
      w.start_ns = s.first_seen_ns;
      w.before_agent = true;
      out.push_back(std::move(w));
    }
  return out;
}

void StuckCallCollector::retain(const std::set<int>& pids) {
  std::erase_if(seen_, [&](const auto& kv) { return !pids.count(kv.first); });
}

}  // namespace argus
