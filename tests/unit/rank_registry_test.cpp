// The registry on scripted input with an injected clock.
#include "userspace/registry/rank_registry.h"
#include "tests/support/manual_clock.h"

#include <gtest/gtest.h>

#include "bpf/argus.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

// Monotonic 1 s, wall time 1'700'000'000 at the start.
struct FakeClock : testing_support::ManualClock {
  FakeClock() : ManualClock(1'000'000'000, 1'700'000'000) {}
};

RankIdentity env_identity(const std::string& job, int rank) {
  RankIdentity id;
  id.job_id = job;
  id.rank = rank;
  id.rank_source = "RANK";
  id.world_size = 8;
  id.local_rank = rank;
  return id;
}

const RankSnapshot* find(const std::vector<RankSnapshot>& v, int pid) {
  for (const auto& s : v)
    if (s.pid == pid) return &s;
  return nullptr;
}

TEST(RankRegistry, TotalsReplaceNeverAdd) {
  FakeClock clock;
  RankRegistry reg(clock, {"node-a", 60, 10, false});
  reg.track(100, 5, "python", env_identity("job", 3), {"/usr/lib/libnccl.so.2"});
  std::vector<AggregateRecord> totals = {
      {100, ARGUS_STAT_NCCL_CALLS, ARGUS_OP_ALL_REDUCE, 0, 10, 4000},
      {100, ARGUS_STAT_NCCL_CALLS, ARGUS_OP_SEND, 0, 2, 64},
      {100, ARGUS_STAT_CUDA_SYNC, ARGUS_CU_STREAM_SYNCHRONIZE, 0, 5, 5'000'000},
      {100, ARGUS_STAT_CUDA_ERROR, ARGUS_CU_MEM_ALLOC, 2, 1, 0},
      {100, ARGUS_STAT_NCCL_ERROR, static_cast<uint16_t>(ARGUS_OP_MAX), 6, 1, 0},
      {100, ARGUS_STAT_CUDA_MEMCPY, ARGUS_GPU_COPY_HTOD, 0, 2, 4352},
      {100, ARGUS_STAT_CUDA_MEMCPY, ARGUS_GPU_COPY_DTOD, 0, 8, 36864},
      {100, ARGUS_STAT_CUDA_ERROR, ARGUS_CU_MEMCPY_DTOH_ASYNC, 1, 1, 0},
      {100, ARGUS_STAT_CUDA_LAUNCH_HIST, 15, 0, 3, 90'000},
      {100, ARGUS_STAT_CUDA_LAUNCH_HIST, 14, 0, 1, 10'000},
  };
  reg.apply_totals(100, totals);
  reg.apply_totals(100, totals);  // the same totals twice: still the same figures
  auto snap = reg.snapshot();
  const auto* s = find(snap, 100);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->nccl.at("all_reduce").calls, 10u);
  EXPECT_EQ(s->nccl.at("all_reduce").bytes, 4000u);
  EXPECT_EQ(s->nccl.at("send").calls, 2u);
  EXPECT_EQ(s->sync.at("cuStreamSynchronize").wait_ns, 5'000'000u);
  EXPECT_EQ((s->cuda_errors.at({"cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY"})), 1u);
  EXPECT_EQ((s->nccl_errors.at({"ncclCommInitRank", "ncclRemoteError"})), 1u);
  EXPECT_EQ(s->memcpy.size(), 2u);
  EXPECT_EQ(s->memcpy.at("htod").calls, 2u);
  EXPECT_EQ(s->memcpy.at("htod").bytes, 4352u);
  EXPECT_EQ(s->memcpy.at("dtod").bytes, 36864u);
  EXPECT_EQ((s->cuda_errors.at({"cuMemcpyDtoHAsync", "CUDA_ERROR_INVALID_VALUE"})), 1u);
  EXPECT_EQ(s->launch_timing.count, 4u);
  EXPECT_EQ(s->launch_timing.ns, 100'000u);
  EXPECT_EQ(s->launch_timing.log2_buckets, (std::map<uint32_t, uint64_t>{{14, 1}, {15, 3}}));
  EXPECT_EQ(s->job_id, "job");
  EXPECT_EQ(s->rank, 3);
  EXPECT_EQ(s->node, "node-a");
  EXPECT_EQ(s->identity_source, "env:RANK");
}

// c10d calls are kept per (process, backend, op) in BPF (the key's code and pad
// hold the backend's address): labelled by the group the backend belongs to,
// "unnamed" while its making was not seen (of the backend the key's sub names
// with its op); totals replace as the others do.
TEST(RankRegistry, ProcessGroupCallsByGroupLabel) {
  FakeClock clock;
  RankRegistry reg(clock, {"node-a", 60, 10, false});
  reg.track(100, 5, "python", env_identity("job", 0), {});
  ProcessGroupInfo world;
  world.backend = 0x7f00'0000'1000;
  world.backend_kind = "gloo";
  world.name = "0";
  world.desc = "default_pg";
  reg.on_process_group(100, world);
  ProcessGroupInfo pair = world;
  pair.backend = 0x7f00'0000'2000;
  pair.name = "1";
  pair.desc = "undefined";
  reg.on_process_group(100, pair);
  auto key = [](uint64_t backend, uint16_t op, uint64_t n, uint16_t kind = ARGUS_C10D_GLOO) {
    StatEntry e{};
    e.key.tgid = 100;
    e.key.kind = ARGUS_STAT_C10D_CALLS;
    e.key.sub = static_cast<uint16_t>(op | (kind << 8));
    e.key.code = static_cast<int32_t>(static_cast<uint32_t>(backend));
    e.key.pad = static_cast<uint32_t>(backend >> 32);
    e.value.count = n;
    return aggregate_of(e);
  };
  const std::vector<AggregateRecord> totals{key(world.backend, ARGUS_OP_ALL_REDUCE, 390),
                                            key(world.backend, ARGUS_C10D_OP_BARRIER, 1),
                                            key(pair.backend, ARGUS_OP_ALL_REDUCE, 12),
                                            key(0x7f00'0000'3000, ARGUS_OP_BROADCAST, 4),
                                            key(0x7f00'0000'4000, ARGUS_OP_ALL_GATHER, 6, ARGUS_C10D_NCCL)};
  reg.apply_totals(100, totals);
  reg.apply_totals(100, totals);
  const auto snap = reg.snapshot();
  const auto* s = find(snap, 100);
  ASSERT_NE(s, nullptr);
  using K = std::tuple<std::string, std::string, std::string>;
  EXPECT_EQ(s->process_group_calls, (std::map<K, uint64_t>{{{"default_pg", "gloo", "all_reduce"}, 390},
                                                           {{"default_pg", "gloo", "barrier"}, 1},
                                                           {{"1", "gloo", "all_reduce"}, 12},
                                                           {{"unnamed", "gloo", "broadcast"}, 4},
                                                           {{"unnamed", "nccl", "all_gather"}, 6}}));
  EXPECT_TRUE(s->nccl.empty());  // not NCCL's calls
  // A description learnt later replaces the group's record, not adds one.
  pair.desc = "pair_group";
  reg.on_process_group(100, pair);
  EXPECT_EQ(find(reg.snapshot(), 100)->process_groups.size(), 2u);
}

// Python GC: the probes' aggregates replace (per generation time, pause
// histogram); the interpreter's counters only grow (the larger of polled and
// seen wins); the window has the GC time, pauses and the longest pause.
// The rank's GPU is decided once, here, from its environment: a UUID it names is
// its gpu_uuid at once (an index needs the driver's files: the pod collector's),
// and the directory the RDMA and Xid collectors read carries the same GPU.
TEST(RankRegistry, DecidesEachRanksGpuFromItsEnvironment) {
  FakeClock clock;
  RankRegistry reg(clock, {"node-a", 60, 10, false});
  const std::string uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  RankIdentity by_uuid = env_identity("j", 0);
  by_uuid.cuda_visible_devices = uuid;  // one GPU per process
  RankIdentity by_pod = env_identity("j", 1);
  by_pod.nvidia_visible_devices = "GPU-1," + uuid;  // the container's GPUs, LOCAL_RANK 1
  RankIdentity by_index = env_identity("j", 2);
  by_index.cuda_visible_devices = "0,1,2,3";
  RankIdentity unset = env_identity("j", 3);
  reg.track(100, 1, "py", by_uuid, {});
  reg.track(101, 1, "py", by_pod, {});
  reg.track(102, 1, "py", by_index, {});
  reg.track(103, 1, "py", unset, {});
  const auto snap = reg.snapshot();
  EXPECT_EQ(find(snap, 100)->gpu_uuid, uuid);
  EXPECT_EQ(find(snap, 101)->gpu_uuid, uuid);
  EXPECT_EQ(find(snap, 102)->gpu_uuid, "");
  EXPECT_EQ(find(snap, 102)->gpu_ref.form, GpuRef::Form::Index);
  EXPECT_EQ(find(snap, 102)->gpu_ref.index, 2);
  EXPECT_EQ(find(snap, 103)->gpu_ref.index, 3);  // cuda:LOCAL_RANK
  const auto placed = reg.live_ranks();
  ASSERT_EQ(placed.size(), 4u);
  EXPECT_EQ(placed[2].pid, 102);
  EXPECT_EQ(placed[2].gpu, find(snap, 102)->gpu_ref);
  reg.on_exit(103, 0);
  EXPECT_EQ(reg.live_ranks().size(), 3u);  // only live ranks are placed
}

TEST(RankRegistry, PythonGcCountersGrowAndTheWindowSeesThePauses) {
  FakeClock clock;
  RankRegistry reg(clock, {"node-a", 60, 10, false});
  reg.track(100, 5, "python", env_identity("job", 0), {});
  reg.set_python_gc(100, "3.12.1", "gc_collect_main", {10, 2, 1});
  reg.set_python_gc(100, "", "", {9, 3, 1});  // an older snapshot: never goes back
  reg.apply_totals(100, {{100, ARGUS_STAT_PY_GC, 0, 0, 4, 2'000'000}, {100, ARGUS_STAT_PY_GC_HIST, 19, 0, 4, 2'000'000}});
  reg.tick();
  clock.advance(5);
  reg.apply_totals(100, {{100, ARGUS_STAT_PY_GC, 0, 0, 9, 30'000'000},
                         {100, ARGUS_STAT_PY_GC, 2, 0, 1, 20'000'000},
                         {100, ARGUS_STAT_PY_GC_HIST, 19, 0, 9, 10'000'000},
                         {100, ARGUS_STAT_PY_GC_HIST, 25, 0, 1, 20'000'000}});
  reg.tick();
  const auto snap = reg.snapshot();  // s points into it
  const auto* s = find(snap, 100);
  ASSERT_NE(s, nullptr);
  const PythonGcView& gc = s->python_gc;
  EXPECT_TRUE(gc.present);
  EXPECT_EQ(gc.version, "3.12.1");
  EXPECT_EQ(gc.anchor, "gc_collect_main");
  EXPECT_EQ(gc.collections, (std::array<uint64_t, 3>{10, 3, 1}));
  EXPECT_EQ(gc.timed, 10u);
  EXPECT_EQ(gc.ns, 50'000'000u);
  EXPECT_EQ(gc.log2_buckets.at(19), 9u);
  EXPECT_EQ(gc.log2_buckets.at(25), 1u);
  EXPECT_DOUBLE_EQ(gc.window_seconds, 0.048);
  EXPECT_EQ(gc.window_pauses, 6u);
  EXPECT_DOUBLE_EQ(gc.window_span_seconds, 5.0);
  EXPECT_DOUBLE_EQ(gc.window_max_pause_seconds, (1u << 25) / 1e9);  // the bucket [2^24, 2^25) ns grew
}

TEST(RankRegistry, NcclInitFillsOnlyWhatTheEnvironmentLacks) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 60, 10, false});
  reg.track(1, 1, "a", env_identity("job", 3), {});
  reg.track(2, 1, "b", RankIdentity{}, {});
  NcclInitInfo info;
  info.rank = 5;
  info.nranks = 16;
  info.comm_id = "0011223344556677";
  reg.on_nccl_init(1, info);
  reg.on_nccl_init(2, info);
  NcclInitInfo failed = info;
  failed.rank = 9;
  failed.result = 2;
  reg.track(3, 1, "c", RankIdentity{}, {});
  reg.on_nccl_init(3, failed);  // a failed init says nothing reliable
  auto snap = reg.snapshot();
  EXPECT_EQ(find(snap, 1)->rank, 3);  // environment wins
  EXPECT_EQ(find(snap, 2)->rank, 5);
  EXPECT_EQ(find(snap, 2)->world_size, 16);
  EXPECT_EQ(find(snap, 2)->job_id, "nccl-001122334455");
  EXPECT_EQ(find(snap, 2)->identity_source, "nccl:ncclCommInitRank");
  EXPECT_FALSE(find(snap, 3)->identified());
}

TEST(RankRegistry, ExitedRanksStayForTheGracePeriodThenGo) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  reg.track(7, 1, "a", env_identity("j", 0), {});
  reg.track(8, 1, "b", env_identity("j", 1), {});
  reg.on_exit(7, 9);          // killed by SIGKILL
  reg.on_exit(8, 3 << 8);     // exit(3)
  EXPECT_EQ(reg.tracked_count(), 0u);
  auto snap = reg.snapshot();
  EXPECT_EQ(find(snap, 7)->exit_reason, ExitReason::kSignal);
  EXPECT_EQ(find(snap, 7)->exit_code, 9);
  EXPECT_EQ(find(snap, 8)->exit_reason, ExitReason::kExit);
  EXPECT_EQ(find(snap, 8)->exit_code, 3);
  clock.advance(29);
  reg.tick();
  EXPECT_EQ(reg.snapshot().size(), 2u);
  clock.advance(2);
  reg.tick();
  EXPECT_TRUE(reg.snapshot().empty());
}

// Rank churn: past max_exited, the ranks that exited first go before their grace
// period ends (counted); live ranks and the one that just exited always stay.
TEST(RankRegistry, ExitedRanksAreCappedOldestFirst) {
  FakeClock clock;
  AgentCounters caps;
  RegistryOptions o{"n", 300, 10, false};
  o.max_exited = 2;
  o.caps = &caps;
  RankRegistry reg(clock, o);
  reg.track(1, 1, "live", env_identity("j", 9), {});
  for (int pid = 10; pid < 15; ++pid) {
    reg.track(pid, 1, "p", env_identity("j", pid), {});
    clock.advance(1);
    reg.on_exit(pid, 0);
  }
  auto snap = reg.snapshot();
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_NE(find(snap, 1), nullptr);
  EXPECT_NE(find(snap, 13), nullptr);
  EXPECT_NE(find(snap, 14), nullptr);
  EXPECT_EQ(caps.get(Cap::kExitedRanks), 3u);
  // Exits at one instant: never the one that just exited, even when it sorts first.
  clock.advance(1);
  for (int pid : {20, 5, 2}) reg.track(pid, 1, "p", env_identity("j", pid), {});
  reg.on_vanished(20);
  reg.on_vanished(5);
  reg.on_vanished(2);
  snap = reg.snapshot();
  EXPECT_NE(find(snap, 2), nullptr);
  EXPECT_NE(find(snap, 20), nullptr);
  EXPECT_EQ(find(snap, 5), nullptr);
  EXPECT_EQ(caps.get(Cap::kExitedRanks), 6u);
}

TEST(RankRegistry, CommInitsPerProcessAreCapped) {
  FakeClock clock;
  AgentCounters caps;
  RegistryOptions o{"n", 300, 10, false};
  o.max_comm_inits = 3;
  o.caps = &caps;
  RankRegistry reg(clock, o);
  reg.track(7, 1, "a", RankIdentity{}, {});
  for (int i = 0; i < 10; ++i) {
    NcclInitInfo info;
    info.rank = i;
    info.nranks = 8;
    info.comm = 0xc0 + static_cast<uint64_t>(i);
    info.comm_id = "abcdef0123456789";
    reg.on_nccl_init(7, info);
  }
  EXPECT_EQ(caps.get(Cap::kRankCommInits), 7u);
  EXPECT_EQ(reg.snapshot()[0].rank, 0);  // the first init named it
  EXPECT_EQ(reg.comm_inits(7).size(), 3u);
}

// A child's rank is in a subgroup, an InitAll's is no process's: neither names
// the rank; the first init given a rank does, whatever came before it.
TEST(RankRegistry, OnlyAnInitGivenARankNamesTheRank) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 300, 10, false});
  reg.track(7, 1, "a", RankIdentity{}, {});
  NcclInitInfo split;
  split.api = ARGUS_NCCL_COMM_SHRINK;
  split.rank = 3;
  split.nranks = 6;
  split.comm = 0xd0;
  split.comm_id = "0123456789abcdef";
  split.parent = "fedcba9876543210";
  reg.on_nccl_init(7, split);
  EXPECT_EQ(reg.snapshot()[0].rank, -1);
  EXPECT_EQ(reg.snapshot()[0].world_size, -1);
  EXPECT_EQ(reg.snapshot()[0].job_id, "nccl-0123456789ab");  // no launcher: a communicator still names the job
  NcclInitInfo init;
  init.api = ARGUS_NCCL_INIT_RANK_CONFIG;
  init.result = ARGUS_NCCL_IN_PROGRESS;  // non-blocking: made all the same
  init.rank = 5;
  init.nranks = 8;
  init.comm = 0xc0;
  init.comm_id = "fedcba9876543210";
  reg.on_nccl_init(7, init);
  EXPECT_EQ(reg.snapshot()[0].rank, 5);
  EXPECT_EQ(reg.snapshot()[0].world_size, 8);
  ASSERT_EQ(reg.comm_inits(7).size(), 2u);
  EXPECT_EQ(reg.comm_inits(7)[0].parent, "fedcba9876543210");
  EXPECT_TRUE(reg.comm_inits(8).empty());
}

TEST(RankRegistry, ReusedPidStartsAFreshRecord) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  reg.track(9, 100, "a", env_identity("old", 0), {});
  reg.apply_totals(9, {{9, ARGUS_STAT_NCCL_CALLS, ARGUS_OP_ALL_REDUCE, 0, 50, 1}});
  reg.track(9, 200, "b", env_identity("new", 1), {});
  auto snap = reg.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].job_id, "new");
  EXPECT_TRUE(snap[0].nccl.empty());
}

// A grouped exchange (a pipeline's sends and receives) waits in its
// ncclGroupEnd: that time is collective wait, and ncclGroupEnd's errors are
// its own.
TEST(RankRegistry, GroupEndTimeIsCollectiveWait) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  reg.track(1, 1, "a", env_identity("j", 0), {});
  uint64_t groups = 0, wait = 0;
  for (int i = 0; i <= 20; ++i) {
    reg.apply_totals(1, {{1, ARGUS_STAT_NCCL_CALLS, ARGUS_OP_SEND, 0, 2 * groups, 64 * groups},
                         {1, ARGUS_STAT_NCCL_WAIT, ARGUS_OP_SEND, 0, 2 * groups, 2000 * groups},
                         {1, ARGUS_STAT_NCCL_GROUP, 0, 0, groups, 2 * groups},
                         {1, ARGUS_STAT_NCCL_GROUP_WAIT, 0, 0, groups, wait},
                         {1, ARGUS_STAT_NCCL_ERROR, ARGUS_NCCL_ERR_GROUP_END, 3, 1, 0}});
    reg.tick();
    clock.advance(1);
    groups += 10;
    wait += 400'000'000 - 20'000;  // with the sends' 20 x 1 us: 0.4 s a second
  }
  const auto s = reg.snapshot()[0];
  EXPECT_NEAR(s.collective_wait_ratio, 0.4, 1e-9);
  EXPECT_EQ(s.nccl_groups.ended, 200u);
  EXPECT_EQ(s.nccl_groups.ops, 400u);
  EXPECT_EQ(s.nccl_groups.timed, 200u);
  EXPECT_EQ(s.nccl_groups.wait_ns, 20ull * (400'000'000 - 20'000));
  EXPECT_FALSE(s.nccl.contains("ncclGroupEnd"));  // not an op: argus_nccl_collectives_total keeps its ops
  EXPECT_EQ((s.nccl_errors.at({"ncclGroupEnd", "ncclInternalError"})), 1u);
}

// A Gloo rank blocked in Work::wait is inside a collective: COLL%, and its
// waits in /api/v1/ranks; not NCCL's per-op figures.
TEST(RankRegistry, C10dWorkWaitsAreCollectiveWait) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  reg.track(1, 1, "a", env_identity("j", 0), {});
  uint64_t waits = 0, wait_ns = 0;
  for (int i = 0; i <= 20; ++i) {
    reg.apply_totals(1, {{1, ARGUS_STAT_C10D_WAIT, ARGUS_OP_ALL_REDUCE, 0, waits, wait_ns}});
    reg.tick();
    clock.advance(1);
    waits += 25;
    wait_ns += 250'000'000;  // 0.25 s a second
  }
  const auto s = reg.snapshot()[0];
  EXPECT_NEAR(s.collective_wait_ratio, 0.25, 1e-9);
  EXPECT_EQ(s.process_group_waits.calls, 500u);
  EXPECT_EQ(s.process_group_waits.wait_ns, 20ull * 250'000'000);
  EXPECT_TRUE(s.nccl.empty());
}

TEST(RankRegistry, WaitRatioOverTheWindow) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  reg.track(1, 1, "a", env_identity("j", 0), {});
  uint64_t wait = 0;
  for (int i = 0; i <= 20; ++i) {
    reg.apply_totals(1, {{1, ARGUS_STAT_NCCL_WAIT, ARGUS_OP_ALL_REDUCE, 0, 1, wait}});
    reg.tick();
    clock.advance(1);
    wait += 600'000'000;  // 0.6 s waited per second
  }
  EXPECT_NEAR(reg.snapshot()[0].collective_wait_ratio, 0.6, 1e-9);
  // Many threads waiting at once cannot make the share exceed one.
  for (int i = 0; i < 12; ++i) {
    wait += 3'000'000'000ull;
    reg.apply_totals(1, {{1, ARGUS_STAT_NCCL_WAIT, ARGUS_OP_ALL_REDUCE, 0, 1, wait}});
    reg.tick();
    clock.advance(1);
  }
  EXPECT_DOUBLE_EQ(reg.snapshot()[0].collective_wait_ratio, 1.0);
}

// Off-CPU totals by reason replace, the window gives thread-seconds per wall
// second, the window's stealers are those that took time in it (most first,
// three at most), and the cgroup's throttled share comes from its cpu.stat.
TEST(RankRegistry, OffCpuSharesStealersAndThrottlingOverTheWindow) {
  FakeClock clock;
  RegistryOptions o{"n", 30, 10, false};
  o.sched_probe = true;
  RankRegistry reg(clock, o);
  reg.track(7, 1, "python", env_identity("j", 0), {});
  auto stealer = [](int pid, const char* comm, double s) {
    CpuStealer c;
    c.pid = pid;
    c.comm = comm;
    c.cgroup = "/hogs";
    c.seconds = s;
    c.count = 1;
    return c;
  };
  auto cgroup = [](double throttled) {
    CgroupCpuView v;
    v.path = "/job";
    v.periods = 10;
    v.throttled_periods = 4;
    v.throttled_seconds = throttled;
    return std::optional<CgroupCpuView>(v);
  };
  reg.apply_totals(7, {{7, ARGUS_STAT_OFFCPU, ARGUS_OFFCPU_RUNQUEUE, 0, 1, 1'000'000'000},
                       {7, ARGUS_STAT_ONCPU, 0, 0, 1, 500'000'000}});
  reg.set_cpu_stealers(7, {stealer(50, "old", 1.0), stealer(60, "hog", 0.5)});
  reg.set_cgroup_cpu(7, cgroup(1.0));
  reg.tick();
  clock.advance(4);
  reg.apply_totals(7, {{7, ARGUS_STAT_OFFCPU, ARGUS_OFFCPU_RUNQUEUE, 0, 9, 3'000'000'000},
                       {7, ARGUS_STAT_OFFCPU, ARGUS_OFFCPU_SLEEP, 0, 2, 400'000'000},
                       {7, ARGUS_STAT_OFFCPU, 9, 0, 1, 1},  // an unknown reason is ignored
                       {7, ARGUS_STAT_ONCPU, 0, 0, 5, 2'500'000'000}});
  reg.set_cpu_stealers(7, {stealer(50, "old", 1.0), stealer(60, "hog", 2.0), stealer(61, "b", 0.2),
                           stealer(62, "c", 0.1), stealer(63, "d", 0.05)});
  reg.set_cgroup_cpu(7, cgroup(3.0));
  reg.tick();
  const auto snap = reg.snapshot();
  const auto* s = find(snap, 7);
  ASSERT_NE(s, nullptr);
  const OffCpuView& v = s->offcpu;
  EXPECT_TRUE(v.present);
  EXPECT_EQ(v.offcpu_ns[ARGUS_OFFCPU_RUNQUEUE], 3'000'000'000u);
  EXPECT_EQ(v.offcpu_ns[ARGUS_OFFCPU_SLEEP], 400'000'000u);
  EXPECT_EQ(v.oncpu_ns, 2'500'000'000u);
  EXPECT_DOUBLE_EQ(v.window_span_seconds, 4.0);
  EXPECT_DOUBLE_EQ(v.window_offcpu_share[ARGUS_OFFCPU_RUNQUEUE], 0.5);
  EXPECT_DOUBLE_EQ(v.window_offcpu_share[ARGUS_OFFCPU_SLEEP], 0.1);
  EXPECT_DOUBLE_EQ(v.window_oncpu_share, 0.5);
  ASSERT_EQ(v.stealers.size(), 3u);  // "old" took nothing in the window; "d" is fourth
  EXPECT_EQ(v.stealers[0].pid, 60);
  EXPECT_EQ(v.stealers[0].comm, "hog");
  EXPECT_EQ(v.stealers[0].cgroup, "/hogs");
  EXPECT_NEAR(v.stealers[0].seconds, 1.5, 1e-9);
  EXPECT_EQ(v.stealers[1].pid, 61);
  EXPECT_EQ(v.stealers[2].pid, 62);
  EXPECT_TRUE(s->cgroup_cpu.present);
  EXPECT_EQ(s->cgroup_cpu.throttled_periods, 4u);
  EXPECT_NEAR(s->cgroup_cpu.window_throttled_share, 0.5, 1e-9);
  reg.set_cgroup_cpu(7, std::nullopt);  // no cpu controller to read any more
  EXPECT_FALSE(reg.snapshot()[0].cgroup_cpu.present);
}

TEST(RankRegistry, OffCpuAbsentWithoutTheSchedProbe) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  reg.track(7, 1, "python", env_identity("j", 0), {});
  reg.apply_totals(7, {});
  EXPECT_FALSE(reg.snapshot()[0].offcpu.present);
}

TEST(RankRegistry, UnknownPidsAreIgnored) {
  FakeClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  reg.apply_totals(404, {{404, ARGUS_STAT_NCCL_CALLS, 0, 0, 1, 1}});
  reg.on_exit(404, 0);
  reg.on_nccl_init(404, NcclInitInfo{});
  reg.on_vanished(404);
  EXPECT_TRUE(reg.snapshot().empty());
}

// Block I/O aggregates become per-op histograms (replaced each pass, as every
// BPF total); TCP retransmits are added (BPF forgets idle sockets).
TEST(RankRegistry, BlockIoTotalsAndTcpRetransmits) {
  FakeClock clock;
  RankRegistry reg(clock, {"node-a", 60, 10, false});
  reg.track(100, 5, "python", env_identity("job", 0), {});
  const std::vector<AggregateRecord> totals = {
      {100, ARGUS_STAT_BLOCK_IO, ARGUS_BLOCK_WRITE, 0, 3, 900'000},
      {100, ARGUS_STAT_BLOCK_IO_HIST, 18, ARGUS_BLOCK_WRITE, 2, 400'000},
      {100, ARGUS_STAT_BLOCK_IO_HIST, 19, ARGUS_BLOCK_WRITE, 1, 500'000},
      {100, ARGUS_STAT_BLOCK_IO, ARGUS_BLOCK_FLUSH, 0, 1, 2'000'000},
      {100, ARGUS_STAT_BLOCK_IO_HIST, 21, ARGUS_BLOCK_FLUSH, 1, 2'000'000},
      {100, ARGUS_STAT_BLOCK_IO, 77, 0, 1, 10},  // an op from a newer agent: "other"
  };
  reg.apply_totals(100, totals);
  reg.apply_totals(100, totals);
  reg.add_tcp_retransmits(100, {{"10.0.0.2", 4}});
  reg.add_tcp_retransmits(100, {{"10.0.0.2", 1}, {"10.0.0.3", 2}});
  reg.add_tcp_retransmits(555, {{"10.0.0.2", 9}});  // not a rank: dropped
  auto snap = reg.snapshot();
  const RankSnapshot* r = find(snap, 100);
  ASSERT_NE(r, nullptr);
  ASSERT_EQ(r->block_io.size(), 3u);
  const LaunchTiming& w = r->block_io.at("write");
  EXPECT_EQ(w.count, 3u);
  EXPECT_EQ(w.ns, 900'000u);
  EXPECT_EQ(w.log2_buckets, (std::map<uint32_t, uint64_t>{{18, 2}, {19, 1}}));
  EXPECT_EQ(r->block_io.at("flush").count, 1u);
  EXPECT_EQ(r->block_io.at("other").count, 1u);
  EXPECT_EQ(r->tcp_retransmits, (std::map<std::string, uint64_t>{{"10.0.0.2", 5}, {"10.0.0.3", 2}}));
  EXPECT_EQ(find(snap, 555), nullptr);
  EXPECT_STREQ(block_op_label(ARGUS_BLOCK_READ), "read");
  EXPECT_STREQ(block_op_label(ARGUS_BLOCK_DISCARD), "discard");
}

}  // namespace
}  // namespace argus
