#include "sim_config.h"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <vector>

#include <CLI/CLI.hpp>

#include "ib_fixture.h"
#include "sim_config_layout.h"
#include "sim_config_memory.h"

namespace argus::sim {

RankPlan plan_for(const SimConfig &cfg, int rank)
{
	RankPlan p;
	if (auto it = cfg.stragglers.find(rank); it != cfg.stragglers.end())
		p.straggler_factor = it->second;
	if (auto it = cfg.straggler_from.find(rank); it != cfg.straggler_from.end())
		p.straggler_from_step = it->second;
	if (auto it = cfg.cuda_errors.find(rank); it != cfg.cuda_errors.end())
		p.cuda_errors = it->second;
	if (auto it = cfg.hangs.find(rank); it != cfg.hangs.end())
		p.hang_step = it->second;
	if (auto it = cfg.exits.find(rank); it != cfg.exits.end())
		p.exit_step = it->second;
	if (auto it = cfg.gpu_hangs.find(rank); it != cfg.gpu_hangs.end())
		p.gpu_hang_step = it->second;
	if (auto it = cfg.gpu_slow.find(rank); it != cfg.gpu_slow.end())
		p.gpu_slow_factor = it->second;
	if (auto it = cfg.gpu_slow_from.find(rank); it != cfg.gpu_slow_from.end())
		p.gpu_slow_from_step = it->second;
	if (auto it = cfg.mem_leaks.find(rank); it != cfg.mem_leaks.end())
		p.mem_leak_bytes = it->second;
	if (auto it = cfg.mem_ooms.find(rank); it != cfg.mem_ooms.end())
		p.mem_oom_step = it->second;
	p.pp_stage = pp_stage_of(cfg, rank);
	if (p.pp_stage >= 0) {
		const int per_stage = cfg.ranks / cfg.pp;
		if (p.pp_stage < cfg.pp - 1)
			p.pp_send_to = rank + per_stage;
		if (p.pp_stage > 0)
			p.pp_recv_from = rank - per_stage;
		if (auto it = cfg.bubbles.find(p.pp_stage); it != cfg.bubbles.end())
			p.bubble_ms = it->second;
		p.recv_delay_us = pp_recv_delay_us(cfg, rank);
	}
	return p;
}

int pp_stage_of(const SimConfig &cfg, int rank)
{
	if (cfg.pp < 2 || cfg.ranks % cfg.pp != 0 || rank < 0 || rank >= cfg.ranks)
		return -1;
	return rank / (cfg.ranks / cfg.pp);
}

std::int64_t pp_recv_delay_us(const SimConfig &cfg, int rank)
{
	const int stage = pp_stage_of(cfg, rank);
	if (cfg.framework) {
		auto it = stage >= 0 ? cfg.bubbles.find(stage) : cfg.bubbles.end();
		return it == cfg.bubbles.end() ? 0 : static_cast<std::int64_t>(it->second) * 1000;
	}
	if (stage <= 0)
		return 0;
	std::int64_t us = static_cast<std::int64_t>(static_cast<double>(cfg.step_ms) * 1000.0 * kPpFillShare);
	if (auto it = cfg.bubbles.find(stage); it != cfg.bubbles.end())
		us += static_cast<std::int64_t>(it->second) * 1000;
	return us;
}

int ranks_per_node(const SimConfig &cfg)
{
	const int nodes = cfg.nodes < 1 ? 1 : cfg.nodes;
	return (cfg.ranks + nodes - 1) / nodes;
}

int node_of(const SimConfig &cfg, int rank)
{
	const int k = ranks_per_node(cfg);
	return k > 0 ? rank / k : 0;
}

int local_rank_of(const SimConfig &cfg, int rank)
{
	const int k = ranks_per_node(cfg);
	return k > 0 ? rank % k : rank;
}

int local_world_size_of(const SimConfig &cfg, int node)
{
	const int k = ranks_per_node(cfg);
	const int first = node * k;
	const int last = std::min(first + k, cfg.ranks);
	return last > first ? last - first : 0;
}

std::string node_name(int node)
{
	return "node-" + std::to_string(node);
}

nlohmann::json to_json(const SimConfig &cfg)
{
	nlohmann::json stragglers = nlohmann::json::array();
	for (const auto &[rank, factor] : cfg.stragglers) {
		auto from = cfg.straggler_from.find(rank);
		stragglers.push_back({{"rank", rank},
				      {"factor", factor},
				      {"from_step", from == cfg.straggler_from.end() ? 0 : from->second}});
	}
	nlohmann::json hangs = nlohmann::json::array();
	for (const auto &[rank, step] : cfg.hangs)
		hangs.push_back({{"rank", rank}, {"step", step}});
	nlohmann::json gpu_hangs = nlohmann::json::array();
	for (const auto &[rank, step] : cfg.gpu_hangs)
		gpu_hangs.push_back({{"rank", rank}, {"step", step}});
	nlohmann::json exits = nlohmann::json::array();
	for (const auto &[rank, step] : cfg.exits)
		exits.push_back({{"rank", rank}, {"step", step}});
	nlohmann::json cuda_errors = nlohmann::json::array();
	for (const auto &[rank, n] : cfg.cuda_errors)
		cuda_errors.push_back({{"rank", rank}, {"count", n}});
	nlohmann::json gpu_slow = nlohmann::json::array();
	for (const auto &[rank, factor] : cfg.gpu_slow) {
		auto from = cfg.gpu_slow_from.find(rank);
		gpu_slow.push_back({{"rank", rank},
				    {"factor", factor},
				    {"from_step", from == cfg.gpu_slow_from.end() ? 0 : from->second}});
	}
	nlohmann::json bubbles = nlohmann::json::array();
	for (const auto &[stage, ms] : cfg.bubbles)
		bubbles.push_back({{"stage", stage}, {"ms", ms}});
	nlohmann::json checkpoints = nlohmann::json::array();
	for (const auto &[rank, c] : cfg.checkpoints)
		checkpoints.push_back({{"rank", rank}, {"every", c.first}, {"ms", c.second}});
	nlohmann::json j = {
		{"ranks", cfg.ranks},
		{"steps", cfg.steps},
		{"step_ms", cfg.step_ms},
		{"host_cpu", cfg.host_cpu},
		{"job_id", cfg.job_id},
		{"stragglers", stragglers},
		{"gpu_slow", gpu_slow},
		{"pp", cfg.pp},
		{"bubbles", bubbles},
		{"framework", cfg.framework},
		{"tp", cfg.tp},
		{"ep", cfg.ep},
		{"accum", cfg.accum},
		{"layers", cfg.layers},
		{"jitter_pct", cfg.jitter_pct},
		{"eval_every", cfg.eval_every},
		{"eval_ms", cfg.eval_ms},
		{"checkpoints", checkpoints},
		{"cuda_errors", cuda_errors},
		{"hangs", hangs},
		{"exits", exits},
		{"gpu_hangs", gpu_hangs},
		{"nodes", cfg.nodes},
		{"hang_timeout_s", cfg.hang_timeout_s},
		{"out_dir", cfg.out_dir},
		{"nccl_lib", cfg.nccl_lib},
		{"cuda_lib", cfg.cuda_lib},
		{"init_ms", cfg.init_ms},
		{"kernels_per_step", cfg.kernels_per_step},
		{"kernel_names", cfg.kernel_names},
		{"nccl_mode", cfg.nccl_async ? "async" : "blocking"},
		{"gpu_fold", cfg.gpu_fold},
		{"sync_before_coll", cfg.sync_before_coll},
		{"buckets", cfg.buckets},
		{"sync_every", cfg.sync_every},
		{"master_port", cfg.master_port},
		{"quiet", cfg.quiet},
		{"ib_fixture", cfg.ib_fixture},
		{"degrade", cfg.degrade},
		{"ib_only", cfg.ib_only},
	};
	memory_to_json(cfg, j);
	return j;
}

SimConfig config_from_json(const nlohmann::json &j)
{
	SimConfig c;
	c.ranks = j.at("ranks").get<int>();
	c.steps = j.at("steps").get<std::int64_t>();
	c.step_ms = j.at("step_ms").get<int>();
	c.host_cpu = j.value("host_cpu", kDefaultHostCpu);
	if (!std::isfinite(c.host_cpu) || c.host_cpu < 0 || c.host_cpu > 1)
		throw std::runtime_error("host_cpu must be within 0..1");
	c.job_id = j.at("job_id").get<std::string>();
	for (const auto &s : j.at("stragglers")) {
		c.stragglers[s.at("rank").get<int>()] = s.at("factor").get<double>();
		if (auto from = s.value("from_step", std::int64_t{0}); from > 0)
			c.straggler_from[s.at("rank").get<int>()] = from;
	}
	for (const auto &g : j.value("gpu_slow", nlohmann::json::array())) {
		c.gpu_slow[g.at("rank").get<int>()] = g.at("factor").get<double>();
		if (auto from = g.value("from_step", std::int64_t{0}); from > 0)
			c.gpu_slow_from[g.at("rank").get<int>()] = from;
	}
	c.pp = j.value("pp", 0);
	for (const auto &b : j.value("bubbles", nlohmann::json::array()))
		c.bubbles[b.at("stage").get<int>()] = b.at("ms").get<int>();
	c.framework = j.value("framework", false);
	c.tp = j.value("tp", 1);
	c.ep = j.value("ep", 1);
	c.accum = j.value("accum", 1);
	c.layers = j.value("layers", 4);
	c.jitter_pct = j.value("jitter_pct", 0.0);
	c.eval_every = j.value("eval_every", 0);
	c.eval_ms = j.value("eval_ms", 0);
	for (const auto &k : j.value("checkpoints", nlohmann::json::array()))
		c.checkpoints[k.at("rank").get<int>()] = {k.at("every").get<int>(), k.at("ms").get<int>()};
	if (c.tp < 1 || c.ep < 1 || c.accum < 1 || c.layers < 1 || c.jitter_pct < 0 || c.jitter_pct > 100)
		throw std::runtime_error("tp, ep, accum, layers must be >= 1 and jitter_pct within 0..100");
	for (const auto &h : j.value("hangs", nlohmann::json::array()))
		c.hangs[h.at("rank").get<int>()] = h.at("step").get<std::int64_t>();
	for (const auto &e : j.value("exits", nlohmann::json::array()))
		c.exits[e.at("rank").get<int>()] = e.at("step").get<std::int64_t>();
	for (const auto &g : j.value("gpu_hangs", nlohmann::json::array()))
		c.gpu_hangs[g.at("rank").get<int>()] = g.at("step").get<std::int64_t>();
	c.nodes = j.value("nodes", 1);
	c.hang_timeout_s = j.value("hang_timeout_s", 0.0);
	for (const auto &e : j.at("cuda_errors"))
		c.cuda_errors[e.at("rank").get<int>()] = e.at("count").get<int>();
	c.out_dir = j.at("out_dir").get<std::string>();
	c.nccl_lib = j.at("nccl_lib").get<std::string>();
	c.cuda_lib = j.at("cuda_lib").get<std::string>();
	c.init_ms = j.at("init_ms").get<int>();
	c.kernels_per_step = j.at("kernels_per_step").get<int>();
	c.kernel_names = j.value("kernel_names", kKernelCount);
	if (c.kernel_names < kKernelCount || c.kernel_names > kMaxKernelNames)
		throw std::runtime_error("kernel_names out of range");
	c.nccl_async = j.value("nccl_mode", std::string("async")) != "blocking";
	c.gpu_fold = j.value("gpu_fold", false);
	c.sync_before_coll = j.value("sync_before_coll", false);
	c.buckets = j.value("buckets", 0);
	c.sync_every = j.value("sync_every", 1);
	if (c.buckets < 0 || c.sync_every < 1)
		throw std::runtime_error("buckets must be >= 0 and sync_every >= 1");
	c.master_port = j.at("master_port").get<int>();
	c.quiet = j.at("quiet").get<bool>();
	c.ib_fixture = j.value("ib_fixture", std::string());
	c.degrade = j.value("degrade", std::vector<std::string>());
	c.ib_only = j.value("ib_only", false);
	memory_from_json(j, c);
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

// A step number of a fault spec: an integer >= 0, below --steps when that is not 0.
std::int64_t parse_step(const std::string &flag, const std::string &spec, const std::string &text,
			std::int64_t steps)
{
	std::size_t used = 0;
	long long step = -1;
	try {
		step = std::stoll(text, &used);
	} catch (const std::exception &) {
		used = 0;
	}
	if (text.empty() || used != text.size() || step < 0)
		throw UsageError(flag + ": STEP must be an integer >= 0, got '" + text + "' in '" + spec + "'");
	if (steps > 0 && step >= steps)
		throw UsageError(flag + ": step " + std::to_string(step) + " is never reached (--steps " +
				 std::to_string(steps) + ")");
	return step;
}

// --straggler / --gpu-slow: RANK:FACTOR[@STEP], one per rank; FACTOR checked by
// `ok` (its rule in `rule` for the message).
void parse_factor_faults(const std::string &flag, const std::vector<std::string> &specs,
			 const SimConfig &cfg, bool (*ok)(double), const std::string &rule,
			 std::map<int, double> &factors, std::map<int, std::int64_t> &from_steps)
{
	for (const auto &spec : specs) {
		auto [rank, value] = split_rank_spec(flag, spec, cfg.ranks);
		std::size_t used = 0;
		double factor = 0;
		std::string from_text;
		if (auto at = value.find('@'); at != std::string::npos) {
			from_text = value.substr(at + 1);
			value = value.substr(0, at);
			if (from_text.empty())
				throw UsageError(flag + ": expected RANK:FACTOR@STEP, got '" + spec + "'");
		}
		try {
			factor = std::stod(value, &used);
		} catch (const std::exception &) {
			used = 0;
		}
		if (value.empty() || used != value.size() || !std::isfinite(factor) || !ok(factor))
			throw UsageError(flag + ": FACTOR must be a number " + rule + ", got '" + value + "'");
		if (factors.count(rank))
			throw UsageError(flag + ": rank " + std::to_string(rank) + " given twice");
		factors[rank] = factor;
		if (!from_text.empty()) {
			if (auto from = parse_step(flag, spec, from_text, cfg.steps); from > 0)
				from_steps[rank] = from;
		}
	}
}

// An integer of a spec, whole text; false if it is not one.
bool parse_int(const std::string &text, long &out)
{
	std::size_t used = 0;
	try {
		out = std::stol(text, &used);
	} catch (const std::exception &) {
		return false;
	}
	return !text.empty() && used == text.size();
}

// --bubble STAGE:MS (needs --pp), one per stage.
void parse_bubbles(const std::vector<std::string> &specs, SimConfig &cfg)
{
	for (const auto &spec : specs) {
		if (cfg.pp == 0)
			throw UsageError("--bubble: needs --pp N");
		auto colon = spec.find(':');
		if (colon == std::string::npos)
			throw UsageError("--bubble: expected STAGE:MS, got '" + spec + "'");
		long stage = -1, ms = 0;
		if (!parse_int(spec.substr(0, colon), stage) || stage < 0)
			throw UsageError("--bubble: bad stage '" + spec.substr(0, colon) + "' in '" + spec + "'");
		if (stage >= cfg.pp)
			throw UsageError("--bubble: stage " + std::to_string(stage) + " is out of range (--pp " +
					 std::to_string(cfg.pp) + ": stages 0.." + std::to_string(cfg.pp - 1) + ")");
		if (!parse_int(spec.substr(colon + 1), ms) || ms <= 0 || ms > 60000)
			throw UsageError("--bubble: MS must be an integer 1..60000, got '" + spec.substr(colon + 1) +
					 "' in '" + spec + "'");
		if (cfg.bubbles.count(static_cast<int>(stage)))
			throw UsageError("--bubble: stage " + std::to_string(stage) + " given twice");
		cfg.bubbles[static_cast<int>(stage)] = static_cast<int>(ms);
	}
}

// --mem-leak RANK:BYTES, one per rank.
void parse_mem_leaks(const std::vector<std::string> &specs, SimConfig &cfg)
{
	for (const auto &spec : specs) {
		auto [rank, value] = split_rank_spec("--mem-leak", spec, cfg.ranks);
		auto bytes = parse_byte_size(value);
		if (!bytes || *bytes == 0 || *bytes > kMaxMemLeakBytes)
			throw UsageError("--mem-leak: BYTES must be 1.." + std::to_string(kMaxMemLeakBytes) +
					 " (suffix K, M or G), got '" + value + "' in '" + spec + "'");
		if (cfg.mem_leaks.count(rank))
			throw UsageError("--mem-leak: rank " + std::to_string(rank) + " given twice");
		cfg.mem_leaks[rank] = *bytes;
	}
}

// --hang / --exit / --mem-oom: RANK:STEP, one per rank.
void parse_step_faults(const std::string &flag, const std::vector<std::string> &specs,
		       const SimConfig &cfg, std::map<int, std::int64_t> &into)
{
	for (const auto &spec : specs) {
		auto [rank, value] = split_rank_spec(flag, spec, cfg.ranks);
		if (into.count(rank))
			throw UsageError(flag + ": rank " + std::to_string(rank) + " given twice");
		into[rank] = parse_step(flag, spec, value, cfg.steps);
	}
}

} // namespace

std::optional<SimConfig> parse_cli(int argc, char **argv)
{
	SimConfig cfg;
	std::vector<std::string> straggler_specs;
	std::vector<std::string> gpu_slow_specs;
	std::vector<std::string> bubble_specs;
	std::vector<std::string> cuda_error_specs;
	std::vector<std::string> hang_specs;
	std::vector<std::string> gpu_hang_specs;
	std::vector<std::string> exit_specs;

	CLI::App app{"argus-sim: a simulated multi-process GPU training job (shim libcuda/libnccl)",
		     "argus-sim"};
	app.add_option("--ranks", cfg.ranks, "number of rank processes (1..1024)")
		->check(CLI::Range(1, kMaxRanks));
	app.add_option("--steps", cfg.steps, "training steps; 0 = run until SIGINT/SIGTERM")
		->check(CLI::Range(static_cast<std::int64_t>(0), static_cast<std::int64_t>(1) << 40));
	app.add_option("--step-ms", cfg.step_ms, "host compute per step in milliseconds")
		->check(CLI::Range(0, 3600 * 1000));
	app.add_option("--host-cpu", cfg.host_cpu,
		       "SHARE (0..1) of each step's host compute burnt on CPU (thread CPU time), the rest "
		       "slept, so that a rank that gets less CPU (a noisy neighbour, a quota) is late; 0 = "
		       "pure sleep pacing (default " + std::to_string(kDefaultHostCpu).substr(0, 4) + ")")
		->check(CLI::Range(0.0, 1.0));
	app.add_option("--job-id", cfg.job_id, "job id (TORCHELASTIC_RUN_ID); default sim-<pid>");
	app.add_option("--straggler", straggler_specs,
		       "RANK:FACTOR[@STEP]: multiply that rank's host compute time by FACTOR >= 1, "
		       "from step STEP on (default 0) (repeatable)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--gpu-slow", gpu_slow_specs,
		       "RANK:FACTOR[@STEP]: multiply that rank's compute kernel durations on the emulated "
		       "GPU by FACTOR (> 1, <= 100) from step STEP on (default 0); its host stays on time "
		       "(repeatable)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--pp", cfg.pp,
		       "N pipeline stages (N >= 2, dividing --ranks; stage of rank r = r / (ranks/N)): at "
		       "the start of every step a stage sends (eager ncclSend) to the next and receives "
		       "(ncclRecv on the compute stream) from the previous; a stage > 0 waits 10% of "
		       "--step-ms for its input (pipeline fill). With --tp/--ep/--accum/--layers: the "
		       "stages of a 1F1B pipeline (grouped send/recv on a PP communicator; stage of r = "
		       "r / (tp x dp))");
	LayoutFlagText layout_text;
	add_layout_flags(app, cfg, layout_text);
	MemoryFlagText mem_text;
	add_memory_flags(app, cfg, mem_text);
	app.add_option("--bubble", bubble_specs,
		       "STAGE:MS: with --pp, the receives of that stage's ranks wait MS (1..60000) ms "
		       "longer: a pipeline bubble on their GPUs (repeatable, one per stage)")
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
	app.add_option("--kernel-names", cfg.kernel_names,
		       "distinct kernels the launches cycle through, each with its own duration (a real step runs "
		       "hundreds)")
		->check(CLI::Range(kKernelCount, kMaxKernelNames));
	app.add_flag("--gpu-fold", cfg.gpu_fold,
		     "the emulated GPU folds its compute kernels into spans and sketches, as "
		     "libargus-cupti.so does by default, instead of sending one record per kernel");
	std::string nccl_mode = "async";
	app.add_option("--nccl-mode", nccl_mode,
		       "async (default; real NCCL: a collective only enqueues its kernel, peers wait on "
		       "the GPU and the host blocks in its next synchronize) or blocking (the call "
		       "returns once every rank has called it, as Gloo)")
		->check(CLI::IsMember({"async", "blocking"}));
	app.add_flag("--sync-before-coll", cfg.sync_before_coll,
		     "each step synchronizes its compute stream right before its collectives "
		     "(loss.item(), timing code)");
	app.add_option("--buckets", cfg.buckets,
		       "N: DDP-like gradient all-reduces issued during backward, between the step's "
		       "second-half kernel launches (default 0)")
		->check(CLI::Range(0, 64));
	app.add_option("--sync-every", cfg.sync_every,
		       "K: the step-end cuStreamSynchronize only every K steps, so the host runs up to "
		       "K steps ahead of the GPU (default 1)")
		->check(CLI::Range(1, 100));
	app.add_option("--master-port", cfg.master_port, "MASTER_PORT given to the ranks")
		->check(CLI::Range(1, 65535));
	app.add_option("--gpu-hang", gpu_hang_specs,
		       "RANK:STEP: from step STEP that rank's GPU never finishes a kernel (a GPU stuck in a "
		       "kernel): every rank issues the next collective and none finishes (repeatable)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--hang", hang_specs,
		       "RANK:STEP: at step STEP that rank blocks forever right before its first "
		       "collective; its peers block in it (repeatable, one per rank)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--exit", exit_specs,
		       "RANK:STEP: at step STEP that rank exits with status 1 right before its first "
		       "collective; its peers block in it (repeatable, one per rank)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--hang-timeout", cfg.hang_timeout_s,
		       "seconds after the first --hang/--exit fires before the launcher stops the "
		       "job; 0 = wait for SIGINT/SIGTERM (default)")
		->check(CLI::Range(0.0, 1e9));
	app.add_flag("--no-abort", cfg.no_abort,
		     "a rank that dies (killed, crashed) does not abort the communicator: its peers "
		     "block in their next collective, as with NCCL and no error handling");
	app.add_option("--nodes", cfg.nodes,
		       "simulated nodes: ranks in contiguous blocks of ceil(ranks/nodes), the last "
		       "node may have fewer; no node may be empty")
		->check(CLI::Range(1, kMaxRanks));
	app.add_flag("--quiet", cfg.quiet, "print nothing but errors");
	app.add_option("--ib-fixture", cfg.ib_fixture,
		       "lay out an InfiniBand/RoCE sysfs tree (class/infiniband, bus/pci/devices) in DIR "
		       "and evolve its counters with the job's traffic");
	app.add_option("--degrade", cfg.degrade,
		       "DEV:PORT:KIND[@SECONDS]: inject a link fault into the --ib-fixture after SECONDS "
		       "(default 3); KIND = errors|flap|width|speed|congestion|down|imbalance (repeatable)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_flag("--ib-only", cfg.ib_only,
		     "with --ib-fixture: start no rank processes; synthesize the traffic of --ranks ranks "
		     "doing --steps steps of --step-ms (--steps 0: until SIGINT/SIGTERM)");

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

	cfg.nccl_async = nccl_mode != "blocking";
	parse_factor_faults(
		"--straggler", straggler_specs, cfg, [](double f) { return f >= 1.0 && f <= 1e6; }, ">= 1",
		cfg.stragglers, cfg.straggler_from);
	parse_factor_faults(
		"--gpu-slow", gpu_slow_specs, cfg, [](double f) { return f > 1.0 && f <= 100.0; },
		"> 1 and <= 100", cfg.gpu_slow, cfg.gpu_slow_from);
	if (app.count("--pp")) {
		if (cfg.pp < 2)
			throw UsageError("--pp: N must be >= 2, got " + std::to_string(cfg.pp));
		if (cfg.ranks % cfg.pp != 0)
			throw UsageError("--pp: " + std::to_string(cfg.pp) + " stages do not divide --ranks " +
					 std::to_string(cfg.ranks));
	}
	check_layout_flags(app, layout_text, cfg);
	parse_bubbles(bubble_specs, cfg);
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
	parse_step_faults("--hang", hang_specs, cfg, cfg.hangs);
	parse_step_faults("--gpu-hang", gpu_hang_specs, cfg, cfg.gpu_hangs);
	parse_step_faults("--exit", exit_specs, cfg, cfg.exits);
	cfg.mem_api = mem_api_from_name(mem_text.api).value_or(MemApi::Classic);
	parse_mem_leaks(mem_text.leaks, cfg);
	parse_step_faults("--mem-oom", mem_text.ooms, cfg, cfg.mem_ooms);
	for (const auto &[rank, step] : cfg.hangs)
		if (cfg.exits.count(rank))
			throw UsageError("--hang and --exit: rank " + std::to_string(rank) + " has both");
	if (cfg.nodes > cfg.ranks)
		throw UsageError("--nodes: " + std::to_string(cfg.nodes) + " nodes for " +
				 std::to_string(cfg.ranks) + " ranks (at most one node per rank)");
	if (local_world_size_of(cfg, cfg.nodes - 1) < 1)
		throw UsageError("--nodes: " + std::to_string(cfg.ranks) + " ranks in blocks of " +
				 std::to_string(ranks_per_node(cfg)) + " leave node " +
				 std::to_string(cfg.nodes - 1) + " empty");
	if (!cfg.degrade.empty() && cfg.ib_fixture.empty())
		throw UsageError("--degrade: needs --ib-fixture DIR");
	if (cfg.ib_only && cfg.ib_fixture.empty())
		throw UsageError("--ib-only: needs --ib-fixture DIR");
	if (app.count("--ib-fixture") && cfg.ib_fixture.empty())
		throw UsageError("--ib-fixture: must not be empty");
	for (const auto &spec : cfg.degrade) {
		std::string err;
		if (!parse_degrade(spec, err))
			throw UsageError(err);
	}
	if (app.count("--job-id") && cfg.job_id.empty())
		throw UsageError("--job-id: must not be empty");
	for (char ch : cfg.job_id)
		if (ch == '\n' || ch == '\r')
			throw UsageError("--job-id: must not contain newlines");
	return cfg;
}

} // namespace argus::sim
