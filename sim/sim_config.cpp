#include "sim_config.h"

#include <cmath>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>

namespace argus::sim {

RankPlan plan_for(const SimConfig &cfg, int rank)
{
	RankPlan p;
	if (auto it = cfg.stragglers.find(rank); it != cfg.stragglers.end())
		p.straggler_factor = it->second;
	if (auto it = cfg.cuda_errors.find(rank); it != cfg.cuda_errors.end())
		p.cuda_errors = it->second;
	return p;
}

nlohmann::json to_json(const SimConfig &cfg)
{
	nlohmann::json stragglers = nlohmann::json::array();
	for (const auto &[rank, factor] : cfg.stragglers)
		stragglers.push_back({{"rank", rank}, {"factor", factor}});
	nlohmann::json cuda_errors = nlohmann::json::array();
	for (const auto &[rank, n] : cfg.cuda_errors)
		cuda_errors.push_back({{"rank", rank}, {"count", n}});
	return {
		{"ranks", cfg.ranks},
		{"steps", cfg.steps},
		{"step_ms", cfg.step_ms},
		{"job_id", cfg.job_id},
		{"stragglers", stragglers},
		{"cuda_errors", cuda_errors},
		{"out_dir", cfg.out_dir},
		{"nccl_lib", cfg.nccl_lib},
		{"cuda_lib", cfg.cuda_lib},
		{"init_ms", cfg.init_ms},
		{"kernels_per_step", cfg.kernels_per_step},
		{"master_port", cfg.master_port},
		{"quiet", cfg.quiet},
	};
}

SimConfig config_from_json(const nlohmann::json &j)
{
	SimConfig c;
	c.ranks = j.at("ranks").get<int>();
	c.steps = j.at("steps").get<std::int64_t>();
	c.step_ms = j.at("step_ms").get<int>();
	c.job_id = j.at("job_id").get<std::string>();
	for (const auto &s : j.at("stragglers"))
		c.stragglers[s.at("rank").get<int>()] = s.at("factor").get<double>();
	for (const auto &e : j.at("cuda_errors"))
		c.cuda_errors[e.at("rank").get<int>()] = e.at("count").get<int>();
	c.out_dir = j.at("out_dir").get<std::string>();
	c.nccl_lib = j.at("nccl_lib").get<std::string>();
	c.cuda_lib = j.at("cuda_lib").get<std::string>();
	c.init_ms = j.at("init_ms").get<int>();
	c.kernels_per_step = j.at("kernels_per_step").get<int>();
	c.master_port = j.at("master_port").get<int>();
	c.quiet = j.at("quiet").get<bool>();
	return c;
}

namespace {

// "RANK:VALUE" -> (rank, value text). Throws UsageError.
std::pair<int, std::string> split_rank_spec(const std::string &flag, const std::string &spec,
					    int ranks)
{
	auto colon = spec.find(':');
	if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
		throw UsageError(flag + ": expected RANK:VALUE, got '" + spec + "'");
	std::string rank_text = spec.substr(0, colon);
	std::size_t used = 0;
	long rank = -1;
	try {
		rank = std::stol(rank_text, &used);
	} catch (const std::exception &) {
		used = 0;
	}
	if (used != rank_text.size() || rank < 0)
		throw UsageError(flag + ": bad rank '" + rank_text + "' in '" + spec + "'");
	if (rank >= ranks)
		throw UsageError(flag + ": rank " + std::to_string(rank) + " is out of range (--ranks " +
				 std::to_string(ranks) + ")");
	return {static_cast<int>(rank), spec.substr(colon + 1)};
}

} // namespace

std::optional<SimConfig> parse_cli(int argc, char **argv)
{
	SimConfig cfg;
	std::vector<std::string> straggler_specs;
	std::vector<std::string> cuda_error_specs;

	CLI::App app{"argus-sim: a simulated multi-process GPU training job (shim libcuda/libnccl)",
		     "argus-sim"};
	app.add_option("--ranks", cfg.ranks, "number of rank processes (1..1024)")
		->check(CLI::Range(1, kMaxRanks));
	app.add_option("--steps", cfg.steps, "training steps; 0 = run until SIGINT/SIGTERM")
		->check(CLI::Range(static_cast<std::int64_t>(0), static_cast<std::int64_t>(1) << 40));
	app.add_option("--step-ms", cfg.step_ms, "host compute per step in milliseconds")
		->check(CLI::Range(0, 3600 * 1000));
	app.add_option("--job-id", cfg.job_id, "job id (TORCHELASTIC_RUN_ID); default sim-<pid>");
	app.add_option("--straggler", straggler_specs,
		       "RANK:FACTOR: multiply that rank's host compute time by FACTOR >= 1 (repeatable)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--cuda-errors", cuda_error_specs,
		       "RANK:N: that rank makes N failing cuMemAlloc_v2 calls after init (repeatable)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--out", cfg.out_dir, "directory for the truth files (created)");
	app.add_option("--nccl-lib", cfg.nccl_lib,
		       "libnccl.so.2 the ranks load (default: ../lib/libnccl.so.2 next to argus-sim)");
	app.add_option("--cuda-lib", cfg.cuda_lib,
		       "libcuda.so.1 the ranks load (default: ../lib/libcuda.so.1 next to argus-sim)");
	app.add_option("--init-ms", cfg.init_ms,
		       "framework start-up time before the first CUDA/NCCL call, in milliseconds")
		->check(CLI::Range(0, 3600 * 1000));
	app.add_option("--kernels-per-step", cfg.kernels_per_step, "kernel launches per step")
		->check(CLI::Range(0, 100000));
	app.add_option("--master-port", cfg.master_port, "MASTER_PORT given to the ranks")
		->check(CLI::Range(1, 65535));
	app.add_flag("--quiet", cfg.quiet, "print nothing but errors");

	try {
		app.parse(argc, argv);
	} catch (const CLI::CallForHelp &) {
		std::cout << app.help();
		return std::nullopt;
	} catch (const CLI::ParseError &e) {
		std::string msg = e.what();
		for (char &ch : msg)
			if (ch == '\n')
				ch = ' ';
		throw UsageError(msg);
	}

	for (const auto &spec : straggler_specs) {
		auto [rank, value] = split_rank_spec("--straggler", spec, cfg.ranks);
		std::size_t used = 0;
		double factor = 0;
		try {
			factor = std::stod(value, &used);
		} catch (const std::exception &) {
			used = 0;
		}
		if (used != value.size() || !std::isfinite(factor) || factor < 1.0 || factor > 1e6)
			throw UsageError("--straggler: FACTOR must be a number >= 1, got '" + value + "'");
		cfg.stragglers[rank] = factor;
	}
	for (const auto &spec : cuda_error_specs) {
		auto [rank, value] = split_rank_spec("--cuda-errors", spec, cfg.ranks);
		std::size_t used = 0;
		long n = -1;
		try {
			n = std::stol(value, &used);
		} catch (const std::exception &) {
			used = 0;
		}
		if (used != value.size() || n < 0 || n > 1000000)
			throw UsageError("--cuda-errors: N must be an integer 0..1000000, got '" + value + "'");
		cfg.cuda_errors[rank] = static_cast<int>(n);
	}
	if (app.count("--job-id") && cfg.job_id.empty())
		throw UsageError("--job-id: must not be empty");
	for (char ch : cfg.job_id)
		if (ch == '\n' || ch == '\r')
			throw UsageError("--job-id: must not contain newlines");
	return cfg;
}

} // namespace argus::sim
