#include "userspace/registry/exit_cause.h"

#include <cstring>

namespace argus {
namespace {

constexpr int kSigKill = 9;

}  // namespace

ExitCause exit_cause_of(int exit_code, const argus_exit_info* info, bool oom_kill_rose) {
  ExitCause c;
  c.signal = exit_code & 0x7f;
  const bool signalled = info && (info->flags & ARGUS_EXIT_F_SIGNAL);
  if (c.signal != 0 && signalled && info->signal == c.signal) {
    if (info->flags & ARGUS_EXIT_F_KERNEL) {
      c.sender_pid = 0;
      c.sender_comm = "kernel";
    } else {
      c.sender_pid = static_cast<int>(info->sender_tgid);
      c.sender_comm.assign(info->sender_comm, strnlen(info->sender_comm, sizeof(info->sender_comm)));
    }
  }
  const bool victim = info && (info->flags & ARGUS_EXIT_F_OOM);
  c.oom = victim || (c.signal == kSigKill && c.sender_pid <= 0 && oom_kill_rose);
  return c;
}

ExitReason exit_reason_of(int exit_code, const ExitCause& cause) {
  if (cause.oom) return ExitReason::kOom;
  // Out of GPU memory, then gone with an error or a signal: a framework
  // raises, the rank exits non-zero or aborts. A rank that went on and ended
  // well survived it.
  const bool failed = (exit_code & 0x7f) != 0 || ((exit_code >> 8) & 0xff) != 0;
  if (cause.gpu_oom.is_object() && failed) return ExitReason::kOom;
  return (exit_code & 0x7f) != 0 ? ExitReason::kSignal : ExitReason::kExit;
}

nlohmann::json oom_details(const procfs::MemcgState& m, const std::string& source) {
  nlohmann::json j = {{"source", source}, {"cgroup", m.path}, {"cgroup_dir", m.dir}, {"cgroup_version", m.version}};
  auto put = [&](const char* key, const std::optional<uint64_t>& v) {
    if (v) j[key] = *v;
  };
  put("limit_bytes", m.limit_bytes);
  put("usage_bytes", m.usage_bytes);
  put("peak_bytes", m.peak_bytes);
  put("oom_events", m.oom_events);
  put("oom_kills", m.oom_kills);
  return j;
}

}  // namespace argus
