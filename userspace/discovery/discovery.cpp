#include "userspace/discovery/discovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>

namespace argus {
namespace {

// Exec follow-ups, in seconds after the exec: the loader maps DT_NEEDED
// libraries within milliseconds; frameworks dlopen NCCL/CUDA seconds later.
constexpr double kExecFollowups[] = {0.0, 0.02, 0.1, 0.3, 1.0, 3.0};

// A dlopen signals twice (before and after mapping) and an import storm many
// times: one look per process per this many seconds at most.
constexpr double kLinkMapSettleSeconds = 0.01;

// A process whose loader is probed tells of its later dlopens itself: only the
// follow-ups this soon after exec stay, for libraries mapped without the
// loader's help (a hand-made mmap at start), the others would read its maps for nothing.
constexpr double kHintedExecFollowupsSeconds = 0.1;

bool worth_probing(const procfs::MapEntry& m) {
  if (!m.executable() || !m.file_backed()) return false;
  if (m.path.rfind("/memfd:", 0) == 0 || m.path.rfind("/dev/", 0) == 0) return false;
  return true;
}

SkipReason skip_reason(procfs::ErrorKind kind) {
  switch (kind) {
    case procfs::ErrorKind::kVanished: return SkipReason::kVanished;
    case procfs::ErrorKind::kPermission: return SkipReason::kPermission;
    case procfs::ErrorKind::kMalformed: return SkipReason::kMalformedProc;
    case procfs::ErrorKind::kOther: break;
  }
  return SkipReason::kProcReadError;
}

// The same, for a rank's environment (its identity is then unknown).
SkipReason environ_skip_reason(procfs::ErrorKind kind) {
  switch (kind) {
    case procfs::ErrorKind::kVanished: return SkipReason::kEnvironVanished;
    case procfs::ErrorKind::kPermission: return SkipReason::kEnvironPermission;
    case procfs::ErrorKind::kMalformed: return SkipReason::kEnvironMalformedProc;
    case procfs::ErrorKind::kOther: break;
  }
  return SkipReason::kEnvironProcReadError;
}

}  // namespace

Discovery::Discovery(DiscoveryOptions opts, LibraryProber& prober) : opts_(std::move(opts)), prober_(prober) {}

void Discovery::drop_hinted_followups(PidState& st, double now_s) {
  // Looks that hints asked for are never later than now + the settle time.
  const double keep_until = std::max(st.first_seen + kHintedExecFollowupsSeconds, now_s + kLinkMapSettleSeconds);
  std::erase_if(st.followups, [&](double at) { return at > keep_until; });
  // Once the loader has spoken since the exec (it signals before and after it
  // maps the DT_NEEDED libraries, each signal a look of its own), the exec's own
  // follow-ups only read the same maps again: on a node that runs short
  // processes, most of the agent's cost per exec (two of four looks).
  if (st.loader_spoke) {
    std::erase_if(st.followups, [&](double at) {
      return at > now_s && std::any_of(std::begin(kExecFollowups), std::end(kExecFollowups),
                                       [&](double d) { return at == st.first_seen + d; });
    });
  }
}

bool Discovery::due(const PidState& st, double now_s) const {
  const double age = now_s - st.first_seen;
  double interval = opts_.old_recheck_seconds;
  if (st.is_rank)
    interval = opts_.rank_recheck_seconds;
  else if (st.hinted)
    interval = opts_.hinted_recheck_seconds;
  else if (age < opts_.young_seconds && !st.unreadable)
    interval = opts_.young_recheck_seconds;
  return now_s - st.last_check >= interval;
}

std::optional<FoundProcess> Discovery::check(int pid, double now_s) {
  if (pid == opts_.self_pid || pid <= 0) return std::nullopt;
  PidState& st = pids_[pid];
  if (st.first_seen == 0) st.first_seen = now_s;
  st.last_check = now_s;

  auto maps = procfs::read_maps(opts_.proc_root, pid);
  if (!maps.ok()) {
    const auto kind = procfs::error_kind(maps);
    count_into(opts_.counters, skip_reason(kind));
    if (kind != procfs::ErrorKind::kVanished) spdlog::debug("pid {}: {}", pid, maps.error());
    if (kind == procfs::ErrorKind::kVanished) pids_.erase(pid);
    if (kind == procfs::ErrorKind::kPermission) st.unreadable = true;
    return std::nullopt;
  }
  if (maps->malformed_lines > 0) {
    count_into(opts_.counters, SkipReason::kMalformedMapsLine);
    spdlog::debug("pid {}: {} malformed maps lines skipped", pid, maps->malformed_lines);
  }

  FoundProcess found;
  found.pid = pid;
  std::set<std::tuple<uint32_t, uint32_t, uint64_t>> seen_files;
  bool python_only = true;  // every probed file is a Python interpreter or PyTorch's c10d
  st.hinted = maps->entries.empty();
  for (const auto& m : maps->entries) {
    if (!worth_probing(m)) continue;
    if (!seen_files.insert({m.dev_major, m.dev_minor, m.inode}).second) continue;
    const LibraryKind kind = prober_.consider(pid, m);
    if (kind == LibraryKind::Loader) st.hinted = true;   // its dlopens will tell us
    if (kind == LibraryKind::None || kind == LibraryKind::Loader) continue;  // every process maps a loader
    found.libraries.push_back(m.path);
    if (kind != LibraryKind::Python && kind != LibraryKind::Torch) python_only = false;
  }
  if (st.hinted) drop_hinted_followups(st, now_s);
  if (found.libraries.empty()) return std::nullopt;
  // A process with only a Python interpreter (and PyTorch, which every
  // inference script and notebook maps) is a rank only when its environment
  // names one (a launcher's RANK and job id): a plain system Python is not
  // tracked, and is rechecked like any other non-rank. (One that makes a
  // process group anyway is tracked by its first call into the probes.)
  std::optional<std::map<std::string, std::string>> env_for_python;
  if (python_only) {
    auto env = procfs::read_environ(opts_.proc_root, pid);
    if (!env.ok()) return std::nullopt;
    const RankIdentity id = identity_from_environ(*env);
    if (id.rank < 0 || id.job_id.empty()) return std::nullopt;
    env_for_python = std::move(*env);
  }
  st.is_rank = true;

  if (auto stat = procfs::read_stat(opts_.proc_root, pid); stat.ok()) {
    found.start_ticks = stat->starttime_ticks;
    found.comm = stat->comm;
    found.ppid = stat->ppid;
  } else {
    count_into(opts_.counters, skip_reason(procfs::error_kind(stat)));
  }
  auto env = env_for_python ? procfs::ReadResult<std::map<std::string, std::string>>(std::move(*env_for_python))
                            : procfs::read_environ(opts_.proc_root, pid);
  if (env.ok()) {
    found.identity = identity_from_environ(*env);
    if (!opts_.only_env_key.empty()) {
      auto it = env->find(opts_.only_env_key);
      found.selected = it != env->end() && it->second == opts_.only_env_value;
    }
  } else {
    count_into(opts_.counters, environ_skip_reason(procfs::error_kind(env)));
    found.selected = opts_.only_env_key.empty();
  }
  return found;
}

std::vector<FoundProcess> Discovery::scan(double now_s) {
  std::vector<FoundProcess> out;
  const auto pids = procfs::list_pids(opts_.proc_root);
  alive_ = std::set<int>(pids.begin(), pids.end());
  for (auto it = pids_.begin(); it != pids_.end();) {
    it = alive_.count(it->first) ? std::next(it) : pids_.erase(it);
  }
  for (int pid : pids) {
    auto it = pids_.find(pid);
    if (it != pids_.end() && !due(it->second, now_s)) continue;
    if (auto f = check(pid, now_s)) out.push_back(std::move(*f));
  }
  return out;
}

void Discovery::on_exec(int pid, double now_s) {
  if (pid == opts_.self_pid) return;
  PidState& st = pids_[pid];
  st = PidState{};  // a new image: what it mapped before no longer matters
  st.first_seen = now_s;
  for (double d : kExecFollowups) st.followups.push_back(now_s + d);
}

void Discovery::on_link_map_change(int pid, double now_s) {
  if (pid == opts_.self_pid || pid <= 0) return;
  PidState& st = pids_[pid];
  if (st.unreadable) return;  // its maps cannot be read: looking sooner would not help
  st.loader_spoke = true;
  const double at = now_s + kLinkMapSettleSeconds;
  // A look already due after this hint and soon enough covers it.
  auto pos = std::lower_bound(st.followups.begin(), st.followups.end(), now_s);
  if (pos != st.followups.end() && *pos <= at) return;
  st.followups.insert(std::upper_bound(st.followups.begin(), st.followups.end(), at), at);
}

double Discovery::next_followup() const {
  double next = std::numeric_limits<double>::infinity();
  for (const auto& [pid, st] : pids_)
    if (!st.followups.empty()) next = std::min(next, st.followups.front());
  return next;
}

std::vector<FoundProcess> Discovery::run_due(double now_s) {
  std::vector<FoundProcess> out;
  std::vector<int> due_pids;
  for (auto& [pid, st] : pids_) {
    if (st.followups.empty() || st.followups.front() > now_s) continue;
    while (!st.followups.empty() && st.followups.front() <= now_s) st.followups.erase(st.followups.begin());
    due_pids.push_back(pid);
  }
  for (int pid : due_pids) {
    // Follow-ups go on after a first find: libcuda at exec, libnccl dlopened later.
    if (auto f = check(pid, now_s)) out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace argus
