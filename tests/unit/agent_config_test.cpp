// argus-agent's flags bind straight into one AgentConfig: each flag lands in its
// part, an environment variable does as well, the defaults are the fields', and
// a bad value is refused in one line that names the flag.
#include "userspace/agent/config_flags.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

namespace argus {
namespace {

// Parses `args` (after the program name) into a fresh config; the error's text, or "".
std::string parse(const std::vector<std::string>& args, AgentConfig& cfg, bool* list = nullptr) {
  CLI::App app{"test"};
  bool list_capabilities = false;
  bind_agent_flags(app, cfg, list_capabilities);
  std::vector<std::string> argv = {"argus-agent"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (auto& a : argv) raw.push_back(a.data());
  try {
    app.parse(static_cast<int>(raw.size()), raw.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  if (list) *list = list_capabilities;
  return "";
}

TEST(AgentConfig, DefaultsAreTheFields) {
  AgentConfig cfg;
  ASSERT_EQ(parse({}, cfg), "");
  const AgentConfig fresh;
  EXPECT_EQ(cfg.paths.proc_root, std::string(kDefaultProcRoot));
  EXPECT_EQ(cfg.paths.sysfs_root, std::string(kDefaultSysfsRoot));
  EXPECT_EQ(cfg.bpf.btf_path, std::string(kDefaultBtfPath));
  EXPECT_EQ(cfg.http.listen, std::string(kDefaultListen));
  EXPECT_EQ(cfg.discovery.probes, ProbeSet::Default);
  EXPECT_EQ(cfg.detection.window_seconds, kDefaultWindowSeconds);
  EXPECT_EQ(cfg.bpf.ringbuf_kib, kDefaultRingbufKiB);
  EXPECT_EQ(cfg.bpf.span_min_us, fresh.bpf.span_min_us);
  EXPECT_TRUE(cfg.offcpu);
  EXPECT_TRUE(cfg.python.gc_probes);
  EXPECT_EQ(cfg.pods.mode, pods::PodInfoMode::kLogs);
}

TEST(AgentConfig, EveryFlagLandsInItsPart) {
  AgentConfig cfg;
  bool list = false;
  ASSERT_EQ(parse({"--node", "n1", "--proc-root", "/p", "--sysfs-root", "/s", "--btf", "/b", "--kmsg", "off",
                   "--listen", "127.0.0.1:1", "--debug-routes", "--probes", "deep", "--scan-interval", "2",
                   "--probe-release-seconds", "5", "--only-env", "A=b", "--usdt-spec-slots", "64", "--ringbuf-kb", "128",
                   "--span-min-us", "0", "--tp-flavour", "raw_tp", "--uprobe-links", "perf", "--offcpu", "off",
                   "--python-gc-probes", "off", "--python-sample-hz", "0", "--pod-info", "apiserver", "--pod-logs-dir",
                   "/l", "--container-logs-dir", "/c", "--kube-api", "https://k", "--window", "5", "--exit-grace", "7",
                   "--list-capabilities"},
                  cfg, &list),
            "");
  EXPECT_EQ(cfg.node, "n1");
  EXPECT_EQ(cfg.paths.proc_root, "/p");
  EXPECT_EQ(cfg.paths.sysfs_root, "/s");
  EXPECT_EQ(cfg.bpf.btf_path, "/b");
  EXPECT_EQ(cfg.paths.kmsg, "off");
  EXPECT_EQ(cfg.http.listen, "127.0.0.1:1");
  EXPECT_TRUE(cfg.http.debug_routes);
  EXPECT_EQ(cfg.discovery.probes, ProbeSet::Deep);
  EXPECT_EQ(cfg.discovery.scan_interval_seconds, 2);
  EXPECT_EQ(cfg.discovery.probe_release_seconds, 5);
  EXPECT_EQ(cfg.discovery.only_env, "A=b");
  EXPECT_EQ(cfg.bpf.usdt_spec_slots, 64u);
  EXPECT_EQ(cfg.bpf.ringbuf_kib, 128u);
  EXPECT_EQ(cfg.bpf.span_min_us, 0u);
  EXPECT_TRUE(cfg.bpf.force_raw_tp);
  EXPECT_EQ(cfg.bpf.uprobe_links, LoaderOptions::UprobeLinks::kPerf);
  EXPECT_FALSE(cfg.offcpu);
  EXPECT_FALSE(cfg.python.gc_probes);
  EXPECT_EQ(cfg.python.sample_hz, 0u);
  EXPECT_EQ(cfg.pods.mode, pods::PodInfoMode::kApiserver);
  EXPECT_EQ(cfg.pods.logs_dir, "/l");
  EXPECT_EQ(cfg.pods.container_logs_dir, "/c");
  EXPECT_EQ(cfg.pods.api, "https://k");
  EXPECT_EQ(cfg.detection.window_seconds, 5);
  EXPECT_EQ(cfg.detection.exit_grace_seconds, 7);
  EXPECT_TRUE(list);
}

TEST(AgentConfig, EnvironmentVariablesBindLikeFlags) {
  ::setenv("ARGUS_PROBES", "deep", 1);
  ::setenv("ARGUS_OFFCPU", "off", 1);
  ::setenv("ARGUS_WINDOW", "3", 1);
  AgentConfig cfg;
  const std::string err = parse({}, cfg);
  ::unsetenv("ARGUS_PROBES");
  ::unsetenv("ARGUS_OFFCPU");
  ::unsetenv("ARGUS_WINDOW");
  ASSERT_EQ(err, "");
  EXPECT_EQ(cfg.discovery.probes, ProbeSet::Deep);
  EXPECT_FALSE(cfg.offcpu);
  EXPECT_EQ(cfg.detection.window_seconds, 3);
}

TEST(AgentConfig, BadValuesAreRefusedNamingTheFlag) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--probes", "shallow"}, {"--offcpu", "maybe"}, {"--uprobe-links", "both"}, {"--pod-info", "dns"},
           {"--tp-flavour", "kprobe"}, {"--window", "-3"}, {"--ringbuf-kb", "1"}, {"--only-env", "=x"}}) {
    AgentConfig cfg;
    const std::string err = parse({flag, value}, cfg);
    EXPECT_NE(err.find(flag), std::string::npos) << flag << ": " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace argus
