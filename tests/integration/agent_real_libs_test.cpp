// The real NCCL and the CUDA driver stub from the toolkit, loaded by a process
// the way PyTorch loads them (dlopen, pip-style paths): the agent recognises
// them by their symbols and attaches to the real symbol tables.
#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

const std::string kRealNccl = std::string(ARGUS_CUDA_ROOT) + "/lib/libnccl.so.2";
const std::string kCudaStub = std::string(ARGUS_CUDA_ROOT) + "/lib64/stubs/libcuda.so";

double sample(const std::string& metrics, const std::string& line_prefix) {
  const auto pos = metrics.find(line_prefix);
  if (pos == std::string::npos) return -1;
  const auto eol = metrics.find('\n', pos);
  const std::string line = metrics.substr(pos, eol - pos);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

// A python process that dlopens the libraries and waits: nothing is called.
std::vector<std::string> loader_process(const std::vector<std::string>& libs) {
  std::string code = "import ctypes, sys, time\n";
  for (const auto& l : libs) code += "ctypes.CDLL('" + l + "')\n";
  code += "print('loaded', flush=True)\ntime.sleep(120)\n";
  return {"python3", "-c", code};
}

TEST(AgentRealLibs, AttachesToRealNcclAndCudaStubInPipLayout) {
  ARGUS_REQUIRE_ROOT();
  if (!fs::exists(kRealNccl) || !fs::exists(kCudaStub)) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true")
      FAIL() << "CI=true but the CUDA toolkit is missing at " << ARGUS_CUDA_ROOT;
    GTEST_SKIP() << "CUDA toolkit not installed";
  }
  const auto dir = make_temp_dir("reallibs");
  // nvidia-nccl-cu12's wheel layout: site-packages/nvidia/nccl/lib/libnccl.so.2.
  const auto site = dir / "lib" / "python3.11" / "site-packages" / "nvidia" / "nccl" / "lib";
  fs::create_directories(site);
  fs::copy_file(kRealNccl, site / "libnccl.so.2");

  Agent agent(dir);
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  Child direct(loader_process({kRealNccl, kCudaStub}), dir / "direct.log");
  Child pip(loader_process({(site / "libnccl.so.2").string()}), dir / "pip.log");

  // Two distinct NCCL files (toolkit and wheel copy), each with 11 collective
  // and p2p functions (entry + return), 4 inits (ncclCommInitRank, ...Config,
  // ...Scalable, ncclCommInitAll) and 2 children (ncclCommSplit,
  // ncclCommShrink), entry + return, ncclGroupStart (entry) and ncclGroupEnd
  // (entry + return): 37 probes each, weak/strong aliases probed once.
  double nccl = -1, cuda = -1, errors = -1;
  json doc;
  for (int i = 0; i < 150; ++i) {
    const std::string m = agent.get_text("/metrics");
    nccl = sample(m, "argus_agent_probes_attached{library=\"nccl\"}");
    cuda = sample(m, "argus_agent_probes_attached{library=\"cuda\"}");
    errors = sample(m, "argus_agent_probe_attach_errors_total{library=\"nccl\"}");
    auto d = agent.get_json("/api/v1/ranks");
    if (d) doc = *d;
    if (nccl >= 74 && cuda > 0 && !agent_rank_by_pid(doc, pip.pid()).is_null() &&
        !agent_rank_by_pid(doc, direct.pid()).is_null())
      break;
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_GE(nccl, 74) << agent.log();  // other processes on the machine may map other NCCL files
  // Each of the two files: exactly 37 probes, none failed.
  const std::string log = agent.log();
  // The maps name a library by its resolved path (/usr/local/cuda is a symlink).
  for (const auto& path : {fs::canonical(kRealNccl).string(), fs::canonical(site / "libnccl.so.2").string()})
  {
    // One uprobe_multi link per program and direction where the kernel has them (6.6+):
    // collective entries, their returns, init entries and returns, child
    // entries and returns, group starts, group ends and their returns.
    const std::string links = kernel_at_least(6, 6) ? " (9 multi links)" : " (37 perf links)";
    EXPECT_NE(log.find("attached 37 probes (0 failed) to nccl library " + path + links), std::string::npos)
        << path << "\n" << log;
  }
  // The stub: 5 synchronize entry points x 2, and the checked allocation/init calls.
  EXPECT_GT(cuda, 10) << agent.log();
  EXPECT_EQ(errors, 0) << agent.log();
  ASSERT_FALSE(agent_rank_by_pid(doc, direct.pid()).is_null()) << doc.dump();
  auto pip_rank = agent_rank_by_pid(doc, pip.pid());
  ASSERT_FALSE(pip_rank.is_null()) << doc.dump();
  EXPECT_NE(pip_rank.dump().find("site-packages/nvidia/nccl/lib/libnccl.so.2"), std::string::npos) << pip_rank.dump();
  // Loading is not calling: no collective was counted.
  EXPECT_TRUE(pip_rank.value("nccl", json::object()).empty()) << pip_rank.dump();
}

// NCCL dlopened 5 s after exec (as `import torch` does, long after the exec
// follow-ups end), with /proc scans every 600 s: only the loader's hint (the
// probe on ld.so's _dl_debug_state, which dlopen calls) can make the agent look
// at the process again, and it does: the fresh copy is probed and the process
// is a rank. The loader itself gets exactly one probe.
TEST(AgentRealLibs, ALibraryDlopenedLongAfterExecIsFoundFromTheLoadersHint) {
  ARGUS_REQUIRE_ROOT();
  if (!fs::exists(kRealNccl)) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true")
      FAIL() << "CI=true but the CUDA toolkit is missing at " << ARGUS_CUDA_ROOT;
    GTEST_SKIP() << "CUDA toolkit not installed";
  }
  const auto dir = make_temp_dir("dlopenhint");
  const fs::path copy = dir / "libnccl-late.so.2";  // an inode no process has mapped yet
  fs::copy_file(kRealNccl, copy);
  Agent agent(dir, {"--scan-interval", "600"});
  ASSERT_TRUE(agent.wait_ready()) << agent.log();
  const std::string ld = fs::canonical("/lib64/ld-linux-x86-64.so.2").string();
  ASSERT_TRUE(eventually([&] { return agent.log().find("to loader library " + ld) != std::string::npos; }, 20s))
      << agent.log();
  EXPECT_NE(agent.log().find("attached 1 probes (0 failed) to loader library " + ld), std::string::npos) << agent.log();

  const std::string code = "import ctypes, sys, time\ntime.sleep(5)\nctypes.CDLL('" + copy.string() +
                           "')\nprint('loaded', flush=True)\ntime.sleep(120)\n";
  Child late({"python3", "-c", code}, dir / "late.log");
  ASSERT_TRUE(eventually([&] { return read_text(dir / "late.log").find("loaded") != std::string::npos; }, 30s))
      << read_text(dir / "late.log");
  json doc;
  EXPECT_TRUE(eventually(
      [&] {
        auto d = agent.get_json("/api/v1/ranks");
        if (d) doc = *d;
        return !agent_rank_by_pid(doc, late.pid()).is_null();
      },
      20s))
      << doc.dump() << "\n" << agent.log();
  EXPECT_NE(agent.log().find("to nccl library " + fs::canonical(copy).string()), std::string::npos) << agent.log();
  const std::string m = agent.get_text("/metrics");
  EXPECT_GE(metric_value(m, "argus_agent_probes_attached", {{"library", "loader"}}), 1) << m;
  // The copy's blind window (first sight to probes live) was observed.
  EXPECT_GE(metric_value(m, "argus_agent_probe_attach_delay_seconds_count", {{"library", "nccl"}}), 1) << m;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace argus::itest
