#include "userspace/agent/rank_lifecycle.h"

#include <spdlog/spdlog.h>

#include "userspace/detect/rank_exit.h"
#include "userspace/procfs/procfs.h"
#include "userspace/registry/exit_cause.h"
#include "userspace/wire/aggregates.h"

namespace argus {

RankLifecycle::RankLifecycle(LifecycleParts parts, const Clock& clock, std::string proc_root, bool selects_by_env)
    : p_(parts), clock_(clock), proc_root_(std::move(proc_root)), selects_by_env_(selects_by_env) {}

void RankLifecycle::track_found(const FoundProcess& f) {
  const auto tgid = static_cast<uint32_t>(f.pid);
  if (!f.selected) {
    // Not ours (--only-env): BPF stops counting it; anything counted is dropped.
    p_.maps.set_tgid_state(tgid, ARGUS_TGID_IGNORED);
    p_.maps.delete_stats(tgid);
    return;
  }
  const bool known = p_.registry.is_live(f.pid);
  if (!known && is_worker_of_rank(f)) {
    // Its own collectives and syncs would be none; its GC and stacks are not the rank's.
    p_.maps.set_tgid_state(tgid, ARGUS_TGID_IGNORED);
    p_.maps.delete_stats(tgid);
    if (workers_seen_.insert(f.pid).second) {
      p_.counters.add(SkipReason::kRankWorker);
      spdlog::debug("pid {} ({}) is a worker of job_id={} rank={} (forked by the rank): not tracked as a rank", f.pid,
                    f.comm, f.identity.job_id, f.identity.rank);
    }
    return;
  }
  p_.registry.track(f.pid, f.start_ticks, f.comm, f.identity, f.libraries);
  p_.maps.set_tgid_state(tgid, ARGUS_TGID_TRACKED);
  p_.probes.attach_python_gc_for(f.pid);  // its interpreter's collector, once per file
  if (known) return;
  if (auto rank = p_.registry.rank(f.pid)) first_met(f.pid, *rank);
  spdlog::info("tracking pid {} ({}) job_id={} rank={}", f.pid, f.comm,
               f.identity.job_id.empty() ? "?" : f.identity.job_id, f.identity.rank);
}

void RankLifecycle::on_first_call(int pid, double now) {
  if (auto f = p_.discovery.check(pid, now)) {
    track_found(*f);
  } else if (!p_.registry.is_live(pid) && !selects_by_env_) {
    track_unmapped(pid);
  }
}

bool RankLifecycle::on_counted_unknown(int pid, double now) {
  if (p_.registry.is_tracked(pid)) return false;  // exited, final totals taken
  if (auto f = p_.discovery.check(pid, now)) {
    track_found(*f);
    return true;
  }
  if (procfs::read_stat(proc_root_, pid).ok()) {
    if (selects_by_env_) return false;  // cannot tell whether it is ours
    track_unmapped(pid);
    return true;
  }
  if (selects_by_env_) {
    p_.maps.delete_stats(static_cast<uint32_t>(pid));
    return false;
  }
  spdlog::warn("pid {} was counted in BPF but is gone before it could be identified", pid);
  finish(pid, std::nullopt);
  return false;
}

// A process forked by a tracked rank that claims that same rank: a DataLoader
// worker or another multiprocessing child. It inherited the rank's environment
// and mappings (so NCCL and libpython), but it is not the rank: tracked, it
// would put two processes behind one (job_id, rank) and answer for the rank's
// stacks and GC. A rank found after its own workers is not caught (the scan
// goes by ascending pid, so the rank is normally first).
bool RankLifecycle::is_worker_of_rank(const FoundProcess& f) const {
  if (f.identity.rank < 0 || f.identity.job_id.empty()) return false;
  int pid = f.ppid;
  for (int depth = 0; depth < 8 && pid > 1; ++depth) {
    if (auto jr = p_.registry.job_rank(pid)) return jr->first == f.identity.job_id && jr->second == f.identity.rank;
    auto st = procfs::read_stat(proc_root_, pid);
    if (!st.ok()) return false;
    pid = st->ppid;
  }
  return false;
}

// A process that calls into a probed library although discovery found none in
// its maps (a file it could not read, a mapping that changed): tracked all the
// same, named from its environment as a discovered rank is.
void RankLifecycle::track_unmapped(int pid) {
  RankIdentity identity;
  if (auto env = procfs::read_environ(proc_root_, pid); env.ok()) identity = identity_from_environ(*env);
  uint64_t start_ticks = 0;
  std::string comm;
  if (auto st = procfs::read_stat(proc_root_, pid); st.ok()) {
    start_ticks = st->starttime_ticks;
    comm = st->comm;
  }
  p_.registry.track(pid, start_ticks, comm, identity, {});
  if (auto rank = p_.registry.rank(pid)) first_met(pid, *rank);
}

// Watchers a rank gets once: where its memory cgroup is (a dead process's /proc
// entry no longer names it), its pod, and its GPU's UUID.
void RankLifecycle::first_met(int pid, const RankSnapshot& rank) {
  p_.memcgs.watch(pid);
  p_.pods.watch(pid, rank.gpu_ref, static_cast<double>(clock_.monotonic_ns()) / 1e9);
}

// Why the process ended: the kernel's word (exit code, fatal signal and sender,
// mark_victim), its memory cgroup's OOM figures, and its newest Python stack.
ExitCause RankLifecycle::exit_cause(int pid, int exit_code, const argus_exit_info* info) const {
  const MemcgWatch::AtExit memcg = p_.memcgs.at_exit(pid);
  ExitCause c = exit_cause_of(exit_code, info, memcg.oom_kills_rose);
  if (c.oom) {
    const bool victim = info && (info->flags & ARGUS_EXIT_F_OOM);
    c.oom_details = memcg.memcg ? oom_details(*memcg.memcg, victim ? "mark_victim" : "memory_cgroup")
                                : nlohmann::json{{"source", "mark_victim"}};
  }
  c.last_python_stack = p_.python.newest_stack(pid);
  // A GPU out-of-memory just before is the cause of an end the rank brought on
  // itself (an error exit, its own abort, the kernel's signal), not of a kill
  // by another process (torchrun tearing the job down after a peer failed,
  // when this rank had caught its own and gone on).
  const bool killed_by_another = c.signal != 0 && c.sender_pid > 0 && c.sender_pid != pid;
  const auto rank = p_.registry.rank(pid);
  if (!killed_by_another)
    c.gpu_oom = p_.ooms.recent(pid, clock_.monotonic_ns(), rank ? rank->gpu_memory.total_bytes : 0);
  return c;
}

// Final aggregates of a process that ended, then its BPF state is dropped so a
// reused pid starts from zero.
void RankLifecycle::finish(int pid, std::optional<int> exit_code, const argus_exit_info* cause) {
  if (p_.registry.is_tracked(pid) && !p_.registry.is_live(pid)) {
    // Ended already (reaped before its event came): one rank ends once.
    spdlog::debug("pid {} ended already: a late end of it is ignored", pid);
    return;
  }
  const auto tgid = static_cast<uint32_t>(pid);
  std::vector<AggregateRecord> records;
  for (const auto& s : p_.maps.read_stats(tgid)) records.push_back(aggregate_of(s));
  if (!p_.registry.is_tracked(pid) && !records.empty()) p_.registry.track(pid, 0, "", RankIdentity{}, {});
  p_.registry.apply_totals(pid, records);
  if (auto m = p_.maps.read_gpu_memory(); m.count(tgid))
    p_.registry.set_gpu_memory(pid, m[tgid].held, m[tgid].peak, m[tgid].total);
  // Why it died is read before its watchers let go (its memory cgroup's figures).
  const std::optional<ExitCause> why = exit_code ? std::optional(exit_cause(pid, *exit_code, cause)) : std::nullopt;
  for (PidScoped* part : parts_) part->rank_ended(pid);
  if (exit_code)
    p_.registry.on_exit(pid, *exit_code, *why);
  else
    p_.registry.on_vanished(pid);
  p_.maps.delete_stats(tgid);
  p_.maps.delete_seqs(tgid);
  p_.maps.forget_tgid(tgid);
  if (auto r = p_.registry.rank(pid); r && r->identified()) {
    DetectedEvent ev = rank_exit_event(*r, clock_.unix_seconds());
    spdlog::warn("{}", ev.summary);
    p_.events.add(std::move(ev));
  }
}

void RankLifecycle::reap_vanished(const std::function<void()>& drain) {
  std::vector<int> ended;
  for (int pid : p_.registry.live_pids()) {
    auto stat = procfs::read_stat(proc_root_, pid);
    const auto ticks = p_.registry.start_ticks(pid);
    // A zombie's exit event (with its code) is on the way: wait for it or the reap.
    if (stat.ok() && stat->state == 'Z') continue;
    const bool gone = procfs::vanished(stat);
    const bool reused = stat.ok() && ticks && *ticks != 0 && stat->starttime_ticks != *ticks;
    if (gone || reused) ended.push_back(pid);
  }
  if (ended.empty()) return;
  // The kernel wrote its exit event before its parent could reap it: take it
  // first, or the rank would end twice (code unknown, then its real code).
  drain();
  for (int pid : ended)
    if (p_.registry.is_live(pid)) finish(pid, std::nullopt);
}

void RankLifecycle::forget_dropped() {
  std::set<int> known;
  for (const auto& r : p_.registry.snapshot()) known.insert(r.pid);
  for (PidScoped* part : parts_) part->retain(known);
}

void RankLifecycle::forget_gone_workers(const std::set<int>& alive) {
  std::erase_if(workers_seen_, [&](int pid) { return !alive.count(pid); });
}

}  // namespace argus
