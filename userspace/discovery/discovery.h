// Finds the node's training ranks: processes that map a file exporting the
// NCCL or CUDA API. A full /proc scan at start, exec hints from BPF for new
// processes, and rechecks that back off for processes that are not ranks.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/attach/attach_plan.h"
#include "userspace/procfs/procfs.h"
#include "userspace/model/rank_identity.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/vocab.h"

namespace argus {

// Decides (and, in the agent, probes) one mapped file. Behind an interface so
// that discovery is tested on fake /proc trees without BPF.
class LibraryProber {
 public:
  virtual ~LibraryProber() = default;
  virtual LibraryKind consider(int pid, const procfs::MapEntry& mapping) = 0;
};

struct FoundProcess {
  int pid = 0;
  uint64_t start_ticks = 0;
  int ppid = 0;  // 0 when unknown
  std::string comm;
  RankIdentity identity;
  std::vector<std::string> libraries;  // paths (in the process's namespace) of probed files
  bool selected = true;  // false: it fails --only-env, the agent must ignore it
};

struct DiscoveryOptions {
  std::string proc_root = kDefaultProcRoot;
  int self_pid = 0;                  // never track the agent itself
  // Rechecks cost a maps read each (~0.1 ms): young processes (which may still
  // dlopen NCCL) are rechecked often, old ones rarely. A library already probed
  // needs no recheck at all: BPF reports a new caller at its first call.
  double young_seconds = 30;         // a process this young...
  double young_recheck_seconds = 2;  // ... is rechecked this often
  double old_recheck_seconds = 30;   // older non-ranks (and unreadable ones) this often
  double rank_recheck_seconds = 10;  // ranks, for libraries loaded later
  // Non-ranks whose dynamic loader is probed tell of every dlopen themselves
  // (on_link_map_change), and a process with no mappings (a kernel thread)
  // maps nothing until an exec: both are rechecked only this often, as a net.
  double hinted_recheck_seconds = 300;
  // --only-env KEY=VALUE: track only processes whose environment has it (several
  // agents sharing one machine, each watching its own simulated node).
  std::string only_env_key{};
  std::string only_env_value{};
  AgentCounters* counters = nullptr;  // its skips (argus_agent_discovery_skips_total)
};

class Discovery {
 public:
  Discovery(DiscoveryOptions opts, LibraryProber& prober);

  // One scan pass at monotonic time now_s: checks new and due processes.
  std::vector<FoundProcess> scan(double now_s);
  // An exec was seen: look at the new image now and a few times soon after,
  // since the dynamic loader maps libraries after exec returns.
  void on_exec(int pid, double now_s);
  // The loader changed the process's link map (a dlopen, from BPF): look at it
  // again soon. Hints coalesce: one look per settle interval, and every hint is
  // followed by a look that starts after it.
  void on_link_map_change(int pid, double now_s);
  // Exec follow-ups that are due.
  std::vector<FoundProcess> run_due(double now_s);
  // When the next exec follow-up is due (monotonic seconds); +infinity when none is.
  double next_followup() const;
  // Looks at one process right now (also for BPF's "first call" hint).
  std::optional<FoundProcess> check(int pid, double now_s);

  // The pids the last scan() found in /proc.
  const std::set<int>& alive_pids() const { return alive_; }


 private:
  struct PidState {
    double first_seen = 0;
    double last_check = 0;
    bool is_rank = false;
    bool unreadable = false;  // permission denied: rechecking every scan would not help
    bool hinted = false;      // its loader is probed (each dlopen hints) or it maps nothing
    bool loader_spoke = false;  // a link-map hint came since the exec: the loader tells what it maps
    std::vector<double> followups;
  };
  bool due(const PidState& st, double now_s) const;
  static void drop_hinted_followups(PidState& st, double now_s);

  DiscoveryOptions opts_;
  LibraryProber& prober_;
  std::map<int, PidState> pids_;
  std::set<int> alive_;
};

}  // namespace argus
