// The runtime's kernel-CPU pass on a fake backend and fake /proc and /sys
// trees: off-CPU totals and shares, stealers named with their cgroup, the
// rank's cgroup cpu.stat (v1), and a malformed cpu.stat as a counted skip.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/support/fake_proc.h"
#include "tests/support/manual_clock.h"
#include "tests/support/quiet_backend.h"
#include "tests/support/temp_dir.h"
#include "userspace/agent/agent_runtime.h"

namespace argus {
namespace {

using testing_support::environ_of;
using testing_support::FakeProc;
using testing_support::ManualClock;
namespace fs = std::filesystem;

// The scheduler layer's maps, fed by the test.
class SchedBackend : public testing_support::QuietBackend {
 public:
  std::vector<StatEntry> read_stats(uint32_t only) const override {
    std::vector<StatEntry> out;
    for (const auto& s : stats)
      if (only == 0 || s.key.tgid == only) out.push_back(s);
    return out;
  }
  std::map<std::string, std::string> kernel_probes() const override { return {{"sched_switch", sched_state}}; }
  std::vector<StealerEntry> read_stealers(uint32_t victim) const override {
    ++single_reads;
    return stealers_of(victim);
  }
  // The stats pass: one walk of the shared map for every rank.
  std::map<uint32_t, std::vector<StealerEntry>> read_stealers_of(const std::vector<uint32_t>& victims) const override {
    ++walks;
    std::map<uint32_t, std::vector<StealerEntry>> out;
    for (uint32_t v : victims) out[v] = stealers_of(v);
    return out;
  }
  std::vector<StealerEntry> stealers_of(uint32_t victim) const {
    std::vector<StealerEntry> out;
    for (const auto& s : stealers)
      if (s.key.victim_tgid == victim) out.push_back(s);
    return out;
  }
  void delete_stealers(uint32_t victim) override {
    std::erase_if(stealers, [&](auto& s) { return s.key.victim_tgid == victim; });
  }

  void set_stat(uint32_t tgid, uint16_t kind, uint16_t sub, uint64_t count, uint64_t sum) {
    for (auto& s : stats)
      if (s.key.tgid == tgid && s.key.kind == kind && s.key.sub == sub) {
        s.value = {count, sum};
        return;
      }
    StatEntry e{};
    e.key = {tgid, kind, sub, 0, 0};
    e.value = {count, sum};
    stats.push_back(e);
  }
  void set_stealer(uint32_t victim, uint32_t stealer, const char* comm, uint64_t ns) {
    for (auto& s : stealers)
      if (s.key.victim_tgid == victim && s.key.stealer_tgid == stealer) {
        s.value.ns = ns;
        return;
      }
    StealerEntry e{};
    e.key = {victim, stealer};
    e.value.ns = ns;
    e.value.count = 1;
    std::strncpy(e.value.comm, comm, sizeof(e.value.comm) - 1);
    stealers.push_back(e);
  }

  std::vector<StatEntry> stats;
  std::vector<StealerEntry> stealers;
  mutable int walks = 0, single_reads = 0;
  std::string sched_state = "tp_btf";  // "off": --offcpu off
};

void put(const fs::path& p, const std::string& content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << content;
}

TEST(AgentOffCpu, SharesStealersAndCgroupCpuFromTheKernelPass) {
  ManualClock clock{1'000'000'000'000, 1'790'000'000};
  FakeProc proc;
  testing_support::TempDir sys("sys");
  for (int r = 0; r < 2; ++r) {
    const int pid = 301 + r;
    proc.add(pid, "", environ_of({"RANK=" + std::to_string(r), "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=k"}));
    put(proc.root() / std::to_string(pid) / "cgroup", "4:cpu,cpuacct:/job/r" + std::to_string(r) + "\n0::/\n");
  }
  proc.add(900, "", "", "stress-ng");
  put(proc.root() / "900" / "cgroup", "4:cpu,cpuacct:/noisy\n0::/\n");
  put(sys.path / "fs/cgroup/cpu,cpuacct/job/r0/cpu.stat", "nr_periods 10\nnr_throttled 4\nthrottled_time 2000000000\n");
  put(sys.path / "fs/cgroup/cpu,cpuacct/job/r1/cpu.stat", "nr_periods ten\n");  // malformed
  fs::create_directories(sys.path / "fs/cgroup/cpu,cpuacct/noisy");

  AgentConfig opts;
  opts.node = "n";
  opts.paths.proc_root = proc.root().string();
  opts.paths.sysfs_root = sys.str();
  opts.detection.window_seconds = 10;
  auto owned = std::make_unique<SchedBackend>();
  SchedBackend* b = owned.get();
  auto rt = AgentRuntime::with_backend(opts, clock, std::move(owned));
  b->seen(301, clock.ns);
  b->seen(302, clock.ns);
  b->set_stat(301, ARGUS_STAT_OFFCPU, ARGUS_OFFCPU_RUNQUEUE, 1, 0);
  rt->run_once(0);
  // Two ranks, one walk of the stealer map per stats pass (never one per rank).
  EXPECT_GE(b->walks, 1);
  EXPECT_EQ(b->single_reads, 0);
  const int walks_before = b->walks;
  clock.advance(4);
  b->set_stat(301, ARGUS_STAT_OFFCPU, ARGUS_OFFCPU_RUNQUEUE, 10, 2'000'000'000);
  b->set_stat(301, ARGUS_STAT_ONCPU, 0, 10, 1'000'000'000);
  b->set_stealer(301, 900, "stress-ng", 1'800'000'000);
  put(sys.path / "fs/cgroup/cpu,cpuacct/job/r0/cpu.stat",
      "nr_periods 50\nnr_throttled 24\nthrottled_time 3000000000\n");
  rt->run_once(0);
  EXPECT_EQ(b->walks - walks_before, 1);
  EXPECT_EQ(b->single_reads, 0);

  const Snapshot snap = rt->snapshot();
  const RankSnapshot* r0 = nullptr;
  const RankSnapshot* r1 = nullptr;
  for (const auto& r : snap.ranks) {
    if (r.pid == 301) r0 = &r;
    if (r.pid == 302) r1 = &r;
  }
  ASSERT_NE(r0, nullptr);
  ASSERT_NE(r1, nullptr);
  EXPECT_TRUE(r0->offcpu.present);
  EXPECT_EQ(r0->offcpu.offcpu_ns[ARGUS_OFFCPU_RUNQUEUE], 2'000'000'000u);
  EXPECT_DOUBLE_EQ(r0->offcpu.window_offcpu_share[ARGUS_OFFCPU_RUNQUEUE], 0.5);
  EXPECT_DOUBLE_EQ(r0->offcpu.window_oncpu_share, 0.25);
  ASSERT_EQ(r0->offcpu.stealers.size(), 1u);
  EXPECT_EQ(r0->offcpu.stealers[0].pid, 900);
  EXPECT_EQ(r0->offcpu.stealers[0].comm, "stress-ng");
  EXPECT_EQ(r0->offcpu.stealers[0].cgroup, "/noisy");
  EXPECT_NEAR(r0->offcpu.stealers[0].seconds, 1.8, 1e-9);
  EXPECT_TRUE(r0->cgroup_cpu.present);
  EXPECT_EQ(r0->cgroup_cpu.path, "/job/r0");
  EXPECT_EQ(r0->cgroup_cpu.periods, 50u);
  EXPECT_EQ(r0->cgroup_cpu.throttled_periods, 24u);
  EXPECT_DOUBLE_EQ(r0->cgroup_cpu.throttled_seconds, 3.0);
  EXPECT_NEAR(r0->cgroup_cpu.window_throttled_share, 0.25, 1e-9);
  // The malformed file: no figures, one counted skip however many passes.
  EXPECT_FALSE(r1->cgroup_cpu.present);
  clock.advance(2);
  rt->run_once(0);
  EXPECT_EQ(rt->snapshot().agent.counters.get(SkipReason::kCgroupCpuStatMalformed), 1u);
}

// --offcpu off (the probe not attached): no off-CPU view, whatever the map holds.
TEST(AgentOffCpu, NoViewWhenTheSchedProbeIsOff) {
  ManualClock clock{1'000'000'000'000, 1'790'000'000};
  FakeProc proc;
  proc.add(301, "", environ_of({"RANK=0", "WORLD_SIZE=1", "TORCHELASTIC_RUN_ID=k"}));
  AgentConfig opts;
  opts.paths.proc_root = proc.root().string();
  opts.paths.sysfs_root = proc.root().string();  // no cgroup tree there
  auto owned = std::make_unique<SchedBackend>();
  owned->sched_state = "off";
  SchedBackend* b = owned.get();
  auto rt = AgentRuntime::with_backend(opts, clock, std::move(owned));
  b->seen(301, clock.ns);
  b->set_stat(301, ARGUS_STAT_OFFCPU, ARGUS_OFFCPU_SLEEP, 1, 5);
  rt->run_once(0);
  const Snapshot snap = rt->snapshot();
  ASSERT_EQ(snap.ranks.size(), 1u);
  EXPECT_FALSE(snap.ranks[0].offcpu.present);
  EXPECT_FALSE(snap.ranks[0].cgroup_cpu.present);
}

}  // namespace
}  // namespace argus
