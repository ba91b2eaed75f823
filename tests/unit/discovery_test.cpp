// Discovery on fake /proc trees: which processes are ranks, the identity from
// their environment, and counted skips for malformed or vanished entries.
#include "userspace/discovery/discovery.h"
#include "tests/support/fake_proc.h"

#include <gtest/gtest.h>

#include <limits>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

namespace argus {
namespace {

namespace fs = std::filesystem;

// Says "nccl" for any path containing "nccl": discovery's logic, not ELF, is under test.
class NameProber : public LibraryProber {
 public:
  LibraryKind consider(int, const procfs::MapEntry& m) override {
    ++calls;
    if (m.path.find("nccl") != std::string::npos) return LibraryKind::Nccl;
    if (m.path.find("libcuda") != std::string::npos) return LibraryKind::Cuda;
    if (m.path.find("libpython") != std::string::npos) return LibraryKind::Python;
    if (m.path.find("ld-linux") != std::string::npos) return LibraryKind::Loader;  // its hook attached
    return LibraryKind::None;
  }
  int calls = 0;
};

using testing_support::FakeProc;

const std::string kNcclMaps =
    "7f0000000000-7f0000100000 r-xp 00000000 fd:01 1234 /opt/conda/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
    "7f0000200000-7f0000300000 r--p 00000000 fd:01 1234 /opt/conda/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2\n"
    "7f0000400000-7f0000500000 r-xp 00000000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n";
const std::string kPlainMaps = "7f0000400000-7f0000500000 r-xp 00000000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n";

std::string env(std::initializer_list<std::string> kv) { return testing_support::environ_of(kv); }

TEST(Discovery, FindsRanksByTheirLibrariesWithIdentity) {
  FakeProc proc;
  proc.add(10, kNcclMaps, env({"RANK=3", "WORLD_SIZE=8", "TORCHELASTIC_RUN_ID=llm-7", "LOCAL_RANK=3"}));
  proc.add(11, kPlainMaps, env({"RANK=1"}));
  NameProber prober;
  Discovery d({proc.root().string(), 0}, prober);
  auto found = d.scan(100);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 10);
  EXPECT_EQ(found[0].identity.job_id, "llm-7");
  EXPECT_EQ(found[0].identity.rank, 3);
  EXPECT_EQ(found[0].comm, "python");
  EXPECT_EQ(found[0].start_ticks, 4242u);
  ASSERT_EQ(found[0].libraries.size(), 1u);  // one file, asked about once
  // Only executable, file-backed mappings are considered, each file once.
  EXPECT_EQ(prober.calls, 3);
}

// A process that maps only a Python interpreter is a rank only when its
// environment names one (rank and job id): a plain system Python is not
// tracked, and is rechecked like any other non-rank.
TEST(Discovery, PythonAloneIsARankOnlyWhenTheEnvironmentNamesOne) {
  const std::string py_maps =
      "7f0000000000-7f0000100000 r-xp 00000000 fd:01 77 /usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0\n" + kPlainMaps;
  FakeProc proc;
  proc.add(40, py_maps, env({"RANK=2", "WORLD_SIZE=4", "TORCHELASTIC_RUN_ID=llm-9"}));
  proc.add(41, py_maps, "");                                         // a plain system Python
  proc.add(42, py_maps, env({"RANK=1"}));                            // a rank but no job id
  proc.add(43, py_maps, env({"TORCHELASTIC_RUN_ID=llm-9"}));         // a job id but no rank
  proc.add(44, py_maps + kNcclMaps, "");                             // Python with NCCL: a rank as ever
  NameProber prober;
  DiscoveryOptions opts{proc.root().string(), 0};
  Discovery d(opts, prober);
  auto found = d.scan(0);
  std::set<int> pids;
  for (const auto& f : found) pids.insert(f.pid);
  EXPECT_EQ(pids, (std::set<int>{40, 44}));
  for (const auto& f : found)
    if (f.pid == 40) {
      EXPECT_EQ(f.identity.rank, 2);
      EXPECT_EQ(f.identity.job_id, "llm-9");
    }
  // The refused ones are rechecked like other non-ranks (the ranks are not due
  // yet), and refused again.
  const int calls = prober.calls;
  EXPECT_TRUE(d.scan(opts.young_recheck_seconds).empty());
  EXPECT_EQ(prober.calls, calls + 3 * 2);  // 41, 42, 43: libpython and libc each
}

TEST(Discovery, SkipsTheAgentItselfAndBacksOffOldProcesses) {
  FakeProc proc;
  proc.add(20, kPlainMaps, "");
  proc.add(21, kNcclMaps, "");
  NameProber prober;
  DiscoveryOptions opts{proc.root().string(), 21};
  Discovery d(opts, prober);
  EXPECT_TRUE(d.scan(0).empty());
  const int after_first = prober.calls;
  d.scan(1);  // young, but rechecked only every young_recheck_seconds
  EXPECT_EQ(prober.calls, after_first);
  d.scan(opts.young_recheck_seconds);
  EXPECT_GT(prober.calls, after_first);
  d.scan(40);  // old now: rechecked only every old_recheck_seconds
  const int at_40 = prober.calls;
  d.scan(41);
  EXPECT_EQ(prober.calls, at_40);
  d.scan(40 + opts.old_recheck_seconds);
  EXPECT_GT(prober.calls, at_40);
}

TEST(Discovery, ExecFollowUpsCatchLibrariesMappedLater) {
  FakeProc proc;
  proc.add(30, kPlainMaps, env({"RANK=0"}));
  NameProber prober;
  Discovery d({proc.root().string(), 0}, prober);
  EXPECT_EQ(d.next_followup(), std::numeric_limits<double>::infinity());  // nothing pending
  d.on_exec(30, 10.0);
  EXPECT_EQ(d.next_followup(), 10.0);  // the event loop waits no longer than this
  EXPECT_TRUE(d.run_due(10.0).empty());  // nothing mapped yet
  EXPECT_GT(d.next_followup(), 10.0);
  EXPECT_LT(d.next_followup(), 10.05);
  proc.add(30, kNcclMaps, env({"RANK=0"}));  // the loader (or a dlopen) mapped NCCL
  EXPECT_TRUE(d.run_due(10.01).empty());     // the next follow-up is not due yet
  auto found = d.run_due(10.1);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].identity.rank, 0);
}

// A dlopen (the loader's link-map hint) brings a look within the settle time;
// a burst of hints brings one look, and a hint after a look brings another.
TEST(Discovery, LinkMapHintsBringALookSoonAndCoalesce) {
  FakeProc proc;
  proc.add(31, kPlainMaps, env({"RANK=1"}));
  NameProber prober;
  AgentCounters counters;
  DiscoveryOptions opts{proc.root().string(), 0};
  opts.counters = &counters;
  Discovery d(opts, prober);
  d.scan(100.0);  // an old process, rechecked rarely
  const int after_scan = prober.calls;
  for (int i = 0; i < 50; ++i) d.on_link_map_change(31, 105.0 + i * 1e-4);  // an import storm
  EXPECT_GT(d.next_followup(), 105.0);
  EXPECT_LE(d.next_followup(), 105.02);
  proc.add(31, kNcclMaps, env({"RANK=1"}));  // the last dlopen mapped NCCL
  EXPECT_TRUE(d.run_due(105.0).empty());
  auto found = d.run_due(105.02);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].identity.rank, 1);
  EXPECT_EQ(prober.calls - after_scan, 2);  // one look (NCCL and libc: two files), for 50 hints
  EXPECT_EQ(d.next_followup(), std::numeric_limits<double>::infinity());
  d.on_link_map_change(31, 106.0);  // a later dlopen: another look
  EXPECT_EQ(d.run_due(106.02).size(), 1u);
  // The agent itself and nonsense pids bring nothing.
  d.on_link_map_change(0, 107.0);
  d.on_link_map_change(-4, 107.0);
  EXPECT_EQ(d.next_followup(), std::numeric_limits<double>::infinity());
  // A hint for a process that is gone is a counted skip at its look, not an error.
  d.on_link_map_change(4242, 108.0);
  EXPECT_TRUE(d.run_due(108.02).empty());
  EXPECT_EQ(counters.get(SkipReason::kVanished), 1u);
}

// A process whose loader is probed tells of each dlopen itself, and one with no
// mappings (a kernel thread) maps nothing until an exec: neither is re-read at
// the young or old pace (on a busy node, most of a scan's cost), only at the
// hinted net's, while a hint or an exec still brings a look at once.
TEST(Discovery, ProcessesThatHintAndKernelThreadsAreRecheckedOnlyAsANet) {
  const std::string loader_maps =
      "7f0000600000-7f0000700000 r-xp 00000000 fd:01 5 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\n" + kPlainMaps;
  FakeProc proc;
  proc.add(70, loader_maps, env({"RANK=0"}));  // its dlopens hint
  proc.add(71, "", "");                        // a kernel thread: no mappings
  proc.add(72, kPlainMaps, env({"RANK=2"}));   // no loader hook: rechecked as before
  NameProber prober;
  DiscoveryOptions opts{proc.root().string(), 0};
  Discovery d(opts, prober);
  EXPECT_TRUE(d.scan(0).empty());
  // All three now map NCCL without a hint (a loader the hook missed, an exec unseen).
  proc.add(70, loader_maps + kNcclMaps, env({"RANK=0"}));
  proc.add(71, kNcclMaps, env({"RANK=1"}));
  proc.add(72, kNcclMaps, env({"RANK=2"}));
  auto pids_of = [](const std::vector<FoundProcess>& found) {
    std::set<int> pids;
    for (const auto& f : found) pids.insert(f.pid);
    return pids;
  };
  EXPECT_EQ(pids_of(d.scan(opts.young_recheck_seconds)), (std::set<int>{72}));
  EXPECT_EQ(pids_of(d.scan(opts.old_recheck_seconds + 1)), (std::set<int>{72}));  // a rank, rechecked as one
  d.on_link_map_change(70, 40);  // a dlopen: looked at within the settle time
  EXPECT_EQ(pids_of(d.run_due(40.02)), (std::set<int>{70}));
  d.on_exec(71, 41);  // a new image: followed up at once
  EXPECT_EQ(pids_of(d.run_due(41)), (std::set<int>{71}));

  // After an exec, a process whose loader is probed keeps only the follow-ups
  // of the first 0.1 s (a hand-made mmap at start); later dlopens hint.
  FakeProc proc3;
  proc3.add(73, loader_maps, env({"RANK=3"}));
  proc3.add(74, kPlainMaps, env({"RANK=4"}));
  Discovery d3({proc3.root().string(), 0}, prober);
  d3.on_exec(73, 50);
  EXPECT_TRUE(d3.run_due(50).empty());
  EXPECT_EQ(d3.next_followup(), 50.02);
  EXPECT_TRUE(d3.run_due(50.02).empty());
  EXPECT_EQ(d3.next_followup(), 50.1);
  EXPECT_TRUE(d3.run_due(50.1).empty());
  EXPECT_EQ(d3.next_followup(), std::numeric_limits<double>::infinity());  // not 50.3, 51 and 53
  // Once its loader has spoken (the signals around mapping DT_NEEDED), the look
  // that signal brings is the last: the exec's own follow-ups would read the same.
  proc3.add(75, loader_maps, env({"RANK=5"}));
  d3.on_exec(75, 55);
  EXPECT_TRUE(d3.run_due(55).empty());
  EXPECT_EQ(d3.next_followup(), 55.02);
  d3.on_link_map_change(75, 55.001);
  d3.on_link_map_change(75, 55.002);  // before and after mapping: one look
  EXPECT_EQ(d3.next_followup(), 55.001 + 0.01);
  EXPECT_TRUE(d3.run_due(55.001 + 0.01).empty());
  EXPECT_EQ(d3.next_followup(), std::numeric_limits<double>::infinity());  // not 55.02 and 55.1
  d3.on_link_map_change(75, 56);  // a later dlopen still brings a look
  EXPECT_EQ(d3.next_followup(), 56.01);
  EXPECT_TRUE(d3.run_due(56.01).empty());
  d3.on_exec(74, 60);  // one whose loader is not probed keeps them all
  EXPECT_TRUE(d3.run_due(60.1).empty());
  EXPECT_EQ(d3.next_followup(), 60.3);

  // Unhinted, they would have been found by the net.
  FakeProc proc2;
  proc2.add(71, "", "");
  Discovery d2({proc2.root().string(), 0}, prober);
  EXPECT_TRUE(d2.scan(0).empty());
  proc2.add(71, kNcclMaps, env({"RANK=1"}));
  EXPECT_TRUE(d2.scan(opts.hinted_recheck_seconds - 1).empty());
  EXPECT_EQ(pids_of(d2.scan(opts.hinted_recheck_seconds)), (std::set<int>{71}));
}

TEST(Discovery, MalformedAndVanishedEntriesAreCountedSkips) {
  FakeProc proc;
  proc.add(40, "garbage line\n" + kNcclMaps + "zzzz-yyyy r-xp\n", env({"RANK=2"}));
  fs::create_directories(proc.root() / "41");  // a pid whose files are gone
  fs::create_directories(proc.root() / "notapid");
  NameProber prober;
  AgentCounters counters;
  DiscoveryOptions opts{proc.root().string(), 0};
  opts.counters = &counters;
  Discovery d(opts, prober);
  auto found = d.scan(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].pid, 40);
  EXPECT_EQ(counters.get(SkipReason::kMalformedMapsLine), 1u);
  EXPECT_EQ(counters.get(SkipReason::kVanished), 1u);
  EXPECT_FALSE(d.check(999, 0));  // no such pid
  EXPECT_EQ(counters.get(SkipReason::kVanished), 2u);
}

TEST(Discovery, UnreadableEnvironmentStillTracksTheRank) {
  FakeProc proc;
  proc.add(50, kNcclMaps, "");
  fs::remove(proc.root() / "50" / "environ");
  NameProber prober;
  AgentCounters counters;
  DiscoveryOptions opts{proc.root().string(), 0};
  opts.counters = &counters;
  Discovery d(opts, prober);
  auto found = d.scan(0);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].identity.rank, -1);  // NCCL init will tell
  EXPECT_EQ(counters.get(SkipReason::kEnvironVanished), 1u);
}

}  // namespace
}  // namespace argus

namespace argus {
namespace {

TEST(Discovery, OnlyEnvSelectsThisNodesRanks) {
  FakeProc proc;
  proc.add(60, kNcclMaps, env({"RANK=0", "ARGUS_SIM_NODE=node-0"}));
  proc.add(61, kNcclMaps, env({"RANK=1", "ARGUS_SIM_NODE=node-1"}));
  proc.add(62, kNcclMaps, env({"RANK=2"}));
  NameProber prober;
  DiscoveryOptions opts;
  opts.proc_root = proc.root().string();
  opts.only_env_key = "ARGUS_SIM_NODE";
  opts.only_env_value = "node-1";
  Discovery d(opts, prober);
  auto found = d.scan(0);
  ASSERT_EQ(found.size(), 3u);  // all are ranks; only one is this agent's
  std::map<int, bool> selected;
  for (const auto& f : found) selected[f.pid] = f.selected;
  EXPECT_FALSE(selected[60]);
  EXPECT_TRUE(selected[61]);
  EXPECT_FALSE(selected[62]);
}

}  // namespace
}  // namespace argus
