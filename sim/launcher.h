// Launcher mode of argus-sim: starts one process per rank (fork + exec of
// argus-sim itself in worker mode, with a torchrun-style environment), writes
// job.json, forwards SIGINT/SIGTERM, aborts the job when a rank dies, and
// exits 0 iff every rank exited 0.
//
// Injected faults are not deaths: a --exit rank's status 1 is expected (and
// counts as success), and neither it nor a --hang aborts the communicator. The
// peers then block in their collective, as with NCCL, so such a job ends only by
// SIGINT/SIGTERM (exit 0 when every rank then stops cleanly) or, with
// --hang-timeout S, S seconds after the first hang/exit fired (exit 124). Any
// other death of a rank still aborts the job (exit 1).
//
// --ib-fixture DIR lays out an InfiniBand/RoCE sysfs tree (sim/ib_fixture.h) before the
// ranks start and a thread evolves its counters with node 0's ranks' collective bytes
// (read from the communicator's shared memory) until the job ends; --degrade injects link
// faults into it. --ib-only starts no ranks and synthesizes the traffic instead.
#pragma once

#include "sim_config.h"

namespace argus::sim {

// Throws UsageError (before any rank is started) for unusable paths.
int launcher_main(SimConfig cfg);

} // namespace argus::sim
