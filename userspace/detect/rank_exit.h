// Why a rank died, in words and as evidence: the fatal signal and its sender,
// the OOM killer (with the memory cgroup's figures), or its exit code.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "userspace/model/event.h"
#include "userspace/model/snapshot.h"

namespace argus {

// "SIGKILL", "SIGRTMIN+3"; "signal N" for numbers no signal has.
std::string signal_name(int sig);
// "64 MiB", "1.5 GiB", "512 B".
std::string format_bytes(uint64_t bytes);

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
