// Why a rank process ended, from what the kernel said (its exit code, the fatal
// signal and its sender, the OOM killer's choice) and its memory cgroup's figures.
// Decided once, here, when the registry takes a rank's exit.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "bpf/argus_exit.h"
#include "userspace/model/snapshot.h"
#include "userspace/model/vocab.h"
#include "userspace/procfs/memcg.h"

namespace argus {

// The cause from the kernel: exit_code as task->exit_code ((status << 8) |
// signal), what signal_generate and mark_victim remembered (null: nothing), and
// whether the memory cgroup's oom_kill count rose while the rank lived (the
// OOM killer's trace when mark_victim is blind). The sender is kept only when
// it sent the signal the process died of. Killed by the kernel's SIGKILL with
// oom_kill risen, or chosen by mark_victim: OOM.
ExitCause exit_cause_of(int exit_code, const argus_exit_info* info, bool oom_kill_rose);
// How it ended: OOM wins over the signal that carried it out.
ExitReason exit_reason_of(int exit_code, const ExitCause& cause);

// evidence.oom of an OOM kill: the memory cgroup and its figures where known.
nlohmann::json oom_details(const procfs::MemcgState& m, const std::string& source);

}  // namespace argus
