// What each layer of the agent needs from the kernel's capabilities, checked at
// start so that a missing one is named with the blindness it causes, instead of
// showing up later as a rank that silently is not there.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace argus {

struct CapabilityCheck {
  std::string name;     // "CAP_SYS_PTRACE"
  bool held = false;
  std::string layer;    // what needs it
  std::string without;  // what goes blind without it (one line)
};

struct CapabilityReport {
  std::vector<CapabilityCheck> checks;
  bool can_load_bpf = false;  // CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN
};

// CapEff from the text of /proc/self/status; nullopt when absent or malformed.
std::optional<uint64_t> parse_effective_caps(std::string_view status);

// The report for a set of effective capabilities (a CapEff bit mask).
CapabilityReport check_capabilities(uint64_t effective);

// This process's report (reads /proc/self/status; nothing held when unreadable).
CapabilityReport check_own_capabilities();

}  // namespace argus
