// The probe manager's lifecycle without BPF: a file is probed once whoever maps
// it, its probes go when no live process maps it for the grace period, and a
// new mapper probes it again. Attaches land on /proc/self/fd/N of the file
// that was checked.
#include "userspace/probes/probe_manager.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>

#include "tests/support/mapping_child.h"
#include "tests/support/temp_dir.h"

namespace argus {
namespace {

namespace fs = std::filesystem;
using testing_support::MappingChild;
using testing_support::TempDir;

const std::string kShim = ARGUS_BUILD_DIR "/lib/libnccl.so.2";

// Attaches succeed (with no kernel link behind them) and are recorded: the one
// slice of the BPF backend the probe manager uses.
class RecordingBackend : public BpfAttach {
 public:
  Result<Link> attach_uprobe(const std::string& path, const ProbeSpec&) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0) inodes.insert(st.st_ino);
    paths.insert(path);
    ++uprobes;
    return Link(nullptr);
  }
  Result<Link> attach_gpu_usdt(const std::string&, bool) override { return Link(nullptr); }
  uint64_t usdt_spec_slots() const override { return 4; }

  std::set<std::string> paths;
  std::set<ino_t> inodes;
  int uprobes = 0;
};

// Every uprobe attach fails (a kernel that refuses the offset, a missing PMU).
class RefusingBackend : public RecordingBackend {
 public:
  Result<Link> attach_uprobe(const std::string&, const ProbeSpec&) override { return make_error("refused"); }
};

class ProbeLifecycle : public ::testing::TestWithParam<bool> {
 protected:
  ProbeManagerOptions options() const {
    return {.proc_root = "/proc", .release_grace_seconds = 10, .parse_in_background = GetParam()};
  }
  // consider(), then (in the background mode) the parse and its completion.
  LibraryKind probe(ProbeManager& pm, int pid, const procfs::MapEntry& m, std::vector<int>* again = nullptr) {
    LibraryKind k = pm.consider(pid, m);
    if (!GetParam()) return k;
    EXPECT_EQ(k, LibraryKind::None);  // still being parsed
    pm.wait_idle();
    auto pids = pm.complete_parses();
    if (again) *again = pids;
    return pm.consider(pid, m);
  }
  TempDir dir_{"probe-lifecycle"};
  RecordingBackend backend_;
};

TEST_P(ProbeLifecycle, ProbedOnceReleasedAfterGraceProbedAgain) {
  const fs::path lib = dir_.path / "libnccl.so.2";
  fs::copy_file(kShim, lib);
  struct stat st {};
  ASSERT_EQ(::stat(lib.c_str(), &st), 0);
  MappingChild a(lib.string()), b(lib.string());
  ASSERT_TRUE(a.mapped() && b.mapped());
  ProbeManager pm(backend_, options());

  std::vector<int> again;
  EXPECT_EQ(probe(pm, a.pid(), *a.entry(lib.string()), &again), LibraryKind::Nccl);
  if (GetParam()) {
    EXPECT_EQ(again, std::vector<int>{a.pid()});
  }
  const int per_file = backend_.uprobes;
  ASSERT_GT(per_file, 0);
  EXPECT_EQ(pm.consider(b.pid(), *b.entry(lib.string())), LibraryKind::Nccl);  // same inode: no new probes
  EXPECT_EQ(backend_.uprobes, per_file);
  // Every attach went through the fd of the checked file.
  EXPECT_EQ(backend_.inodes, std::set<ino_t>{st.st_ino});
  for (const auto& p : backend_.paths) EXPECT_EQ(p.rfind("/proc/self/fd/", 0), 0u) << p;

  auto stats = pm.stats();
  EXPECT_EQ(stats.files["nccl"], 1u);
  EXPECT_EQ(stats.probes["nccl"], static_cast<uint64_t>(per_file));
  // One attach delay per file probed (the second mapper found the probes live),
  // and it spans at least the parse between the first sight and the attach.
  ASSERT_EQ(stats.attach_delay.count("nccl"), 1u);
  EXPECT_EQ(stats.attach_delay["nccl"].count, 1u);
  EXPECT_GT(stats.attach_delay["nccl"].ns, 0u);
  uint64_t in_buckets = 0;
  for (const auto& [bucket, n] : stats.attach_delay["nccl"].log2_buckets) in_buckets += n;
  EXPECT_EQ(in_buckets, 1u);

  // One mapper left: nothing goes. None left: it goes after the grace period.
  const int pid_a = a.pid(), pid_b = b.pid();
  a.kill();
  pm.sweep(100, {pid_b});
  pm.sweep(200, {pid_b});
  EXPECT_EQ(pm.stats().files["nccl"], 1u);
  b.kill();
  pm.sweep(300, {});
  pm.sweep(305, {});
  EXPECT_EQ(pm.stats().files["nccl"], 1u);  // within the grace period
  pm.sweep(311, {});
  stats = pm.stats();
  EXPECT_EQ(stats.files["nccl"], 0u);
  EXPECT_EQ(stats.probes["nccl"], 0u);
  EXPECT_EQ(stats.files_released, 1u);
  EXPECT_EQ(stats.files_known, 0u);

  // A new process maps it: probed again.
  MappingChild c(lib.string());
  ASSERT_TRUE(c.mapped());
  EXPECT_EQ(probe(pm, c.pid(), *c.entry(lib.string())), LibraryKind::Nccl);
  EXPECT_EQ(backend_.uprobes, 2 * per_file);
  EXPECT_EQ(pm.stats().probes["nccl"], static_cast<uint64_t>(per_file));
  EXPECT_EQ(pm.stats().attach_delay["nccl"].count, 2u);  // probed afresh: a second delay
  (void)pid_a;
}

// An interpreter is classified at once, but its collector is probed only when
// a rank maps it (a plain Python's collections never trap), once per file.
TEST_P(ProbeLifecycle, PythonCollectorProbedOnlyOnceARankMapsIt) {
  const char* home = std::getenv("HOME");
  const std::string lib = std::string(home ? home : "/root") + "/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0";
  if (!fs::exists(lib)) GTEST_SKIP() << "no " << lib;
  MappingChild a(lib);
  ASSERT_TRUE(a.mapped());
  ProbeManager pm(backend_, options());
  EXPECT_EQ(probe(pm, a.pid(), *a.entry(lib)), LibraryKind::Python);
  EXPECT_EQ(backend_.uprobes, 0);  // no rank maps it yet
  pm.attach_python_gc_for(a.pid() + 1'000'000);
  EXPECT_EQ(backend_.uprobes, 0);  // another process is not its mapper
  pm.attach_python_gc_for(a.pid());
  EXPECT_EQ(backend_.uprobes, 2);  // gc_collect_main: entry + return
  auto stats = pm.stats();
  EXPECT_EQ(stats.python_gc_files["gc_collect_main"], 1u);
  EXPECT_EQ(stats.probes["python"], 2u);
  EXPECT_EQ(stats.files["python"], 1u);
  pm.attach_python_gc_for(a.pid());
  EXPECT_EQ(backend_.uprobes, 2);  // once per file
  for (const auto& p : backend_.paths) EXPECT_EQ(p.rfind("/proc/self/fd/", 0), 0u) << p;
}

// A file that is not an NCCL/CUDA library is remembered (not re-read at every
// recheck) while mapped, and forgotten with its last mapper: the table of
// known files is bounded by what live processes map.
TEST_P(ProbeLifecycle, UnprobedFilesAreForgottenWithTheirMappers) {
  const fs::path lib = dir_.path / "libm-copy.so";
  fs::copy_file("/lib/x86_64-linux-gnu/libm.so.6", lib);
  MappingChild a(lib.string());
  ASSERT_TRUE(a.mapped());
  ProbeManager pm(backend_, options());
  EXPECT_EQ(probe(pm, a.pid(), *a.entry(lib.string())), LibraryKind::None);
  pm.sweep(1, {a.pid()});
  EXPECT_EQ(pm.stats().files_known, 1u);
  a.kill();
  pm.sweep(2, {});
  pm.sweep(20, {});
  EXPECT_EQ(pm.stats().files_known, 0u);
  EXPECT_EQ(pm.stats().files_released, 0u);  // nothing was attached, nothing released
  EXPECT_EQ(backend_.uprobes, 0);
}

// The dynamic loader is told as such (its processes' dlopens will hint, so
// discovery rechecks them rarely) only when its hook attached.
TEST_P(ProbeLifecycle, TheLoaderIsToldOnlyWhenItsHookAttached) {
  if (!fs::exists("/lib64/ld-linux-x86-64.so.2")) GTEST_SKIP() << "no /lib64/ld-linux-x86-64.so.2";
  const fs::path ld = fs::canonical("/lib64/ld-linux-x86-64.so.2");  // as the child's maps name it
  MappingChild a(ld.string());
  ASSERT_TRUE(a.mapped());
  ASSERT_TRUE(a.entry(ld.string()).has_value());
  {
    ProbeManager pm(backend_, options());
    EXPECT_EQ(probe(pm, a.pid(), *a.entry(ld.string())), LibraryKind::Loader);
    EXPECT_EQ(backend_.uprobes, 1);
  }
  RefusingBackend refusing;
  ProbeManager pm(refusing, options());
  EXPECT_EQ(probe(pm, a.pid(), *a.entry(ld.string())), LibraryKind::None);
  EXPECT_EQ(pm.stats().attach_errors["loader"], 1u);
}

INSTANTIATE_TEST_SUITE_P(ParseMode, ProbeLifecycle, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Background" : "Inline"; });

// A backend whose links hold many probes (uprobe_multi): one link per file,
// and one symbol refused. The gauges count probes, not links.
class MultiLinkBackend : public RecordingBackend {
 public:
  AttachedUprobes attach_uprobes(const std::string&, const std::vector<ProbeSpec>& specs) override {
    AttachedUprobes out;
    out.links.push_back(Link(nullptr));
    for (const auto& spec : specs) {
      if (spec.symbol == refused) {
        out.errors.push_back("uprobe on " + spec.symbol + ": refused");
        ++refusals;
      } else {
        ++out.probes;
      }
    }
    planned += static_cast<int>(specs.size());
    return out;
  }
  std::string refused = "ncclAllReduce";
  int planned = 0, refusals = 0;
};

TEST(ProbeManagerLinks, ProbesNotLinksAreCountedAndEachRefusalIsAnError) {
  TempDir dir{"probe-multi"};
  const fs::path lib = dir.path / "libnccl.so.2";
  fs::copy_file(kShim, lib);
  MappingChild a(lib.string());
  ASSERT_TRUE(a.mapped());
  MultiLinkBackend backend;
  ProbeManager pm(backend, {.proc_root = "/proc", .release_grace_seconds = 10, .parse_in_background = false});
  EXPECT_EQ(pm.consider(a.pid(), *a.entry(lib.string())), LibraryKind::Nccl);
  ASSERT_GT(backend.planned, 10);
  ASSERT_GT(backend.refusals, 0);  // its entry (and return) probes
  auto stats = pm.stats();
  EXPECT_EQ(stats.probes["nccl"], static_cast<uint64_t>(backend.planned - backend.refusals));
  EXPECT_EQ(stats.attach_errors["nccl"], static_cast<uint64_t>(backend.refusals));
  a.kill();
  pm.sweep(100, {});
  pm.sweep(111, {});
  stats = pm.stats();
  EXPECT_EQ(stats.probes["nccl"], 0u);
  EXPECT_EQ(stats.files_released, 1u);
}

}  // namespace
}  // namespace argus
