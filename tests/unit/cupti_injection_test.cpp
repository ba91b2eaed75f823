// libargus-cupti.so as CUDA loads it, in child processes (build/bin/cupti_inject_smoke
// dlopens it and calls InitializeInjection): whatever CUPTI does here (no GPU,
// no driver), the host process keeps running and exits 0, with at most one
// "argus-cupti:" line on stderr. Plus the ELF contract: exports and USDT notes.
#ifdef ARGUS_HAVE_CUPTI

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

const std::string kLib = std::string(ARGUS_BUILD_DIR) + "/lib/libargus-cupti.so";
const std::string kSmoke = std::string(ARGUS_BUILD_DIR) + "/bin/cupti_inject_smoke";

struct Child {
  int status = -1;
  bool timed_out = false;
  std::string out, err;
  std::map<std::string, std::string> kv;
  std::vector<std::string> argus_lines;
  bool exited_zero() const { return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Child run_smoke(const std::vector<std::string>& env_set, const std::vector<std::string>& args) {
  Child c;
  char out_tmpl[] = "/tmp/argus-cupti-out-XXXXXX";
  char err_tmpl[] = "/tmp/argus-cupti-err-XXXXXX";
  int out_fd = mkstemp(out_tmpl), err_fd = mkstemp(err_tmpl);
  if (out_fd < 0 || err_fd < 0) return c;
  std::vector<std::string> argv_s = {kSmoke, kLib};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  // A clean environment: only what the case sets (plus PATH/LD_LIBRARY_PATH).
  std::vector<std::string> env_s = env_set;
  for (const char* keep : {"PATH", "LD_LIBRARY_PATH"})
    if (const char* v = getenv(keep)) env_s.push_back(std::string(keep) + "=" + v);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    std::vector<char*> av, ev;
    for (auto& s : argv_s) av.push_back(s.data());
    av.push_back(nullptr);
    for (auto& s : env_s) ev.push_back(s.data());
    ev.push_back(nullptr);
    execve(av[0], av.data(), ev.data());
    _exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    pid_t r = waitpid(pid, &c.status, WNOHANG);
    if (r == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &c.status, 0);
      c.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  close(out_fd);
  close(err_fd);
  c.out = slurp(out_tmpl);
  c.err = slurp(err_tmpl);
  unlink(out_tmpl);
  unlink(err_tmpl);
  std::istringstream o(c.out);
  for (std::string line; std::getline(o, line);)
    if (auto eq = line.find('='); eq != std::string::npos) c.kv[line.substr(0, eq)] = line.substr(eq + 1);
  std::istringstream e(c.err);
  for (std::string line; std::getline(e, line);)
    if (line.rfind("argus-cupti:", 0) == 0) c.argus_lines.push_back(line);
  return c;
}

std::string capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

std::string real_cupti() {
  for (const char* sub : {"/lib64/libcupti.so.13", "/lib/libcupti.so.13"}) {
    std::string p = std::string(ARGUS_CUDA_ROOT) + sub;
    if (access(p.c_str(), R_OK) == 0) return p;
  }
  return {};
}

bool built() { return access(kLib.c_str(), R_OK) == 0 && access(kSmoke.c_str(), X_OK) == 0; }

}  // namespace

TEST(CuptiInjection, MissingLibcuptiDisablesWithOneLine) {
  if (!built()) GTEST_SKIP() << "libargus-cupti.so not built";
  auto c = run_smoke({"ARGUS_CUPTI_LIB=/nonexistent/libcupti.so.13"}, {"--work-ms", "200"});
  ASSERT_TRUE(c.exited_zero()) << c.err;
  EXPECT_EQ(c.kv["init_rc"], "1");
  EXPECT_EQ(c.kv["disabled"], "1");
  EXPECT_EQ(c.kv["active"], "0");
  ASSERT_EQ(c.argus_lines.size(), 1u) << c.err;
  EXPECT_NE(c.argus_lines[0].find("disabled"), std::string::npos);
  EXPECT_NE(c.argus_lines[0].find("cannot load libcupti"), std::string::npos) << c.argus_lines[0];
  EXPECT_NE(c.argus_lines[0].find("/nonexistent"), std::string::npos);
}

TEST(CuptiInjection, RealLibcuptiWithoutDriverDisablesOrRuns) {
  if (!built()) GTEST_SKIP() << "libargus-cupti.so not built";
  std::string lib = real_cupti();
  if (lib.empty()) GTEST_SKIP() << "no libcupti.so.13 in " << ARGUS_CUDA_ROOT;
  auto c = run_smoke({"ARGUS_CUPTI_LIB=" + lib}, {"--work-ms", "700", "--process", "300"});
  ASSERT_TRUE(c.exited_zero()) << c.err;
  EXPECT_EQ(c.kv["init_rc"], "1");
  ASSERT_LE(c.argus_lines.size(), 1u) << c.err;
  if (c.argus_lines.empty()) {
    // A machine with a GPU and driver: CUPTI took it; collection is on.
    EXPECT_EQ(c.kv["active"], "1");
  } else {
    // Here: no driver. CUPTI loads but refuses to enable; the line says so.
    EXPECT_EQ(c.kv["disabled"], "1");
    EXPECT_NE(c.argus_lines[0].find("disabled"), std::string::npos);
    EXPECT_NE(c.argus_lines[0].find("CUPTI_ERROR"), std::string::npos) << c.argus_lines[0];
  }
  // The hook path works either way.
  EXPECT_EQ(c.kv["converted"], "300");
}

TEST(CuptiInjection, DisabledByEnvironment) {
  if (!built()) GTEST_SKIP() << "libargus-cupti.so not built";
  auto c = run_smoke({"ARGUS_CUPTI_DISABLE=1"}, {"--work-ms", "100"});
  ASSERT_TRUE(c.exited_zero()) << c.err;
  EXPECT_EQ(c.kv["disabled"], "1");
  ASSERT_EQ(c.argus_lines.size(), 1u) << c.err;
  EXPECT_NE(c.argus_lines[0].find("disabled"), std::string::npos);
  EXPECT_NE(c.argus_lines[0].find("ARGUS_CUPTI_DISABLE"), std::string::npos);
}

TEST(CuptiInjection, ProcessBufferHookFiresBatches) {
  if (!built()) GTEST_SKIP() << "libargus-cupti.so not built";
  // Without InitializeInjection at all: the hook alone, 1000 records of 7 names,
  // every kernel sent (folding off). No agent listens here: nothing is fired,
  // every record is counted as unheard (for the next agent; the integration test
  // GpuLayer.CuptiInjectionLibraryBatchesReachTheAgent has one listening).
  auto c = run_smoke({"ARGUS_CUPTI_FOLD=0"}, {"--no-init", "--process", "1000", "--names", "7", "--work-ms", "10"});
  ASSERT_TRUE(c.exited_zero()) << c.err;
  EXPECT_TRUE(c.argus_lines.empty()) << c.err;
  EXPECT_EQ(c.kv["converted"], "1000");
  EXPECT_EQ(c.kv["listening"], "0");
  EXPECT_EQ(c.kv["unheard"], "1000");  // in 4 batches: 256 + 256 + 256 + 232
  EXPECT_EQ(c.kv["records"], "0");
  EXPECT_EQ(c.kv["batches"], "0");
  EXPECT_EQ(c.kv["names"], "0");
  EXPECT_EQ(c.kv["wire_version"], "2");
  EXPECT_EQ(c.kv["disabled"], "0");
}

// By default compute kernels are folded: the smoke's 1000 kernels (1 µs apart, 7
// names, one duration) become one span and its 7 sketch entries, two a record.
TEST(CuptiInjection, FoldsComputeKernelsByDefault) {
  if (!built()) GTEST_SKIP() << "libargus-cupti.so not built";
  auto c = run_smoke({}, {"--no-init", "--process", "1000", "--names", "7", "--work-ms", "10"});
  ASSERT_TRUE(c.exited_zero()) << c.err;
  EXPECT_TRUE(c.argus_lines.empty()) << c.err;
  EXPECT_EQ(c.kv["converted"], "1000");
  EXPECT_EQ(c.kv["folding"], "1");
  EXPECT_EQ(c.kv["kernels"], "1000");
  EXPECT_EQ(c.kv["folded"], "1000");
  EXPECT_EQ(c.kv["spans"], "1");
  EXPECT_EQ(c.kv["unheard"], "5");  // 1 + 4; no agent here: counted for the next one
  EXPECT_EQ(c.kv["records"], "0");
}

TEST(CuptiInjection, ExportsOnlyTheContract) {
  if (!built()) GTEST_SKIP() << "libargus-cupti.so not built";
  std::string nm = capture("nm -D --defined-only '" + kLib + "' 2>/dev/null");
  if (nm.empty()) GTEST_SKIP() << "nm not available";
  std::istringstream in(nm);
  std::vector<std::string> syms;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::string addr, type, name;
    ls >> addr >> type >> name;
    if (!name.empty()) syms.push_back(name);
  }
  auto has = [&](const std::string& s) { return std::find(syms.begin(), syms.end(), s) != syms.end(); };
  EXPECT_TRUE(has("InitializeInjection")) << nm;
  EXPECT_TRUE(has("argus_gpu_wire_version")) << nm;
  EXPECT_TRUE(has("argus_cupti_process_buffer")) << nm;
  EXPECT_TRUE(has("argus_cupti_stats")) << nm;
  for (const auto& s : syms)
    EXPECT_TRUE(s == "InitializeInjection" || s == "argus_gpu_wire_version" || s.rfind("argus_cupti_", 0) == 0)
        << "unexpected export " << s;
  // Compiled against the headers only: libcupti is not a DT_NEEDED.
  std::string dyn = capture("readelf -d '" + kLib + "' 2>/dev/null");
  EXPECT_EQ(dyn.find("libcupti"), std::string::npos) << dyn;
}

TEST(CuptiInjection, HasArgusUsdtNotes) {
  if (!built()) GTEST_SKIP() << "libargus-cupti.so not built";
  std::string notes = capture("readelf -n '" + kLib + "' 2>/dev/null");
  if (notes.empty()) GTEST_SKIP() << "readelf not available";
  auto probe = [&](const std::string& name) {
    auto p = notes.find("Name: " + name);
    if (p == std::string::npos) return std::string();
    auto prov = notes.rfind("Provider: ", p);
    return prov == std::string::npos ? std::string() : notes.substr(prov, p - prov);
  };
  EXPECT_NE(probe("gpu_batch").find("Provider: argus"), std::string::npos) << notes;
  EXPECT_NE(probe("gpu_name").find("Provider: argus"), std::string::npos) << notes;
  // gpu_batch(recs, n, dropped): pointer, 32-bit count, 64-bit count; with a
  // semaphore, so the library knows whether an agent listens.
  auto b = notes.find("Name: gpu_batch");
  ASSERT_NE(b, std::string::npos);
  std::string block = notes.substr(b, 200);
  EXPECT_NE(block.find("Semaphore: 0x"), std::string::npos) << block;
  EXPECT_EQ(block.find("Semaphore: 0x0000000000000000"), std::string::npos) << block;
  auto args = block.find("Arguments: ");
  ASSERT_NE(args, std::string::npos);
  std::istringstream as(block.substr(args + 11));
  std::string a1, a2, a3;
  as >> a1 >> a2 >> a3;
  EXPECT_EQ(a1.rfind("8@", 0), 0u) << block;
  EXPECT_EQ(a2.rfind("4@", 0), 0u) << block;
  EXPECT_EQ(a3.rfind("8@", 0), 0u) << block;
}

#endif  // ARGUS_HAVE_CUPTI
