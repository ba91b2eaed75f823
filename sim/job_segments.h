// Every shared-memory segment of a simulated job (sim_shm.h, sim_comm_ids.h): the
// world's, which the launcher creates, and those its ranks make for their other
// communicators, all named after ids that keep the world id's first bytes. The
// launcher aborts them all when it stops the job or a rank dies, and unlinks them
// all at the end (a killed rank never unlinks the ones it made).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace argus::sim {

// The segments of the job whose world unique id is `world_id`, by shm name ("/argus-sim-...").
std::vector<std::string> job_segments(const unsigned char *world_id);
// Sets the abort flag (ARGUS_SIM_ABORT_*) of every segment of the job but
// `world_name` (the launcher keeps that one mapped): a rank waiting in any of its
// communicators is released.
void abort_job_segments(const unsigned char *world_id, const char *world_name, std::uint32_t reason);

} // namespace argus::sim
