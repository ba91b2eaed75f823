// Bad input to the agent: each case is one clear line and a non-zero exit.
#include "tests/integration/harness.h"

namespace argus::itest {
namespace {

size_t line_count(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n + (!s.empty() && s.back() != '\n' ? 1 : 0);
}

void expect_one_line_failure(const std::vector<std::string>& args, const std::string& must_mention) {
  const auto dir = make_temp_dir("cli");
  std::vector<std::string> argv = {bin("argus-agent")};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_command(argv, dir, 30s);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, -1) << "did not exit: " << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find(must_mention), std::string::npos) << r.output;
}

TEST(AgentCli, UnknownFlag) { expect_one_line_failure({"--bogus"}, "bogus"); }
TEST(AgentCli, BadProbeSet) { expect_one_line_failure({"--probes", "shallow"}, "probes"); }
TEST(AgentCli, BadWindow) { expect_one_line_failure({"--window", "-3"}, "window"); }
TEST(AgentCli, BadListenAddress) {
  ARGUS_REQUIRE_ROOT();  // the listen address is checked after the privilege check passes
  expect_one_line_failure({"--listen", "nonsense"}, "nonsense");
}
TEST(AgentCli, MissingProcRoot) { expect_one_line_failure({"--proc-root", "/nonexistent/proc"}, "--proc-root"); }
TEST(AgentCli, ProcRootThatIsNotProcfs) {
  const auto dir = make_temp_dir("notproc");
  fs::create_directories(dir / "123");  // numeric, but no stat file inside
  expect_one_line_failure({"--proc-root", dir.string()}, "--proc-root");
}
TEST(AgentCli, MissingSysfsRoot) { expect_one_line_failure({"--sysfs-root", "/nonexistent/sys"}, "--sysfs-root"); }
TEST(AgentCli, NoBtf) { expect_one_line_failure({"--btf", "/nonexistent/vmlinux"}, "BTF"); }
TEST(AgentCli, PortAlreadyInUse) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("port");
  Agent first(dir);
  ASSERT_TRUE(first.wait_ready()) << first.log();
  const std::string port = first.url("").substr(std::string("http://127.0.0.1:").size());
  expect_one_line_failure({"--listen", "127.0.0.1:" + port}, port);
}
TEST(AgentCli, NotRoot) {
  ARGUS_REQUIRE_ROOT();  // needs root to become another user
  const auto dir = make_temp_dir("nonroot");
  auto r = run_command({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                        bin("argus-agent"), "--listen", "127.0.0.1:0"},
                       dir, 30s);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(line_count(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("needs root"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace argus::itest
