// Bad input to the agent: each case is one clear line and a non-zero exit.
#include "tests/integration/harness.h"

#include <fstream>

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
TEST(AgentCli, BadScanInterval) {
  expect_one_line_failure({"--scan-interval", "0"}, "scan-interval");
  expect_one_line_failure({"--scan-interval", "soon"}, "scan-interval");
}
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
// HTTP security flags: checked before anything needs root.
TEST(AgentCli, UnreadableTokenFile) {
  expect_one_line_failure({"--auth-token-file", "/nonexistent/token"}, "cannot read --auth-token-file /nonexistent/token");
}
TEST(AgentCli, EmptyTokenFile) {
  const auto dir = make_temp_dir("token");
  { std::ofstream(dir / "token") << "\n"; }
  expect_one_line_failure({"--auth-token-file", (dir / "token").string()}, "is empty");
}
TEST(AgentCli, TlsCertWithoutKey) {
  const auto dir = make_temp_dir("tls");
  { std::ofstream(dir / "cert.pem") << "x\n"; }
  expect_one_line_failure({"--tls-cert", (dir / "cert.pem").string()}, "--tls-cert needs --tls-key");
  expect_one_line_failure({"--tls-key", (dir / "cert.pem").string()}, "--tls-key needs --tls-cert");
}
TEST(AgentCli, BadTlsCert) {
  const auto dir = make_temp_dir("tls");
  { std::ofstream(dir / "cert.pem") << "not a certificate\n"; }
  { std::ofstream(dir / "key.pem") << "not a key\n"; }
  expect_one_line_failure({"--tls-cert", (dir / "cert.pem").string(), "--tls-key", (dir / "key.pem").string()},
                          "is not a usable PEM certificate");
  expect_one_line_failure({"--tls-cert", "/nonexistent/cert.pem", "--tls-key", (dir / "key.pem").string()},
                          "cannot read --tls-cert /nonexistent/cert.pem");
}
TEST(AgentCli, PortAlreadyInUse) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("port");
  Agent first(dir);
  ASSERT_TRUE(first.wait_ready()) << first.log();
  const std::string port = first.url("").substr(std::string("http://127.0.0.1:").size());
  expect_one_line_failure({"--listen", "127.0.0.1:" + port}, port);
}
// The secured agent end to end: HTTPS, a bearer token, debug routes off; argusctl
// with --ca-cert and --token-file, and its one-line errors when one is missing.
TEST(AgentCli, HttpsTokenAndDebugRoutesWithArgusctl) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("secure");
  const std::string cert = (dir / "agent.pem").string(), key = (dir / "agent.key").string();
  auto gen = run_command({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                          "-nodes", "-days", "2", "-subj", "/CN=localhost", "-addext",
                          "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out", cert},
                         dir, 30s);
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  { std::ofstream(dir / "token") << "t0ken-for-tests\n"; }
  const std::string token = (dir / "token").string();
  Agent agent(dir, {"--tls-cert", cert, "--tls-key", key, "--auth-token-file", token});
  const std::string base = "https://" + agent.url("").substr(std::string("http://").size());
  cli::ClientOptions anon;
  anon.ca_cert_file = cert;
  bool ready = false;
  for (int i = 0; i < 300 && !ready && agent.child().running(); ++i) {
    auto r = cli::http_get(base + "/healthz", anon);  // no token needed
    ready = r.ok() && r->status == 200;
    if (!ready) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(ready) << agent.log();
  auto r = cli::http_get(base + "/metrics", anon);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 401);
  cli::ClientOptions authed = anon;
  authed.bearer_token = "t0ken-for-tests";
  r = cli::http_get(base + "/metrics", authed);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("argus_agent_http_rejections_total{reason=\"unauthorized\"} 1"), std::string::npos);

  auto ok = run_command({bin("argusctl"), "ranks", "--agent", base, "--ca-cert", cert, "--token-file", token}, dir, 30s);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  auto no_token = run_command({bin("argusctl"), "ranks", "--agent", base, "--ca-cert", cert}, dir, 30s);
  EXPECT_EQ(no_token.exit_code, 1) << no_token.output;
  EXPECT_EQ(line_count(no_token.output), 1u) << no_token.output;
  EXPECT_NE(no_token.output.find("requires a bearer token"), std::string::npos) << no_token.output;
  auto untrusted = run_command({bin("argusctl"), "ranks", "--agent", base, "--token-file", token}, dir, 30s);
  EXPECT_EQ(untrusted.exit_code, 1) << untrusted.output;
  EXPECT_NE(untrusted.output.find("cannot verify the TLS certificate"), std::string::npos) << untrusted.output;
  auto trace = run_command({bin("argusctl"), "trace", "--agent", base, "--ca-cert", cert, "--token-file", token, "-o",
                            (dir / "t.json").string()},
                           dir, 30s);
  EXPECT_EQ(trace.exit_code, 1) << trace.output;
  EXPECT_EQ(line_count(trace.output), 1u) << trace.output;
  EXPECT_NE(trace.output.find("--debug-routes"), std::string::npos) << trace.output;
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
