#include "userspace/collectors/cgroup_cpu_collector.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <optional>

#include "userspace/procfs/cgroup.h"
#include "userspace/procfs/cpu_stat.h"
#include "userspace/procfs/procfs.h"

namespace argus {

void CgroupCpuCollector::refresh(double /*now*/, const std::vector<int>& live_pids) {
  std::vector<uint32_t> victims(live_pids.begin(), live_pids.end());
  auto by_victim = maps_.read_stealers_of(victims);
  StealerComms comms;
  for (int pid : live_pids) {
    report_stealers(pid, by_victim[static_cast<uint32_t>(pid)], comms);
    report_cgroup_cpu(pid);
  }
}

void CgroupCpuCollector::rank_ended(int pid) {
  StealerComms comms;
  report_stealers(pid, maps_.read_stealers(static_cast<uint32_t>(pid)), comms);
  maps_.delete_stealers(static_cast<uint32_t>(pid));
  cpu_stat_bad_.erase(pid);  // a reused pid is judged afresh
}

void CgroupCpuCollector::retain(const std::set<int>& pids) {
  std::erase_if(cpu_stat_bad_, [&](int pid) { return !pids.count(pid); });
}

// A rank's CPU stealers: BPF's totals, each named as it runs now.
void CgroupCpuCollector::report_stealers(int pid, const std::vector<StealerEntry>& entries, StealerComms& comms) {
  std::vector<CpuStealer> stealers;
  for (const auto& e : entries) {
    CpuStealer s;
    s.pid = static_cast<int>(e.key.stealer_tgid);
    s.comm.assign(e.value.comm, strnlen(e.value.comm, sizeof(e.value.comm)));
    // BPF kept the name it had when it first took the CPU; a process that
    // exec'd since (taskset, a shell wrapper) is named as it runs now.
    auto [named, first] = comms.try_emplace(s.pid);
    if (first)
      if (auto now = procfs::read_file(procfs::pid_path(opts_.proc_root, s.pid, "comm"), 64); now.ok() && !now->empty())
        named->second = now->substr(0, now->find('\n'));
    if (!named->second.empty()) s.comm = named->second;
    s.cgroup = stealer_cgroup(s.pid, e.value.cgroup_id);
    s.seconds = static_cast<double>(e.value.ns) / 1e9;
    s.count = e.value.count;
    stealers.push_back(std::move(s));
  }
  facts_.set_cpu_stealers(pid, std::move(stealers));
}

// Its cgroup's CPU throttling, resolved each pass: a rank may be moved (systemd,
// a job scheduler) after it starts.
void CgroupCpuCollector::report_cgroup_cpu(int pid) {
  std::optional<procfs::CgroupDir> found;
  if (auto cg = procfs::read_cgroup(opts_.proc_root, pid); cg.ok()) found = procfs::cgroup_dir(*cg, opts_.sysfs_root, "cpu");
  if (!found) return facts_.set_cgroup_cpu(pid, std::nullopt);
  const procfs::CgroupDir dir = *found;
  auto text = procfs::read_file(dir.dir + "/cpu.stat", 64 << 10);
  if (!text.ok()) return facts_.set_cgroup_cpu(pid, std::nullopt);  // moved or gone meanwhile
  auto stat = procfs::parse_cpu_stat(*text, dir.version);
  if (!stat.ok()) {
    if (cpu_stat_bad_.insert(pid).second) {
      count_into(opts_.counters, SkipReason::kCgroupCpuStatMalformed);
      spdlog::warn("pid {}: {}/cpu.stat skipped: {}", pid, dir.dir, stat.error());
    }
    return facts_.set_cgroup_cpu(pid, std::nullopt);
  }
  if (!stat->has_quota_counters) return facts_.set_cgroup_cpu(pid, std::nullopt);
  CgroupCpuView v;
  v.present = true;
  v.path = dir.path;
  v.periods = stat->nr_periods;
  v.throttled_periods = stat->nr_throttled;
  v.throttled_seconds = static_cast<double>(stat->throttled_ns) / 1e9;
  facts_.set_cgroup_cpu(pid, std::move(v));
}

// A stealer's cgroup path (the cpu controller's, else v2), read once per
// (pid, cgroup id); "" when the process is gone.
std::string CgroupCpuCollector::stealer_cgroup(int pid, uint64_t cgroup_id) {
  if (auto it = stealer_cgroups_.find(pid); it != stealer_cgroups_.end() && it->second.first == cgroup_id)
    return it->second.second;
  if (stealer_cgroups_.size() >= kMaxStealerCgroups) stealer_cgroups_.clear();
  std::string path;
  if (auto cg = procfs::read_cgroup(opts_.proc_root, pid); cg.ok()) {
    if (auto dir = procfs::cgroup_dir(*cg, opts_.sysfs_root, "cpu")) {
      path = dir->path;
    } else {
      for (const auto& line : cg->lines)
        if (line.hierarchy == 0) path = line.path;
    }
  }
  stealer_cgroups_[pid] = {cgroup_id, path};
  return path;
}

}  // namespace argus
