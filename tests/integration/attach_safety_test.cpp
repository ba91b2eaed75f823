// The attach path against processes the agent does not control: paths planted
// inside a chroot in a private mount namespace are never opened or probed (each
// refusal counted), and probes, USDT slots and fds of short-lived ranks' own
// library copies go back to their baseline once those ranks are gone.
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

const std::string kBenign = "/lib/x86_64-linux-gnu/libm.so.6";  // exports no NCCL or CUDA name

double metric(const Agent& agent, const std::string& name, const std::map<std::string, std::string>& labels = {}) {
  return metric_value(agent.get_text("/metrics"), name, labels);
}

// Waits until `done` holds (polled every 200 ms), up to `timeout`.
template <typename Pred>
bool eventually(Pred done, std::chrono::milliseconds timeout) {
  for (auto end = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < end;) {
    if (done()) return true;
    std::this_thread::sleep_for(200ms);
  }
  return done();
}

// The agent's open fds by kind: perf events (one per attached uprobe) and the rest
// but sockets (HTTP connections come and go with our own scrapes).
struct FdCount {
  int perf = 0, other = 0;
};
FdCount agent_fds_once(int pid) {
  FdCount c;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(e.path(), ec).string();
    if (target.find("perf_event") != std::string::npos)
      ++c.perf;
    else if (target.rfind("socket:", 0) != 0)
      ++c.other;
  }
  return c;
}

// The least of a few samples: the event loop opens /proc entries for a moment
// while it scans, and a sample may catch one.
FdCount agent_fds(int pid) {
  FdCount low = agent_fds_once(pid);
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(150ms);
    const FdCount c = agent_fds_once(pid);
    low.perf = std::min(low.perf, c.perf);
    low.other = std::min(low.other, c.other);
  }
  return low;
}

// Each process maps a copy of libm at <dir>/case/lib/libnccl.so.2, after a
// chroot into <dir>/case/jail where that same path is something else. The
// agent, which once opened such paths from its own root, attached NCCL probes
// to whatever host file the planted link named.
TEST(AttachSafety, PlantedPathsInAChrootAreRefusedAndCounted) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("planted");
  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();

  struct Case {
    std::string name;
    std::function<void(const fs::path& at)> plant;
    std::string reason;
  };
  const std::string host_nccl = lib("libnccl.so.2");  // a host file that exports NCCL names
  std::vector<Case> cases = {
      {"host_link", [&](const fs::path& at) { fs::create_symlink(host_nccl, at); }, "mapped_path_missing"},
      {"dev_link", [](const fs::path& at) { fs::create_symlink("/dev/zero", at); }, "mapped_path_missing"},
      {"fifo", [](const fs::path& at) { ASSERT_EQ(::mkfifo(at.c_str(), 0600), 0); }, "mapped_not_regular"},
      {"dev_zero", [](const fs::path& at) { ASSERT_EQ(::mknod(at.c_str(), S_IFCHR | 0600, makedev(1, 5)), 0); },
       "mapped_not_regular"},
  };
  std::map<std::string, double> want;
  std::vector<std::unique_ptr<Child>> procs;
  std::vector<fs::path> fifos;
  for (const auto& c : cases) {
    const fs::path mapped = dir / c.name / "lib" / "libnccl.so.2";
    fs::create_directories(mapped.parent_path());
    fs::copy_file(kBenign, mapped);
    const fs::path jail = dir / c.name / "jail";
    const fs::path planted = jail / fs::relative(mapped, "/");
    fs::create_directories(planted.parent_path());
    c.plant(planted);
    if (c.name == "fifo") fifos.push_back(planted);
    want[c.reason] += 1;
    procs.push_back(std::make_unique<Child>(
        std::vector<std::string>{bin("lib_mapper"), "--jail", jail.string(), mapped.string()},
        dir / (c.name + ".log")));
  }
  for (const auto& [reason, n] : want) {
    EXPECT_TRUE(eventually([&] { return metric(agent, "argus_agent_discovery_skips_total", {{"reason", reason}}) >= n; },
                           30s))
        << reason << "\n" << agent.log();
  }
  for (auto& p : procs) EXPECT_TRUE(p->running()) << "lib_mapper failed: see its log";
  // Nothing was probed, and no planted file was opened: a FIFO opened for
  // reading would have a reader now, and a non-blocking writer would find it.
  EXPECT_LE(metric(agent, "argus_agent_probes_attached", {{"library", "nccl"}}), 0) << agent.log();
  EXPECT_EQ(agent.log().find("to nccl library"), std::string::npos) << agent.log();
  for (const auto& f : fifos) {
    const int w = ::open(f.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    EXPECT_EQ(w, -1);
    EXPECT_EQ(errno, ENXIO);
    if (w >= 0) ::close(w);
  }
  EXPECT_NE(agent.log().find("refused a mapped file"), std::string::npos) << agent.log();
}

// Short-lived ranks, each with its own library copies: every copy is probed
// while mapped, and once its rank is gone its probes, perf-event fds and USDT
// slots are given back. Detaching is slow in the kernel (~0.1 s a probe, one at
// a time), so the test keeps the probe count small: a few NCCL copies (30
// probes each), and many copies of a GPU producer (5 USDT sites, 5 slots each)
// under a USDT table of 12 slots, so the later ranks are attached only because
// the earlier ones' slots were reused. bench/churn_soak.sh runs 1,000.
class ChurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_temp_dir("churn");
    agent_ = std::make_unique<Agent>(dir_, std::vector<std::string>{"--probe-release-seconds", "0.5",
                                                                      "--usdt-spec-slots", "12"});
  }
  // Starts `n` ranks mapping fresh copies of `files`; waits until all are
  // probed (probed files of `kind` up by n), ends them, and waits until their
  // files are released and every probe detached.
  void churn(int first, int n, const std::vector<std::string>& files, const std::string& kind) {
    const double files_before = std::max(0.0, metric(*agent_, "argus_agent_probed_files", {{"library", kind}}));
    const double released_before = metric(*agent_, "argus_agent_probe_files_released_total");
    std::vector<std::unique_ptr<Child>> ranks;
    for (int i = first; i < first + n; ++i) {
      const auto d = dir_ / ("rank" + std::to_string(i));
      fs::create_directories(d);
      std::vector<std::string> argv{bin("lib_mapper")};
      for (const auto& f : files) {
        fs::copy_file(f, d / fs::path(f).filename());
        argv.push_back((d / fs::path(f).filename()).string());
      }
      ranks.push_back(std::make_unique<Child>(argv, d / "mapper.log"));
    }
    ASSERT_TRUE(eventually(
        [&] {
          const std::string m = agent_->get_text("/metrics");
          peak_slots_ = std::max(peak_slots_, metric_value(m, "argus_agent_usdt_spec_slots", {{"state", "used"}}));
          peak_probes_ = std::max(peak_probes_, metric_value(m, "argus_agent_probes_attached", {{"library", kind}}));
          return metric_value(m, "argus_agent_probed_files", {{"library", kind}}) >= files_before + n;
        },
        30s))
        << "ranks from " << first << "\n" << agent_->log();
    for (auto& r : ranks) r->terminate();
    ASSERT_TRUE(eventually(
        [&] {
          const std::string m = agent_->get_text("/metrics");
          // Released counts files of every kind (a late one of the previous
          // round too): this round's own files must be gone as well.
          return metric_value(m, "argus_agent_probe_files_released_total", {}) >= released_before + n &&
                 std::max(0.0, metric_value(m, "argus_agent_probed_files", {{"library", kind}})) <= files_before &&
                 metric_value(m, "argus_agent_probes_detaching", {}) == 0;
        },
        60s))
        << "ranks from " << first << "\n" << agent_->log();
  }
  fs::path dir_;
  std::unique_ptr<Agent> agent_;
  double peak_slots_ = 0, peak_probes_ = 0;
};

TEST_F(ChurnTest, ShortLivedRanksGiveProbesFdsAndUsdtSlotsBack) {
  ARGUS_REQUIRE_ROOT();
  ASSERT_TRUE(agent_->wait_ready()) << agent_->log();
  std::this_thread::sleep_for(2s);  // the start-up scan is done
  const int pid = agent_->child().pid();
  const FdCount base = agent_fds(pid);
  const double base_nccl = std::max(0.0, metric(*agent_, "argus_agent_probed_files", {{"library", "nccl"}}));
  const double base_slots = std::max(0.0, metric(*agent_, "argus_agent_usdt_spec_slots", {{"state", "used"}}));

  // Twelve GPU producers, two at a time: 60 slots over time through a 12-slot table.
  for (int i = 0; i < 12; i += 2) churn(i, 2, {bin("gpu_bad_producer")}, "gpu");
  // 5 distinct USDT argument specs per copy, 2 copies at once (other producers on
  // the node, a test's leftover, may hold slots too: the table still never overflows).
  EXPECT_GE(peak_slots_, base_slots + 10);
  EXPECT_LE(peak_slots_, 12);
  EXPECT_LE(metric(*agent_, "argus_agent_probe_attach_errors_total", {{"library", "gpu"}}), 0) << agent_->log();
  EXPECT_EQ(metric(*agent_, "argus_agent_usdt_spec_slots", {{"state", "used"}}), base_slots);
  // Three NCCL copies, one at a time.
  peak_probes_ = 0;
  for (int i = 100; i < 103; ++i) churn(i, 1, {lib("libnccl.so.2")}, "nccl");
  EXPECT_GE(peak_probes_, 28);  // one copy's 11 collectives and 3 inits, entry + return each

  EXPECT_GE(metric(*agent_, "argus_agent_probe_files_released_total"), 15);
  EXPECT_EQ(std::max(0.0, metric(*agent_, "argus_agent_probed_files", {{"library", "nccl"}})), base_nccl);
  EXPECT_EQ(std::max(0.0, metric(*agent_, "argus_agent_probed_files", {{"library", "gpu"}})), 0);
  const FdCount after = agent_fds(pid);
  EXPECT_EQ(after.perf, base.perf);
  EXPECT_EQ(after.other, base.other);
  EXPECT_TRUE(agent_->child().running());
}

}  // namespace
}  // namespace argus::itest
