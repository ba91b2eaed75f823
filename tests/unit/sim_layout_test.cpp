// The framework job's configuration and layout (sim/layout.h, sim/sim_config_layout.cpp):
// the flags' parsing (and the GPU memory flags', sim/sim_config_memory.cpp), Megatron's rank order and groups, the 1F1B schedule of
// every stage (and that it never deadlocks under NCCL's pairwise matching), the
// MoE token counts and the jitter factors.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "sim/layout.h"
#include "sim/sim_config.h"
#include "sim/sim_config_memory.h"

namespace {

using namespace argus::sim;

std::optional<SimConfig> parse(std::vector<std::string> args)
{
	args.insert(args.begin(), "argus-sim");
	std::vector<char *> argv;
	for (auto &a : args)
		argv.push_back(a.data());
	return parse_cli(static_cast<int>(argv.size()), argv.data());
}

// The UsageError's message, or "" when the flags parse.
std::string usage_error(const std::vector<std::string> &args)
{
	try {
		parse(args);
	} catch (const UsageError &e) {
		return e.what();
	}
	return "";
}

// Each command line fails with a one-line UsageError that contains its text.
void expect_usage_errors(const std::vector<std::pair<std::vector<std::string>, std::string>> &cases)
{
	for (const auto &[args, want] : cases) {
		std::string joined;
		for (const auto &a : args)
			joined += a + " ";
		SCOPED_TRACE(joined);
		const std::string err = usage_error(args);
		EXPECT_NE(err.find(want), std::string::npos) << err;
		EXPECT_EQ(err.find('\n'), std::string::npos) << err;
	}
}

TEST(SimLayoutTest, FlagsParse)
{
	auto cfg = parse({"--ranks", "16", "--tp", "2", "--pp", "2", "--ep", "2", "--accum", "4", "--layers", "3",
			  "--jitter", "30", "--eval-every", "5:40", "--checkpoint", "3:4:100", "--checkpoint",
			  "0:2:10"});
	ASSERT_TRUE(cfg);
	EXPECT_TRUE(cfg->framework);
	EXPECT_EQ(cfg->tp, 2);
	EXPECT_EQ(cfg->pp, 2);
	EXPECT_EQ(cfg->ep, 2);
	EXPECT_EQ(cfg->accum, 4);
	EXPECT_EQ(cfg->layers, 3);
	EXPECT_DOUBLE_EQ(cfg->jitter_pct, 30);
	EXPECT_EQ(cfg->eval_every, 5);
	EXPECT_EQ(cfg->eval_ms, 40);
	EXPECT_EQ(cfg->checkpoints, (std::map<int, std::pair<int, int>>{{0, {2, 10}}, {3, {4, 100}}}));
	// Through the ranks' JSON and back.
	SimConfig back = config_from_json(to_json(*cfg));
	EXPECT_TRUE(back.framework);
	EXPECT_EQ(back.tp, 2);
	EXPECT_EQ(back.ep, 2);
	EXPECT_EQ(back.accum, 4);
	EXPECT_EQ(back.layers, 3);
	EXPECT_DOUBLE_EQ(back.jitter_pct, 30);
	EXPECT_EQ(back.eval_every, 5);
	EXPECT_EQ(back.eval_ms, 40);
	EXPECT_EQ(back.checkpoints, cfg->checkpoints);

	// --pp alone keeps the flat step; any layout flag makes a framework job.
	EXPECT_FALSE(parse({"--ranks", "8", "--pp", "2"})->framework);
	EXPECT_TRUE(parse({"--ranks", "8", "--pp", "2", "--accum", "1"})->framework);
	EXPECT_TRUE(parse({"--ranks", "8", "--tp", "1"})->framework);
	// Jitter and pauses go with the flat step too.
	auto flat = parse({"--ranks", "2", "--jitter", "10", "--eval-every", "1:5"});
	EXPECT_FALSE(flat->framework);
	EXPECT_DOUBLE_EQ(flat->jitter_pct, 10);
}

TEST(SimLayoutTest, BadValuesAreOneLineUsageErrors)
{
	const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
		{{"--ranks", "8", "--tp", "3"}, "--tp 3 x --pp 1 does not divide --ranks 8"},
		{{"--ranks", "8", "--tp", "2", "--pp", "8"}, "does not divide --ranks 8"},
		{{"--ranks", "8", "--tp", "0"}, "--tp"},
		{{"--ranks", "8", "--tp", "x"}, "--tp"},
		{{"--ranks", "8", "--ep", "3"}, "--ep: 3 does not divide the data-parallel size 8"},
		{{"--ranks", "8", "--tp", "2", "--ep", "8"}, "--ep: 8 does not divide the data-parallel size 4"},
		{{"--ranks", "8", "--ep", "0"}, "--ep"},
		{{"--ranks", "8", "--accum", "0"}, "--accum"},
		{{"--ranks", "8", "--accum", "2000"}, "--accum"},
		{{"--ranks", "8", "--layers", "0"}, "--layers"},
		{{"--ranks", "8", "--jitter", "101"}, "--jitter"},
		{{"--ranks", "8", "--jitter", "-1"}, "--jitter"},
		{{"--ranks", "8", "--jitter", "lots"}, "--jitter"},
		{{"--ranks", "8", "--eval-every", "5"}, "--eval-every: expected K:MS, got '5'"},
		{{"--ranks", "8", "--eval-every", "0:10"}, "--eval-every: K must be an integer 1..1000000"},
		{{"--ranks", "8", "--eval-every", "5:0"}, "--eval-every: MS must be an integer 1..600000"},
		{{"--ranks", "8", "--eval-every", "5:x"}, "--eval-every: MS"},
		{{"--ranks", "8", "--eval-every", "5:10:1"}, "--eval-every: expected K:MS"},
		{{"--ranks", "8", "--checkpoint", "1:2"}, "--checkpoint: expected RANK:EVERY:MS, got '1:2'"},
		{{"--ranks", "8", "--checkpoint", "8:2:10"}, "--checkpoint: rank 8 is out of range (--ranks 8)"},
		{{"--ranks", "8", "--checkpoint", "-1:2:10"}, "--checkpoint: bad rank '-1'"},
		{{"--ranks", "8", "--checkpoint", "1:0:10"}, "--checkpoint: EVERY must be an integer 1..1000000"},
		{{"--ranks", "8", "--checkpoint", "1:2:700000"}, "--checkpoint: MS must be an integer 1..600000"},
		{{"--ranks", "8", "--checkpoint", "1:2:10", "--checkpoint", "1:3:10"}, "--checkpoint: rank 1 given twice"},
		{{"--ranks", "8", "--tp", "2", "--bubble", "0:5"}, "--bubble: needs --pp N"},
	};
	expect_usage_errors(cases);
}

TEST(SimMemoryFlagsTest, FlagsParse)
{
	auto def = parse({"--ranks", "2"});
	ASSERT_TRUE(def);
	EXPECT_EQ(def->mem_api, MemApi::Classic);
	EXPECT_EQ(def->gpu_mem_mb, kDefaultGpuMemMb);
	EXPECT_TRUE(def->mem_leaks.empty());
	EXPECT_TRUE(def->mem_ooms.empty());
	EXPECT_EQ(plan_for(*def, 0).mem_leak_bytes, 0u);
	EXPECT_EQ(plan_for(*def, 0).mem_oom_step, -1);

	auto cfg = parse({"--ranks", "4", "--steps", "10", "--mem-api", "vmm", "--gpu-mem-mb", "40960", "--mem-leak",
			  "1:64M", "--mem-leak", "3:4096", "--mem-oom", "0:4", "--mem-oom", "2:9"});
	ASSERT_TRUE(cfg);
	EXPECT_EQ(cfg->mem_api, MemApi::Vmm);
	EXPECT_EQ(cfg->gpu_mem_mb, 40960);
	EXPECT_EQ(cfg->mem_leaks, (std::map<int, std::uint64_t>{{1, 64ull << 20}, {3, 4096}}));
	EXPECT_EQ(cfg->mem_ooms, (std::map<int, std::int64_t>{{0, 4}, {2, 9}}));
	EXPECT_EQ(plan_for(*cfg, 1).mem_leak_bytes, 64ull << 20);
	EXPECT_EQ(plan_for(*cfg, 2).mem_oom_step, 9);
	EXPECT_EQ(plan_for(*cfg, 1).mem_oom_step, -1);
	// Through the ranks' JSON and back.
	SimConfig back = config_from_json(to_json(*cfg));
	EXPECT_EQ(back.mem_api, MemApi::Vmm);
	EXPECT_EQ(back.gpu_mem_mb, 40960);
	EXPECT_EQ(back.mem_leaks, cfg->mem_leaks);
	EXPECT_EQ(back.mem_ooms, cfg->mem_ooms);
	EXPECT_EQ(parse({"--mem-api", "async"})->mem_api, MemApi::Async);
	EXPECT_EQ(parse({"--mem-api", "classic"})->mem_api, MemApi::Classic);
	for (MemApi api : {MemApi::Classic, MemApi::Async, MemApi::Vmm})
		EXPECT_EQ(mem_api_from_name(mem_api_name(api)), api);

	EXPECT_EQ(parse_byte_size("0"), 0u);
	EXPECT_EQ(parse_byte_size("123"), 123u);
	EXPECT_EQ(parse_byte_size("2k"), 2048u);
	EXPECT_EQ(parse_byte_size("3M"), 3ull << 20);
	EXPECT_EQ(parse_byte_size("5G"), 5ull << 30);
	for (const char *bad : {"", "M", "1.5G", "12MB", "1T", "-1", " 1", "99999999999999999999",
				"17179869184G"})
		EXPECT_FALSE(parse_byte_size(bad)) << bad;
}

TEST(SimMemoryFlagsTest, BadValuesAreOneLineUsageErrors)
{
	const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
		{{"--mem-api", "cuda"}, "--mem-api"},
		{{"--gpu-mem-mb", "1024"}, "--gpu-mem-mb"},
		{{"--gpu-mem-mb", "lots"}, "--gpu-mem-mb"},
		{{"--ranks", "2", "--mem-leak", "2:1M"}, "--mem-leak: rank 2 is out of range (--ranks 2)"},
		{{"--ranks", "2", "--mem-leak", "1"}, "--mem-leak: expected RANK:VALUE, got '1'"},
		{{"--ranks", "2", "--mem-leak", "1:0"}, "--mem-leak: BYTES must be 1.."},
		{{"--ranks", "2", "--mem-leak", "1:64MB"}, "--mem-leak: BYTES must be 1.."},
		{{"--ranks", "2", "--mem-leak", "1:2048G"}, "--mem-leak: BYTES must be 1.."},
		{{"--ranks", "2", "--mem-leak", "1:1M", "--mem-leak", "1:2M"}, "--mem-leak: rank 1 given twice"},
		{{"--ranks", "2", "--steps", "5", "--mem-oom", "0:5"}, "--mem-oom: step 5 is never reached (--steps 5)"},
		{{"--ranks", "2", "--mem-oom", "0:x"}, "--mem-oom: STEP must be an integer >= 0"},
		{{"--ranks", "2", "--mem-oom", "3:1"}, "--mem-oom: rank 3 is out of range (--ranks 2)"},
		{{"--ranks", "2", "--mem-oom", "0:1", "--mem-oom", "0:2"}, "--mem-oom: rank 0 given twice"},
	};
	expect_usage_errors(cases);
	SimConfig cfg;
	nlohmann::json j = to_json(cfg);
	j["mem_api"] = "cuda";
	EXPECT_THROW(config_from_json(j), std::runtime_error);
}

Layout layout(int world, int tp, int pp, int ep = 1, int accum = 1)
{
	SimConfig cfg;
	cfg.ranks = world;
	cfg.tp = tp;
	cfg.pp = pp;
	cfg.ep = ep;
	cfg.accum = accum;
	cfg.framework = true;
	return layout_of(cfg);
}

TEST(SimLayoutTest, MegatronRankOrder)
{
	const Layout l = layout(16, 2, 2, 2); // dp = 4
	EXPECT_EQ(l.dp, 4);
	// r = stage * 8 + dp_rank * 2 + tp_rank
	const RankPlace p = place_of(l, 13);
	EXPECT_EQ(p.tp_rank, 1);
	EXPECT_EQ(p.dp_rank, 2);
	EXPECT_EQ(p.stage, 1);
	EXPECT_EQ(p.ep_rank, 0);

	Group tp = group_of(l, GroupKind::Tp, 13);
	EXPECT_EQ(tp.members, (std::vector<int>{12, 13}));
	EXPECT_EQ(tp.index, 6);
	EXPECT_EQ(tp.rank, 1);
	Group dp = group_of(l, GroupKind::Dp, 13);
	EXPECT_EQ(dp.members, (std::vector<int>{9, 11, 13, 15}));
	EXPECT_EQ(dp.index, 3);
	EXPECT_EQ(dp.rank, 2);
	Group pp = group_of(l, GroupKind::Pp, 13);
	EXPECT_EQ(pp.members, (std::vector<int>{5, 13}));
	EXPECT_EQ(pp.index, 5);
	EXPECT_EQ(pp.rank, 1);
	Group ep = group_of(l, GroupKind::Ep, 13);
	EXPECT_EQ(ep.members, (std::vector<int>{13, 15})); // consecutive DP ranks 2, 3
	EXPECT_EQ(ep.index, 7);
	EXPECT_EQ(ep.rank, 0);

	// --pp alone: stage(r) = r / (ranks / pp), as the flat job's pp_stage_of.
	SimConfig cfg;
	cfg.ranks = 8;
	cfg.pp = 4;
	const Layout flat = layout_of(cfg);
	for (int r = 0; r < 8; r++)
		EXPECT_EQ(place_of(flat, r).stage, pp_stage_of(cfg, r)) << r;
}

// Every group kind partitions the world; every member agrees on the group (index,
// members) and holds its own place in it.
TEST(SimLayoutTest, GroupsPartitionTheWorld)
{
	for (const Layout &l : {layout(8, 2, 1), layout(8, 1, 2), layout(8, 2, 2), layout(8, 1, 1, 4),
				layout(16, 2, 2, 2), layout(24, 3, 2, 2), layout(1, 1, 1)}) {
		for (GroupKind k : {GroupKind::World, GroupKind::Tp, GroupKind::Dp, GroupKind::Pp, GroupKind::Ep}) {
			SCOPED_TRACE(std::string(group_kind_label(k)) + " tp " + std::to_string(l.tp) + " pp " +
				     std::to_string(l.pp) + " ep " + std::to_string(l.ep));
			std::map<int, std::vector<int>> by_index;
			std::multiset<int> seen;
			for (int r = 0; r < l.world; r++) {
				Group g = group_of(l, k, r);
				ASSERT_LT(static_cast<std::size_t>(g.rank), g.members.size());
				EXPECT_EQ(g.members[static_cast<std::size_t>(g.rank)], r);
				auto [it, fresh] = by_index.emplace(g.index, g.members);
				EXPECT_EQ(it->second, g.members);
				if (fresh)
					seen.insert(g.members.begin(), g.members.end());
			}
			EXPECT_EQ(seen.size(), static_cast<std::size_t>(l.world));
			EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), static_cast<std::size_t>(l.world));
		}
	}
	EXPECT_EQ(comm_kinds(layout(16, 2, 2, 2)),
		  (std::vector<GroupKind>{GroupKind::World, GroupKind::Dp, GroupKind::Tp, GroupKind::Pp, GroupKind::Ep}));
	EXPECT_EQ(comm_kinds(layout(8, 8, 1)), (std::vector<GroupKind>{GroupKind::World, GroupKind::Tp}));
}

std::string describe(const std::vector<PipeAction> &v)
{
	std::string s;
	for (const PipeAction &a : v) {
		if (a.kind == PipeAction::Forward)
			s += "F" + std::to_string(a.micro) + " ";
		else if (a.kind == PipeAction::Backward)
			s += "B" + std::to_string(a.micro) + " ";
		else {
			s += "[";
			for (const PipeP2p &o : a.ops)
				s += std::string(o.send ? "s" : "r") + (o.next ? "n" : "p") + std::to_string(o.micro);
			s += "] ";
		}
	}
	return s;
}

TEST(SimLayoutTest, OneFOneBPerStage)
{
	// 4 stages, 6 micro-batches (Megatron's non-interleaved schedule).
	EXPECT_EQ(describe(schedule_1f1b(4, 0, 6)),
		  "F0 [sn0] F1 [sn1] F2 [sn2] F3 [sn3rn0] B0 F4 [sn4rn1] B1 F5 [sn5rn2] B2 [rn3] B3 [rn4] B4 [rn5] B5 ");
	EXPECT_EQ(describe(schedule_1f1b(4, 3, 6)),
		  "[rp0] F0 B0 [sp0rp1] F1 B1 [sp1rp2] F2 B2 [sp2rp3] F3 B3 [sp3rp4] F4 B4 [sp4rp5] F5 B5 [sp5] ");
	EXPECT_EQ(describe(schedule_1f1b(4, 1, 6)),
		  "[rp0] F0 [sn0] [rp1] F1 [sn1] [rp2] F2 [sn2rn0] B0 [sp0rp3] F3 [sn3rn1] B1 [sp1rp4] F4 [sn4rn2] B2 "
		  "[sp2rp5] F5 [sn5rn3] B3 [sp3] [rn4] B4 [sp4] [rn5] B5 [sp5] ");
	// Fewer micro-batches than the warm-up wants: all forwards first.
	EXPECT_EQ(describe(schedule_1f1b(4, 0, 2)), "F0 [sn0] F1 [sn1] [rn0] B0 [rn1] B1 ");
	// No pipeline: forward and backward alternate, no exchange.
	EXPECT_EQ(describe(schedule_1f1b(1, 0, 3)), "F0 B0 F1 B1 F2 B2 ");
	for (int pp : {1, 2, 3, 4, 8})
		for (int k : {1, 2, 3, 4, 7, 16})
			for (int s = 0; s < pp; s++) {
				int f = 0, b = 0;
				for (const PipeAction &a : schedule_1f1b(pp, s, k)) {
					if (a.kind == PipeAction::Forward) {
						EXPECT_EQ(a.micro, f++);
					}
					if (a.kind == PipeAction::Backward) {
						EXPECT_EQ(a.micro, b++);
						EXPECT_LT(a.micro, f); // a backward after its forward
					}
				}
				EXPECT_EQ(f, k);
				EXPECT_EQ(b, k);
			}
}

// The stages' exchanges under NCCL's rules as the shim keeps them: a stage runs its
// actions in order; a group posts all its operations, then completes once every
// one has met the peer's matching one (the n-th send a->b with the n-th receive
// b<-a). Every schedule must run to its end, and each message must carry the
// same micro-batch on both sides.
TEST(SimLayoutTest, OneFOneBNeverDeadlocksUnderPairwiseMatching)
{
	for (int pp : {2, 3, 4, 5, 8})
		for (int k : {1, 2, 3, 4, 6, 9}) {
			SCOPED_TRACE("pp " + std::to_string(pp) + " accum " + std::to_string(k));
			std::vector<std::vector<PipeAction>> sched;
			for (int s = 0; s < pp; s++)
				sched.push_back(schedule_1f1b(pp, s, k));
			std::vector<std::size_t> pc(static_cast<std::size_t>(pp), 0);
			std::vector<bool> posted(static_cast<std::size_t>(pp), false);
			// Per directed pair (from, to): micro-batches of the sends posted, and
			// how many receives the receiver posted.
			std::map<std::pair<int, int>, std::vector<int>> sends, recvs;
			for (bool moved = true; moved;) {
				moved = false;
				for (int s = 0; s < pp; s++) {
					auto &p = pc[static_cast<std::size_t>(s)];
					auto &v = sched[static_cast<std::size_t>(s)];
					if (p >= v.size())
						continue;
					const PipeAction &a = v[p];
					if (a.kind != PipeAction::Exchange) {
						p++;
						moved = true;
						continue;
					}
					if (!posted[static_cast<std::size_t>(s)]) {
						for (const PipeP2p &o : a.ops) {
							const int peer = o.next ? s + 1 : s - 1;
							if (o.send)
								sends[{s, peer}].push_back(o.micro);
							else
								recvs[{peer, s}].push_back(o.micro);
						}
						posted[static_cast<std::size_t>(s)] = true;
					}
					// Complete when every operation's counterpart is there.
					bool done = true;
					for (const PipeP2p &o : a.ops) {
						const int peer = o.next ? s + 1 : s - 1;
						const auto key = o.send ? std::make_pair(s, peer) : std::make_pair(peer, s);
						const auto &mine = o.send ? sends[key] : recvs[key];
						const auto &theirs = o.send ? recvs[key] : sends[key];
						// Its message number on the pair (a micro-batch crosses a pair once a direction).
						auto it = std::find(mine.begin(), mine.end(), o.micro);
						ASSERT_NE(it, mine.end());
						const std::size_t n = static_cast<std::size_t>(it - mine.begin()) + 1;
						if (theirs.size() < n)
							done = false;
						else
							EXPECT_EQ(theirs[n - 1], o.micro);
					}
					if (done) {
						p++;
						posted[static_cast<std::size_t>(s)] = false;
						moved = true;
					}
				}
			}
			for (int s = 0; s < pp; s++)
				EXPECT_EQ(pc[static_cast<std::size_t>(s)], sched[static_cast<std::size_t>(s)].size())
					<< "stage " << s << " stuck";
		}
}

TEST(SimLayoutTest, MoeTokenCountsAreUnevenAndChangeEveryStep)
{
	std::set<int> counts;
	for (int dst = 0; dst < 8; dst++) {
		const int t = moe_tokens(5, 1, 2, 0, dst);
		EXPECT_GE(t, kMoeMinTokens);
		EXPECT_LT(t, kMoeMinTokens + kMoeTokenSpread);
		EXPECT_EQ(t, moe_tokens(5, 1, 2, 0, dst)); // deterministic
		counts.insert(t);
	}
	EXPECT_GT(counts.size(), 4u); // uneven across experts
	int changed = 0;
	for (int step = 0; step < 10; step++)
		changed += moe_tokens(step, 0, 0, 0, 1) != moe_tokens(step + 1, 0, 0, 0, 1) ? 1 : 0;
	EXPECT_GE(changed, 8);
	EXPECT_NE(moe_tokens(0, 0, 0, 0, 1), moe_tokens(0, 0, 0, 1, 0)); // a direction's own count
}

TEST(SimLayoutTest, JitterFactorsSpanTheRangeAndAreReproducible)
{
	EXPECT_EQ(jitter_factor(0, 3, 7), 1.0);
	double lo = 2, hi = 0, sum = 0;
	for (int step = 0; step < 2000; step++) {
		const double f = jitter_factor(30, 1, step);
		EXPECT_GE(f, 0.7);
		EXPECT_LE(f, 1.3);
		lo = std::min(lo, f);
		hi = std::max(hi, f);
		sum += f;
	}
	EXPECT_LT(lo, 0.72);
	EXPECT_GT(hi, 1.28);
	EXPECT_NEAR(sum / 2000, 1.0, 0.02);
	EXPECT_EQ(jitter_factor(30, 1, 5), jitter_factor(30, 1, 5));
	EXPECT_NE(jitter_factor(30, 1, 5), jitter_factor(30, 2, 5)); // independent per rank
}

} // namespace
