#include "userspace/registry/rank_registry.h"

#include <algorithm>
#include <cstdio>

#include "bpf/argus.h"
#include "userspace/registry/exit_cause.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {
constexpr size_t kTopStealers = 3;  // stealers named per rank and window
}  // namespace


RankRegistry::RankRegistry(const Clock& clock, RegistryOptions opts) : clock_(clock), opts_(std::move(opts)) {}

void RankRegistry::track(int pid, uint64_t start_ticks, const std::string& comm, const RankIdentity& identity,
                         const std::vector<std::string>& libraries) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it != entries_.end() && it->second.snap.start_time_ticks != start_ticks && start_ticks != 0 &&
      it->second.snap.start_time_ticks != 0) {
    // A reused pid: the old process is gone; its record must not absorb the new one.
    entries_.erase(it);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    Entry e;
    e.snap.pid = pid;
    e.snap.start_time_ticks = start_ticks;
    e.snap.node = opts_.node;
    e.snap.first_seen_unix = clock_.unix_seconds();
    e.snap.launches_counted = opts_.launches_counted;
    it = entries_.emplace(pid, std::move(e)).first;
  }
  RankSnapshot& s = it->second.snap;
  if (s.start_time_ticks == 0) s.start_time_ticks = start_ticks;
  if (!comm.empty()) s.comm = comm;
  // The environment is the first source of identity; NCCL init only fills gaps.
  if (!identity.job_id.empty()) s.job_id = identity.job_id;
  if (identity.rank >= 0) {
    s.rank = identity.rank;
    s.identity_source = "env:" + identity.rank_source;
  }
  if (identity.local_rank >= 0) s.local_rank = identity.local_rank;
  if (identity.world_size >= 0) s.world_size = identity.world_size;
  if (identity.local_world_size >= 0) s.local_world_size = identity.local_world_size;
  if (!identity.cuda_visible_devices.empty()) s.cuda_visible_devices = identity.cuda_visible_devices;
  if (!identity.nvidia_visible_devices.empty()) s.nvidia_visible_devices = identity.nvidia_visible_devices;
  for (const auto& lib : libraries) {
    if (std::find(s.libraries.begin(), s.libraries.end(), lib) == s.libraries.end()) s.libraries.push_back(lib);
  }
  // The rank's GPU, decided here once for everyone who asks (the GPU UUID, the
  // NICs next to it, the Xid lines that name it). A UUID needs no more than the
  // environment; an index is turned into one by the driver's files (the pod
  // collector's job).
  s.gpu_ref = rank_gpu_from_strings(s.cuda_visible_devices, s.nvidia_visible_devices, s.local_rank);
  if (s.gpu_ref.form == GpuRef::Form::Uuid) s.gpu_uuid = s.gpu_ref.id;
  for (const auto& info : it->second.comms) apply_identity_from_init(it->second, info);
}

bool RankRegistry::is_tracked(int pid) const {
  std::lock_guard lock(mu_);
  return entries_.count(pid) != 0;
}

bool RankRegistry::is_live(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  return it != entries_.end() && !it->second.snap.exited;
}

std::optional<std::pair<std::string, int>> RankRegistry::job_rank(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end() || it->second.snap.exited) return std::nullopt;
  return std::make_pair(it->second.snap.job_id, it->second.snap.rank);
}

std::optional<uint64_t> RankRegistry::start_ticks(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return std::nullopt;
  return it->second.snap.start_time_ticks;
}

std::vector<int> RankRegistry::live_pids() const {
  std::lock_guard lock(mu_);
  std::vector<int> out;
  for (const auto& [pid, e] : entries_)
    if (!e.snap.exited) out.push_back(pid);
  return out;
}

void RankRegistry::apply_totals(int pid, const std::vector<AggregateRecord>& records) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  RankSnapshot& s = it->second.snap;
  apply_aggregates(records, s);
  s.offcpu.present = opts_.sched_probe;
}

void RankRegistry::set_gpu_memory(int pid, int64_t held, uint64_t peak, uint64_t total) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  GpuMemoryView& m = it->second.snap.gpu_memory;
  m.held_bytes = held;
  m.peak_bytes = peak;
  if (total != 0) m.total_bytes = total;
}

void RankRegistry::add_tcp_retransmits(int pid, const std::map<std::string, uint64_t>& by_remote) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  for (const auto& [remote, n] : by_remote) it->second.snap.tcp_retransmits[remote] += n;
}

void RankRegistry::set_input_polls(int pid, const InputWaitView& polls) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it != entries_.end()) it->second.snap.input = polls;
}

void RankRegistry::set_python_gc(int pid, const std::string& version, const std::string& anchor,
                                 const std::array<uint64_t, 3>& collections) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  PythonGcView& gc = it->second.snap.python_gc;
  gc.present = true;
  if (!version.empty()) gc.version = version;
  if (!anchor.empty()) gc.anchor = anchor;
  for (size_t g = 0; g < collections.size(); ++g) gc.collections[g] = std::max(gc.collections[g], collections[g]);
}

void RankRegistry::set_cpu_stealers(int pid, std::vector<CpuStealer> totals) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  it->second.stealer_totals = std::move(totals);
}

void RankRegistry::set_pod_identity(int pid, const PodIdentityView& pod) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end() || !pod.present()) return;
  it->second.snap.pod = pod;
}

void RankRegistry::set_gpu_uuid(int pid, const std::string& uuid) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end() || uuid.empty()) return;
  it->second.snap.gpu_uuid = uuid;
}

void RankRegistry::set_cgroup_cpu(int pid, std::optional<CgroupCpuView> view) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  CgroupCpuView& c = it->second.snap.cgroup_cpu;
  if (!view) {
    c = CgroupCpuView{};
    return;
  }
  const double share = c.path == view->path ? c.window_throttled_share : 0;
  c = std::move(*view);
  c.present = true;
  c.window_throttled_share = share;  // recomputed at tick()
}

void RankRegistry::apply_identity_from_init(Entry& e, const NcclInitInfo& info) {
  if (info.result != 0 && info.result != ARGUS_NCCL_IN_PROGRESS) return;
  RankSnapshot& s = e.snap;
  // A rank and world size given to an init, not a child's (a subgroup's) or a
  // clique's: the first such communicator is the job's world as a rule.
  const bool given = info.api == ARGUS_NCCL_INIT_RANK || info.api == ARGUS_NCCL_INIT_RANK_CONFIG ||
                     info.api == ARGUS_NCCL_INIT_RANK_SCALABLE;
  if (!given) {
    if (s.job_id.empty() && !info.comm_id.empty()) s.job_id = "nccl-" + info.comm_id.substr(0, 12);
    return;
  }
  if (s.rank < 0 && info.rank >= 0) {
    s.rank = info.rank;
    s.identity_source = std::string("nccl:") + nccl_init_api_label(info.api);
  }
  if (s.world_size < 0 && info.nranks > 0) s.world_size = info.nranks;
  // No launcher variables at all: the communicator's (hashed) unique id names the job.
  if (s.job_id.empty() && !info.comm_id.empty()) s.job_id = "nccl-" + info.comm_id.substr(0, 12);
}

void RankRegistry::on_nccl_init(int pid, const NcclInitInfo& info) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  if (it->second.comms.size() >= opts_.max_comm_inits) {
    count_into(opts_.caps, Cap::kRankCommInits);
  } else {
    it->second.comms.push_back(info);
  }
  apply_identity_from_init(it->second, info);
}

void RankRegistry::on_process_group(int pid, const ProcessGroupInfo& group) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  auto& groups = it->second.snap.process_groups;
  for (auto& g : groups)
    if (g.backend == group.backend) {
      g = group;
      return;
    }
  if (groups.size() >= opts_.max_comm_inits) {
    count_into(opts_.caps, Cap::kRankCommInits);
    return;
  }
  groups.push_back(group);
}

std::vector<NcclInitInfo> RankRegistry::comm_inits(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  return it == entries_.end() ? std::vector<NcclInitInfo>{} : it->second.comms;
}

void RankRegistry::mark_exited(Entry& e, ExitReason reason, int code, const ExitCause& cause) {
  if (e.snap.exited) return;
  e.snap.exited = true;
  e.snap.exit_reason = reason;
  e.snap.exit_code = code;
  e.snap.exit_cause = cause;
  e.snap.exited_at_unix = clock_.unix_seconds();
  e.snap.collective_wait_ratio = 0;
  e.snap.sync_wait_ratio = 0;
}

void RankRegistry::on_exit(int pid, int exit_code, const ExitCause& cause) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  ExitCause c = cause;
  c.signal = exit_code & 0x7f;
  // Killed: the code is the signal; exited (after a GPU out-of-memory among
  // others): its status.
  const ExitReason reason = exit_reason_of(exit_code, c);
  mark_exited(it->second, reason, c.signal == 0 ? (exit_code >> 8) & 0xff : c.signal, c);
  evict_exited_past_cap(pid);
}

// Rank churn (short-lived ranks, restarts) must not grow the registry for a
// whole grace period: past max_exited, the ranks that exited first go first.
void RankRegistry::evict_exited_past_cap(int keep_pid) {
  size_t exited = 0;
  for (const auto& [pid, e] : entries_) exited += e.snap.exited ? 1 : 0;
  while (exited > opts_.max_exited) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.snap.exited && it->first != keep_pid &&
          (oldest == entries_.end() || it->second.snap.exited_at_unix < oldest->second.snap.exited_at_unix))
        oldest = it;
    if (oldest == entries_.end()) return;
    entries_.erase(oldest);
    --exited;
    count_into(opts_.caps, Cap::kExitedRanks);
  }
}

void RankRegistry::on_vanished(int pid) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return;
  mark_exited(it->second, ExitReason::kExit, -1);  // code unknown: the exit event was not seen
  evict_exited_past_cap(pid);
}

namespace {

template <typename Map>
uint64_t sum_wait_ns(const Map& m) {
  uint64_t total = 0;
  for (const auto& [name, c] : m) total += c.wait_ns;
  return total;
}

// Share of the wall time between two samples spent in a kind of call. Several
// threads can wait at once; the share caps at 1.
double share(uint64_t dt_ns, uint64_t a, uint64_t b) {
  if (dt_ns == 0 || b < a) return 0;
  return std::min(1.0, static_cast<double>(b - a) / static_cast<double>(dt_ns));
}

}  // namespace

// GC time, pauses and the longest pause between two samples (the longest from
// the histogram: the upper bound of the highest bucket that grew).
void RankRegistry::window_gc(const Sample& a, const Sample& b, PythonGcView& gc) {
  gc.window_seconds = b.gc_ns >= a.gc_ns ? static_cast<double>(b.gc_ns - a.gc_ns) / 1e9 : 0;
  gc.window_pauses = b.gc_pauses >= a.gc_pauses ? b.gc_pauses - a.gc_pauses : 0;
  gc.window_span_seconds = static_cast<double>(b.mono_ns - a.mono_ns) / 1e9;
  gc.window_max_pause_seconds = 0;
  for (const auto& [bucket, count] : b.gc_buckets) {
    auto before = a.gc_buckets.find(bucket);
    if (count > (before == a.gc_buckets.end() ? 0 : before->second))
      gc.window_max_pause_seconds = bucket >= 64 ? 1.8e10 : static_cast<double>(1ull << bucket) / 1e9;
  }
}

// Off-CPU shares and the top stealers between two samples: thread-seconds
// per wall second (several threads may sum above 1).
void RankRegistry::window_offcpu(const Sample& a, const Sample& b, const std::vector<CpuStealer>& totals, Entry& e) {
  const double dt = static_cast<double>(b.mono_ns - a.mono_ns);
  OffCpuView& v = e.snap.offcpu;
  auto per_wall = [dt](uint64_t x, uint64_t y) { return dt > 0 && y >= x ? static_cast<double>(y - x) / dt : 0.0; };
  for (size_t i = 0; i < v.window_offcpu_share.size(); ++i)
    v.window_offcpu_share[i] = per_wall(a.offcpu_ns[i], b.offcpu_ns[i]);
  v.window_oncpu_share = per_wall(a.oncpu_ns, b.oncpu_ns);
  v.window_span_seconds = dt / 1e9;
  e.snap.cgroup_cpu.window_throttled_share = per_wall(a.throttled_ns, b.throttled_ns);
  v.stealers.clear();
  for (const auto& t : totals) {
    auto before = a.stealer_ns.find(t.pid);
    const uint64_t now_ns = b.stealer_ns.count(t.pid) ? b.stealer_ns.at(t.pid) : 0;
    const uint64_t then_ns = before == a.stealer_ns.end() ? 0 : before->second;
    if (now_ns <= then_ns) continue;
    CpuStealer w = t;
    w.seconds = static_cast<double>(now_ns - then_ns) / 1e9;
    v.stealers.push_back(std::move(w));
  }
  std::sort(v.stealers.begin(), v.stealers.end(),
            [](const CpuStealer& x, const CpuStealer& y) { return x.seconds > y.seconds; });
  if (v.stealers.size() > kTopStealers) v.stealers.resize(kTopStealers);
}

void RankRegistry::tick() {
  std::lock_guard lock(mu_);
  const uint64_t now = clock_.monotonic_ns();
  const double now_unix = clock_.unix_seconds();
  const auto window_ns = static_cast<uint64_t>(opts_.window_seconds * 1e9);
  for (auto it = entries_.begin(); it != entries_.end();) {
    Entry& e = it->second;
    if (e.snap.exited) {
      if (now_unix - e.snap.exited_at_unix >= opts_.exit_grace_seconds) {
        it = entries_.erase(it);
        continue;
      }
      ++it;
      continue;
    }
    const PythonGcView& gc = e.snap.python_gc;
    Sample smp;
    smp.mono_ns = now;
    // A grouped exchange waits in its ncclGroupEnd, not in its sends and receives.
    smp.coll_ns = sum_wait_ns(e.snap.nccl) + e.snap.nccl_groups.wait_ns + e.snap.process_group_waits.wait_ns;
    smp.sync_ns = sum_wait_ns(e.snap.sync);
    smp.gc_ns = gc.ns;
    smp.gc_pauses = gc.timed;
    smp.gc_buckets = gc.log2_buckets;
    smp.offcpu_ns = e.snap.offcpu.offcpu_ns;
    smp.oncpu_ns = e.snap.offcpu.oncpu_ns;
    smp.throttled_ns = static_cast<uint64_t>(e.snap.cgroup_cpu.throttled_seconds * 1e9);
    for (const auto& t : e.stealer_totals) smp.stealer_ns[t.pid] = static_cast<uint64_t>(t.seconds * 1e9);
    e.samples.push_back(std::move(smp));
    while (e.samples.size() > 2 && now - e.samples.front().mono_ns > window_ns) e.samples.pop_front();
    if (e.samples.size() >= 2) {
      const auto& a = e.samples.front();
      const auto& b = e.samples.back();
      const uint64_t dt = b.mono_ns - a.mono_ns;
      e.snap.collective_wait_ratio = share(dt, a.coll_ns, b.coll_ns);
      e.snap.sync_wait_ratio = share(dt, a.sync_ns, b.sync_ns);
      window_gc(a, b, e.snap.python_gc);
      window_offcpu(a, b, e.stealer_totals, e);
    }
    ++it;
  }
}

std::vector<RankSnapshot> RankRegistry::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<RankSnapshot> out;
  out.reserve(entries_.size());
  for (const auto& [pid, e] : entries_) out.push_back(e.snap);
  return out;
}

std::optional<RankSnapshot> RankRegistry::rank(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return std::nullopt;
  return it->second.snap;
}

std::optional<RankRegistry::Membership> RankRegistry::membership(int pid) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(pid);
  if (it == entries_.end()) return std::nullopt;
  return Membership{it->second.snap.job_id, it->second.snap.world_size};
}

std::vector<RankPlacement> RankRegistry::live_ranks() const {
  std::lock_guard lock(mu_);
  std::map<std::pair<std::string, int>, RankPlacement> by_rank;
  for (const auto& [pid, e] : entries_) {
    const RankSnapshot& s = e.snap;
    if (s.exited || !s.identified()) continue;
    by_rank.try_emplace({s.job_id, s.rank}, RankPlacement{s.job_id, s.rank, pid, s.gpu_ref});
  }
  std::vector<RankPlacement> out;
  out.reserve(by_rank.size());
  for (auto& [key, p] : by_rank) out.push_back(std::move(p));
  return out;
}

size_t RankRegistry::tracked_count() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [pid, e] : entries_) n += e.snap.exited ? 0 : 1;
  return n;
}

}  // namespace argus
