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
#include <vector>

#include <nlohmann/json.hpp>

namespace argus::sim {

inline constexpr int kMaxRanks = 1024;
inline constexpr const char *kWorkerFlag = "--worker";
inline constexpr const char *kWorkerConfigEnv = "ARGUS_SIM_WORKER_CONFIG";
inline constexpr const char *kNcclIdEnv = "ARGUS_SIM_NCCL_ID";
// Each rank's simulated node, "node-<i>" (--nodes): an agent per simulated node
// tracks only the processes whose environment carries its node's value.
inline constexpr const char *kNodeEnv = "ARGUS_SIM_NODE";
// The launcher's pid: a rank that hangs (--hang) tells it with SIGUSR1.
inline constexpr const char *kLauncherPidEnv = "ARGUS_SIM_LAUNCHER_PID";

struct SimConfig {
	int ranks = 8;
	std::int64_t steps = 100; // 0 = until SIGINT/SIGTERM
	int step_ms = 100;        // host compute per step
	std::string job_id;       // default "sim-<launcher pid>"
	std::map<int, double> stragglers; // rank -> host compute factor (>= 1)
	std::map<int, std::int64_t> straggler_from; // rank -> first slow step (absent: 0)
	std::map<int, std::int64_t> hangs; // rank -> step it blocks at, before its first collective
	std::map<int, std::int64_t> exits; // rank -> step it exits(1) at, before its first collective
	int nodes = 1;                     // simulated nodes; ranks in contiguous blocks
	double hang_timeout_s = 0;         // launcher: stop the job S s after a hang/exit; 0 = never
	std::map<int, int> cuda_errors;   // rank -> failing cuMemAlloc_v2 calls after init
	std::string out_dir;              // truth files; empty = none
	std::string nccl_lib;             // resolved by the launcher
	std::string cuda_lib;
	int init_ms = 1000;
	int kernels_per_step = 16;
	int master_port = 29500;
	bool quiet = false;
	// InfiniBand fixture (sim/ib_fixture.h): laid out under ib_fixture and evolved with
	// the job's traffic; degrade = "DEV:PORT:KIND[@SECONDS]" faults; ib_only = no rank
	// processes, the traffic of `ranks` ranks doing `steps` steps of step_ms synthesized.
	std::string ib_fixture;
	std::vector<std::string> degrade;
	bool ib_only = false;
};

// What one rank does differently from the others.
struct RankPlan {
	double straggler_factor = 1.0;
	std::int64_t straggler_from_step = 0; // slow from this step on (factor > 1 only)
	int cuda_errors = 0;
	std::int64_t hang_step = -1; // -1: never
	std::int64_t exit_step = -1; // -1: never
};

RankPlan plan_for(const SimConfig &cfg, int rank);

// --nodes: node i holds ranks [i*k, min((i+1)*k, ranks)) with k = ceil(ranks/nodes),
// so when nodes does not divide ranks the last node has fewer (parse_cli rejects
// a count that would leave a node empty).
int ranks_per_node(const SimConfig &cfg);
int node_of(const SimConfig &cfg, int rank);
int local_rank_of(const SimConfig &cfg, int rank);
int local_world_size_of(const SimConfig &cfg, int node);
std::string node_name(int node); // "node-<i>"

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
