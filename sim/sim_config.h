// Configuration of one simulated training job: what the launcher parses from
// its flags and hands, whole, to every rank process (as JSON in the
// ARGUS_SIM_WORKER_CONFIG environment variable). Per-rank behaviour (faults) is
// looked up by rank with plan_for(), so a new fault is: a field here, a flag in
// parse_cli(), a line in to_json/from_json, a field in RankPlan, and the worker
// acting on it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace argus::sim {

inline constexpr int kMaxRanks = 1024;
inline constexpr const char *kWorkerFlag = "--worker";
inline constexpr const char *kWorkerConfigEnv = "ARGUS_SIM_WORKER_CONFIG";
inline constexpr const char *kNcclIdEnv = "ARGUS_SIM_NCCL_ID";

struct SimConfig {
	int ranks = 8;
	std::int64_t steps = 100; // 0 = until SIGINT/SIGTERM
	int step_ms = 100;        // host compute per step
	std::string job_id;       // default "sim-<launcher pid>"
	std::map<int, double> stragglers; // rank -> host compute factor (>= 1)
	std::map<int, int> cuda_errors;   // rank -> failing cuMemAlloc_v2 calls after init
	std::string out_dir;              // truth files; empty = none
	std::string nccl_lib;             // resolved by the launcher
	std::string cuda_lib;
	int init_ms = 1000;
	int kernels_per_step = 16;
	int master_port = 29500;
	bool quiet = false;
};

// What one rank does differently from the others.
struct RankPlan {
	double straggler_factor = 1.0;
	int cuda_errors = 0;
};

RankPlan plan_for(const SimConfig &cfg, int rank);

nlohmann::json to_json(const SimConfig &cfg);
SimConfig config_from_json(const nlohmann::json &j); // throws on malformed input

// A bad command line: the message is one line, without the program name.
struct UsageError : std::runtime_error {
	using std::runtime_error::runtime_error;
};

// Parses the launcher's flags. Returns std::nullopt when --help was printed.
// Throws UsageError on any bad flag or value. Library paths are left empty when
// not given (the launcher resolves the defaults).
std::optional<SimConfig> parse_cli(int argc, char **argv);

} // namespace argus::sim
