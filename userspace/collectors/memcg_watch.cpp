#include "userspace/collectors/memcg_watch.h"

namespace argus {

void MemcgWatch::watch(int pid) {
  auto dir = procfs::memcg_dir(proc_root_, sysfs_root_, pid);
  if (!dir) return;
  Watch w{*dir, std::nullopt};
  if (auto m = procfs::read_memcg(*dir); m.ok()) w.oom_kills = m->oom_kills;
  watches_[pid] = std::move(w);
}

MemcgWatch::AtExit MemcgWatch::at_exit(int pid) const {
  AtExit out;
  auto w = watches_.find(pid);
  if (w == watches_.end()) return out;
  if (auto m = procfs::read_memcg(w->second.dir); m.ok()) out.memcg = std::move(*m);
  out.oom_kills_rose = out.memcg && out.memcg->oom_kills && w->second.oom_kills &&
                       *out.memcg->oom_kills > *w->second.oom_kills;
  return out;
}

void MemcgWatch::retain(const std::set<int>& pids) {
  std::erase_if(watches_, [&](const auto& kv) { return !pids.count(kv.first); });
}

}  // namespace argus
