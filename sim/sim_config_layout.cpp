#include "sim_config_layout.h"

#include <string>

namespace argus::sim {
namespace {

// A whole-text integer; false if `text` is not one.
bool whole_int(const std::string &text, long &out)
{
	std::size_t used = 0;
	try {
		out = std::stol(text, &used);
	} catch (const std::exception &) {
		return false;
	}
	return !text.empty() && used == text.size();
}

// "A:B[:C...]" split at ':'.
std::vector<std::string> fields(const std::string &spec)
{
	std::vector<std::string> v;
	std::size_t from = 0;
	for (;;) {
		auto colon = spec.find(':', from);
		v.push_back(spec.substr(from, colon == std::string::npos ? std::string::npos : colon - from));
		if (colon == std::string::npos)
			return v;
		from = colon + 1;
	}
}

constexpr long kMaxPauseMs = 600000; // 10 min: longer is a hang, not a pause

long pause_ms(const std::string &flag, const std::string &spec, const std::string &text)
{
	long ms = 0;
	if (!whole_int(text, ms) || ms < 1 || ms > kMaxPauseMs)
		throw UsageError(flag + ": MS must be an integer 1.." + std::to_string(kMaxPauseMs) + ", got '" + text +
				 "' in '" + spec + "'");
	return ms;
}

long every_steps(const std::string &flag, const std::string &spec, const std::string &what,
		 const std::string &text)
{
	long k = 0;
	if (!whole_int(text, k) || k < 1 || k > 1000000)
		throw UsageError(flag + ": " + what + " must be an integer 1..1000000, got '" + text + "' in '" + spec +
				 "'");
	return k;
}

void check_eval(const LayoutFlagText &text, SimConfig &cfg)
{
	const std::string &spec = text.eval_every;
	auto f = fields(spec);
	if (f.size() != 2)
		throw UsageError("--eval-every: expected K:MS, got '" + spec + "'");
	cfg.eval_every = static_cast<int>(every_steps("--eval-every", spec, "K", f[0]));
	cfg.eval_ms = static_cast<int>(pause_ms("--eval-every", spec, f[1]));
}

void check_checkpoints(const LayoutFlagText &text, SimConfig &cfg)
{
	for (const auto &spec : text.checkpoints) {
		auto f = fields(spec);
		if (f.size() != 3)
			throw UsageError("--checkpoint: expected RANK:EVERY:MS, got '" + spec + "'");
		long rank = -1;
		if (!whole_int(f[0], rank) || rank < 0)
			throw UsageError("--checkpoint: bad rank '" + f[0] + "' in '" + spec + "'");
		if (rank >= cfg.ranks)
			throw UsageError("--checkpoint: rank " + std::to_string(rank) + " is out of range (--ranks " +
					 std::to_string(cfg.ranks) + ")");
		const long every = every_steps("--checkpoint", spec, "EVERY", f[1]);
		const long ms = pause_ms("--checkpoint", spec, f[2]);
		if (cfg.checkpoints.count(static_cast<int>(rank)))
			throw UsageError("--checkpoint: rank " + std::to_string(rank) + " given twice");
		cfg.checkpoints[static_cast<int>(rank)] = {static_cast<int>(every), static_cast<int>(ms)};
	}
}

// The layout divides: ranks = tp * dp * pp, ep | dp.
void check_layout(SimConfig &cfg)
{
	const int pp = cfg.pp >= 2 ? cfg.pp : 1;
	if (cfg.tp < 1)
		throw UsageError("--tp: N must be >= 1, got " + std::to_string(cfg.tp));
	if (cfg.ep < 1)
		throw UsageError("--ep: N must be >= 1, got " + std::to_string(cfg.ep));
	if (cfg.ranks % (cfg.tp * pp) != 0)
		throw UsageError("--tp " + std::to_string(cfg.tp) + " x --pp " + std::to_string(pp) +
				 " does not divide --ranks " + std::to_string(cfg.ranks));
	const int dp = cfg.ranks / (cfg.tp * pp);
	if (dp % cfg.ep != 0)
		throw UsageError("--ep: " + std::to_string(cfg.ep) + " does not divide the data-parallel size " +
				 std::to_string(dp) + " (ranks / (tp x pp))");
}

} // namespace

void add_layout_flags(CLI::App &app, SimConfig &cfg, LayoutFlagText &text)
{
	app.add_option("--tp", cfg.tp,
		       "N: tensor parallelism (framework job: ranks laid out as Megatron does, TP fastest, "
		       "then DP, then PP; a TP all-reduce after each layer's attention and MLP, forward and "
		       "backward, on a communicator made with ncclCommSplit)")
		->check(CLI::Range(1, kMaxRanks));
	app.add_option("--ep", cfg.ep,
		       "N: expert parallelism over consecutive DP ranks (N divides the DP size): an MoE "
		       "all-to-all (grouped ncclSend/ncclRecv, uneven token counts) before and after each "
		       "layer's experts, on a communicator made with ncclCommSplit")
		->check(CLI::Range(1, kMaxRanks));
	app.add_option("--accum", cfg.accum,
		       "K: micro-batches per step (gradient accumulation), run as Megatron's 1F1B pipeline "
		       "schedule with --pp; one DP gradient all-reduce after the last (default 1)")
		->check(CLI::Range(1, 1024));
	app.add_option("--layers", cfg.layers, "layers per pipeline stage in a framework job (default 4)")
		->check(CLI::Range(1, 64));
	app.add_option("--jitter", cfg.jitter_pct,
		       "PCT (0..100): each rank's compute (host and kernels) of each step scaled by "
		       "1 + PCT/100 * u, u uniform in [-1, 1] per rank and step from a fixed seed "
		       "(sequence lengths vary)")
		->check(CLI::Range(0.0, 100.0));
	app.add_option("--eval-every", text.eval_every,
		       "K:MS: after every K-th step every rank pauses MS ms (an evaluation: host busy, no "
		       "NCCL call)");
	app.add_option("--checkpoint", text.checkpoints,
		       "RANK:EVERY:MS: after every EVERY-th step that rank spends MS ms writing a checkpoint "
		       "(outside any NCCL/CUDA call) while its peers wait in their next collective "
		       "(repeatable, one per rank)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void check_layout_flags(const CLI::App &app, const LayoutFlagText &text, SimConfig &cfg)
{
	// --pp alone keeps the flat step (and its eager pipeline calls): existing jobs
	// and the agent's tests of it rely on it. Any layout flag makes a framework job.
	cfg.framework = app.count("--tp") + app.count("--ep") + app.count("--accum") + app.count("--layers") > 0;
	if (cfg.framework)
		check_layout(cfg);
	if (app.count("--eval-every"))
		check_eval(text, cfg);
	check_checkpoints(text, cfg);
}

} // namespace argus::sim
