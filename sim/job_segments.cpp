#include "job_segments.h"

#include <cstring>
#include <filesystem>
#include <system_error>

#include "sim_shm.h"

namespace argus::sim {

namespace fs = std::filesystem;

std::vector<std::string> job_segments(const unsigned char *world_id)
{
	char world[ARGUS_SIM_SHM_NAME_MAX];
	argus_sim_shm_name(world_id, world);
	// "/argus-sim-" + the hex of the job's bytes: the shared prefix, without the "/".
	const std::string prefix =
		std::string(world + 1, std::strlen(ARGUS_SIM_SHM_PREFIX) - 1 + 2 * ARGUS_SIM_JOB_ID_BYTES);
	std::vector<std::string> names;
	std::error_code ec;
	for (const auto &e : fs::directory_iterator("/dev/shm", ec)) {
		const std::string name = e.path().filename().string();
		if (name.size() == std::strlen(world) - 1 && name.compare(0, prefix.size(), prefix) == 0)
			names.push_back("/" + name);
	}
	return names;
}

void abort_job_segments(const unsigned char *world_id, const char *world_name, std::uint32_t reason)
{
	for (const std::string &name : job_segments(world_id)) {
		if (name == world_name)
			continue;
		if (argus_sim_shm *s = argus_sim_shm_attach(name.c_str())) {
			argus_sim_shm_abort(s, reason, -1);
			argus_sim_shm_close(s);
		}
	}
}

} // namespace argus::sim
