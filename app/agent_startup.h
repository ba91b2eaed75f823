// What argus-agent checks and sets up before it starts anything: the cheap
// checks first, each failing with one line the operator acts on (a bad flag, an
// unusable root, missing privileges), then the process-wide settings.
#pragma once
#include <string>

#include "exporters/http_server.h"
#include "userspace/agent/config.h"
#include "userspace/common/result.h"
#include "userspace/procfs/capabilities.h"
#include "userspace/procfs/cgroup.h"

namespace argus {

struct StartupChecks {
  HttpServerOptions http;     // the token and TLS files, read and checked
  CapabilityReport caps;      // held now (one line later per missing one)
};

// The HTTP security files, the roots, the BTF, the privileges to load BPF and
// the listen address; the first that fails is the error.
Result<StartupChecks> check_startup(const AgentConfig& cfg);

// Each probe holds a file descriptor: the whole open-file allowance is taken,
// and more where CAP_SYS_RESOURCE allows it.
void raise_open_file_limit(bool sys_resource);

// Once the agent runs: one line per capability it runs without, naming what
// goes blind, and where it reads other processes' cgroups from.
void report_missing_capabilities(const CapabilityReport& caps);
void report_cgroup_namespace(const procfs::CgroupNamespaceJoin& j);

// SIGINT and SIGTERM end wait_for_stop_signal(); SIGPIPE is ignored. Before
// any thread starts.
void install_stop_handlers();
void wait_for_stop_signal();

}  // namespace argus
