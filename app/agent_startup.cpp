#include "app/agent_startup.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "userspace/procfs/procfs.h"

namespace argus {
namespace {

std::atomic<bool> g_stop{false};
int g_stop_fd = -1;  // an eventfd the main thread blocks on until a signal writes it
void on_signal(int) {
  g_stop = true;
  if (g_stop_fd >= 0) {
    const uint64_t one = 1;
    (void)!write(g_stop_fd, &one, sizeof(one));  // async-signal-safe
  }
}

// The bearer token of --auth-token-file: the file's text less trailing whitespace.
// Unreadable, empty or multi-line: one line saying so.
Result<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read --auth-token-file " + path + ": " + std::strerror(errno));
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return make_error("cannot read --auth-token-file " + path + ": " + std::strerror(errno));
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) return make_error("--auth-token-file " + path + " is empty");
  for (char c : token) {
    if (static_cast<unsigned char>(c) < 0x21 || c == 0x7f)
      return make_error("--auth-token-file " + path + " must hold one token without spaces or control characters");
  }
  return token;
}

bool is_dir(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A procfs has /self or at least one numeric entry with a stat file.
std::string check_proc_root(const std::string& root) {
  if (!is_dir(root)) return "--proc-root " + root + " is not a directory";
  for (int pid : procfs::list_pids(root)) {
    if (procfs::read_stat(root, pid).ok()) return "";
  }
  return "--proc-root " + root + " holds no readable process entries (is it a procfs?)";
}

Result<HttpServerOptions> http_options(const AgentConfig::Http& http) {
  HttpServerOptions o;
  if (!http.auth_token_file.empty()) {
    auto token = read_token_file(http.auth_token_file);
    if (!token.ok()) return make_error(token.error());
    o.auth_token = *token;
  }
  if (!http.tls_cert.empty() || !http.tls_key.empty()) {
    if (auto tls = check_tls_files(http.tls_cert, http.tls_key); !tls.ok()) return make_error(tls.error());
    o.tls_cert_file = http.tls_cert;
    o.tls_key_file = http.tls_key;
  }
  return o;
}

}  // namespace

Result<StartupChecks> check_startup(const AgentConfig& cfg) {
  StartupChecks out;
  auto http = http_options(cfg.http);
  if (!http.ok()) return make_error(http.error());
  out.http = std::move(*http);
  if (auto why = check_proc_root(cfg.paths.proc_root); !why.empty()) return make_error(why);
  if (!is_dir(cfg.paths.sysfs_root)) return make_error("--sysfs-root " + cfg.paths.sysfs_root + " is not a directory");
  if (access(cfg.bpf.btf_path.c_str(), R_OK) != 0)
    return make_error("no kernel BTF at " + cfg.bpf.btf_path + " (" + std::strerror(errno) +
                      "): the agent needs a kernel built with CONFIG_DEBUG_INFO_BTF");
  out.caps = check_own_capabilities();
  if (!out.caps.can_load_bpf) return make_error("needs root (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN) to load eBPF programs");
  if (auto listen = parse_listen_address(cfg.http.listen); !listen.ok()) return make_error(listen.error());
  return out;
}

void raise_open_file_limit(bool sys_resource) {
  constexpr rlim_t kWanted = 1 << 16;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  rlimit want = lim;
  if (sys_resource && lim.rlim_max != RLIM_INFINITY && lim.rlim_max < kWanted) want.rlim_max = kWanted;
  want.rlim_cur = want.rlim_max;
  if (want.rlim_cur != lim.rlim_cur && setrlimit(RLIMIT_NOFILE, &want) != 0)
    spdlog::warn("cannot raise the open-file limit from {}: {}", lim.rlim_cur, std::strerror(errno));
}

void report_missing_capabilities(const CapabilityReport& caps) {
  for (const auto& c : caps.checks)
    if (!c.held) spdlog::warn("running without {} ({}): {}", c.name, c.layer, c.without);
}

void report_cgroup_namespace(const procfs::CgroupNamespaceJoin& j) {
  using Outcome = procfs::CgroupNamespaceJoin::Outcome;
  switch (j.outcome) {
    case Outcome::kJoined: return spdlog::info("cgroup namespace: {}", j.detail);
    case Outcome::kAlreadyThere: return spdlog::debug("cgroup namespace: {}", j.detail);
    case Outcome::kUnknown: return spdlog::debug("cgroup namespace: not checked: {}", j.detail);
    case Outcome::kFailed:
      return spdlog::warn("cgroup namespace: {}; other pods' cgroups read relative to the agent's own: pods are "
                          "named, but their cgroup CPU throttling and memory (OOM) figures are not read",
                          j.detail);
  }
}

void install_stop_handlers() {
  g_stop_fd = eventfd(0, EFD_CLOEXEC);
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);  // OpenSSL writes to sockets without MSG_NOSIGNAL
}

// Blocks on an eventfd a signal writes: no periodic wakeups (a 100 ms poll without one).
void wait_for_stop_signal() {
  while (!g_stop) {
    uint64_t n = 0;
    if (g_stop_fd < 0 || (read(g_stop_fd, &n, sizeof(n)) < 0 && errno != EINTR))
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace argus
