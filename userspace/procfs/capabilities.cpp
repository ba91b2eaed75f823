#include "userspace/procfs/capabilities.h"

#include <fstream>
#include <sstream>

namespace argus {
namespace {

// Bit numbers from linux/capability.h.
constexpr int kDacReadSearch = 2, kSysPtrace = 19, kSysAdmin = 21, kSysResource = 24, kPerfmon = 38, kBpf = 39,
              kCheckpointRestore = 40;

bool has(uint64_t caps, int bit) { return (caps >> bit) & 1u; }

}  // namespace

std::optional<uint64_t> parse_effective_caps(std::string_view status) {
  constexpr std::string_view kKey = "CapEff:";
  for (size_t pos = 0; pos < status.size();) {
    const size_t eol = std::min(status.find('\n', pos), status.size());
    std::string_view line = status.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(kKey)) continue;
    line.remove_prefix(kKey.size());
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.size() > 16) return std::nullopt;
    uint64_t v = 0;
    for (char c : line) {
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) return std::nullopt;
      v = v << 4 | static_cast<uint64_t>(d);
    }
    return v;
  }
  return std::nullopt;
}

CapabilityReport check_capabilities(uint64_t caps) {
  const bool admin = has(caps, kSysAdmin);
  CapabilityReport r;
  r.can_load_bpf = admin || (has(caps, kBpf) && has(caps, kPerfmon));
  r.checks = {
      {"CAP_BPF", has(caps, kBpf) || admin, "BPF",
       "no BPF program can be loaded: the agent cannot run (CAP_SYS_ADMIN stands in on kernels before 5.8)"},
      {"CAP_PERFMON", has(caps, kPerfmon) || admin, "BPF",
       "no uprobe or tracepoint can be attached: the agent cannot run"},
      {"CAP_SYS_PTRACE", has(caps, kSysPtrace), "discovery",
       "the maps, environment and root of processes of other users cannot be read: ranks in containers, or run as "
       "other users, are never found"},
      {"CAP_DAC_READ_SEARCH", has(caps, kDacReadSearch), "libraries",
       "library files and directories the agent's user may not read are skipped (counted as mapped_open_failed)"},
      {"CAP_SYS_RESOURCE", has(caps, kSysResource), "limits",
       "the open-file limit cannot be raised (each probe holds a file descriptor; nodes with many libraries run "
       "out), nor the locked-memory limit that kernels before 5.11 charge BPF maps to"},
      {"CAP_SYS_ADMIN", admin || has(caps, kCheckpointRestore), "map_files",
       "mapped files cannot be opened through /proc/PID/map_files (CAP_CHECKPOINT_RESTORE also serves): libraries "
       "replaced on disk while mapped (upgrades) are not probed, and a mapped file is checked by its path alone"},
  };
  return r;
}

CapabilityReport check_own_capabilities() {
  std::ifstream in("/proc/self/status");
  std::stringstream ss;
  ss << in.rdbuf();
  return check_capabilities(parse_effective_caps(ss.str()).value_or(0));
}

}  // namespace argus
