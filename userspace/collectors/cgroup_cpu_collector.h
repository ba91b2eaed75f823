// The kernel layer's CPU side of each rank: who took its CPU while it waited
// (the stealers BPF charged, named now) and its cgroup's CPU throttling
// (cpu.stat), read each stats pass.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/rank_facts.h"
#include "userspace/probes/bpf_backend.h"

namespace argus {

struct CgroupCpuOptions {
  std::string proc_root = kDefaultProcRoot;
  std::string sysfs_root = kDefaultSysfsRoot;  // where fs/cgroup is
  AgentCounters* counters = nullptr;            // a malformed cpu.stat, once per rank
};

class CgroupCpuCollector final : public HostCollector {
 public:
  CgroupCpuCollector(BpfRankMaps& maps, RankFacts& facts, CgroupCpuOptions opts)
      : maps_(maps), facts_(facts), opts_(std::move(opts)) {}
  const char* name() const override { return "cgroup_cpu"; }
  // Every live rank: one walk of the stealer map and one comm read per stealer
  // for the whole pass (ranks on a shared node steal from each other: per rank,
  // it grew with ranks squared).
  void refresh(double now, const std::vector<int>& live_pids) override;
  // Its last stealers (its cgroup figures stay as last read); BPF's entries go.
  void rank_ended(int pid) override;
  void retain(const std::set<int>& pids) override;

 private:
  using StealerComms = std::map<int, std::string>;  // stealer pid -> its comm now ("" unreadable), one pass
  void report_stealers(int pid, const std::vector<StealerEntry>& entries, StealerComms& comms);
  void report_cgroup_cpu(int pid);
  std::string stealer_cgroup(int pid, uint64_t cgroup_id);

  static constexpr size_t kMaxStealerCgroups = 4096;  // cached stealer cgroup paths (cleared past it)
  BpfRankMaps& maps_;
  RankFacts& facts_;
  CgroupCpuOptions opts_;
  // A stealer's cgroup path by pid (with the cgroup id it was read for), and the
  // ranks whose cpu.stat was malformed (counted once).
  std::map<int, std::pair<uint64_t, std::string>> stealer_cgroups_;
  std::set<int> cpu_stat_bad_;
};

}  // namespace argus
