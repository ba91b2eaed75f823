// Launcher mode of argus-sim: starts one process per rank (fork + exec of
// argus-sim itself in worker mode, with a torchrun-style environment), writes
// job.json, forwards SIGINT/SIGTERM, aborts the job when a rank dies, and
// exits 0 iff every rank exited 0.
#pragma once

#include "sim_config.h"

namespace argus::sim {

// Throws UsageError (before any rank is started) for unusable paths.
int launcher_main(SimConfig cfg);

} // namespace argus::sim
