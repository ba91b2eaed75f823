// argus-agent's flags (../shared/CONTRACT.md), each also read from its ARGUS_*
// environment variable, bound straight into an AgentConfig: a flag's default is
// the field's.
#pragma once
#include <CLI/CLI.hpp>

#include "userspace/agent/config.h"

namespace argus {

// `list_capabilities`: --list-capabilities, a command rather than a setting.
void bind_agent_flags(CLI::App& app, AgentConfig& cfg, bool& list_capabilities);

}  // namespace argus
