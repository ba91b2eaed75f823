// Each rank's memory cgroup, found while it lives (a dead process's /proc entry
// no longer names it), and its OOM-kill count then: an OOM kill when it dies is
// told from that count rising, where mark_victim is blind.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>

#include "userspace/common/defaults.h"
#include "userspace/model/host_collector.h"
#include "userspace/procfs/cgroup.h"
#include "userspace/procfs/memcg.h"

namespace argus {

class MemcgWatch final : public PidScoped {
 public:
  explicit MemcgWatch(std::string proc_root = kDefaultProcRoot, std::string sysfs_root = kDefaultSysfsRoot)
      : proc_root_(std::move(proc_root)), sysfs_root_(std::move(sysfs_root)) {}
  // A rank met for the first time: where its memory cgroup is, and its OOM kills so far.
  void watch(int pid);
  // Its memory cgroup now, and whether its OOM kills rose since it was watched.
  struct AtExit {
    std::optional<procfs::MemcgState> memcg;
    bool oom_kills_rose = false;
  };
  AtExit at_exit(int pid) const;
  void rank_ended(int pid) override { watches_.erase(pid); }
  void retain(const std::set<int>& pids) override;

 private:
  struct Watch {
    procfs::CgroupDir dir;
    std::optional<uint64_t> oom_kills;
  };
  std::string proc_root_, sysfs_root_;
  std::map<int, Watch> watches_;
};

}  // namespace argus
