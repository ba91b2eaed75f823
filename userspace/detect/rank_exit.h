// Why a rank died, in words and as evidence: the fatal signal and its sender,
// the OOM killer (with the memory cgroup's figures), or its exit code.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "bpf/argus_exit.h"
#include "userspace/model/event.h"
#include "userspace/model/snapshot.h"
#include "userspace/procfs/memcg.h"

namespace argus {

// "SIGKILL", "SIGRTMIN+3"; "signal N" for numbers no signal has.
std::string signal_name(int sig);
// "64 MiB", "1.5 GiB", "512 B".
std::string format_bytes(uint64_t bytes);

// The cause from the kernel: exit_code as task->exit_code ((status << 8) |
// signal), what signal_generate and mark_victim remembered (null: nothing), and
// whether the memory cgroup's oom_kill count rose while the rank lived (the
// OOM killer's trace when mark_victim is blind). The sender is kept only when
// it sent the signal the process died of. Killed by the kernel's SIGKILL with
// oom_kill risen, or chosen by mark_victim: OOM.
ExitCause exit_cause_of(int exit_code, const argus_exit_info* info, bool oom_kill_rose);
// "exit", "signal" or "oom" (OOM wins over the signal that carried it out).
std::string exit_reason_of(int exit_code, const ExitCause& cause);

// evidence.oom of an OOM kill: the memory cgroup and its figures where known.
nlohmann::json oom_details(const procfs::MemcgState& m, const std::string& source);

// How the rank ended, as a phrase: "killed by SIGKILL from pid 900 (`kill`)",
// "killed by the OOM killer: memory cgroup /x at its 64 MiB limit",
// "exited with code 3", "ended (exit code not seen)".
std::string exit_phrase(const RankSnapshot& r);
// The cause as evidence: {reason, code, signal, signal_name, sender {pid, comm},
// oom {...}, last_python_stack}; null members where not known.
nlohmann::json exit_evidence(const RankSnapshot& r);
// The rank_exit event of an identified rank that ended.
DetectedEvent rank_exit_event(const RankSnapshot& r, double now_unix);

}  // namespace argus
