// argus-sim's framework jobs (--tp, --ep, --pp with --accum; sim/layout.h) run
// for real, in both NCCL modes: every rank completes, each communicator's
// truth matches the layout and the call formulas of sim/workload.h, and no
// shared-memory segment of the job is left behind, also after a hang or a
// killed rank.
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/layout.h"
#include "sim/sim_config.h"
#include "tests/unit/sim_test_util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace argus::simtest;
using namespace argus::sim;

constexpr int kSteps = 3;

json truth_of(const fs::path &out, int r)
{
	return json::parse(slurp(out / ("rank-" + std::to_string(r) + ".json")));
}

// No /dev/shm segment of the job (job.json's shm_prefix) is left.
void expect_no_segments(const fs::path &out)
{
	const json job = json::parse(slurp(out / "job.json"));
	const std::string prefix = job["shm_prefix"].get<std::string>().substr(1);
	ASSERT_EQ(prefix.rfind("argus-sim-", 0), 0u);
	for (const auto &e : fs::directory_iterator("/dev/shm"))
		EXPECT_NE(e.path().filename().string().rfind(prefix, 0), 0u) << e.path() << " leaked";
}

SimConfig config_of(const std::vector<std::string> &flags)
{
	SimConfig cfg;
	for (std::size_t i = 0; i + 1 < flags.size(); i += 2) {
		const int v = std::stoi(flags[i + 1]);
		if (flags[i] == "--ranks")
			cfg.ranks = v;
		else if (flags[i] == "--tp")
			cfg.tp = v;
		else if (flags[i] == "--pp")
			cfg.pp = v;
		else if (flags[i] == "--ep")
			cfg.ep = v;
		else if (flags[i] == "--accum")
			cfg.accum = v;
	}
	cfg.framework = true;
	return cfg;
}

// Sends (or receives) of one step of a stage's 1F1B schedule.
int pipeline_ops(const Layout &l, int stage, bool send)
{
	int n = 0;
	for (const PipeAction &a : schedule_1f1b(l.pp, stage, l.accum))
		for (const PipeP2p &o : a.ops)
			n += o.send == send ? 1 : 0;
	return n;
}

void check_run(const std::vector<std::string> &layout_flags, const std::string &mode)
{
	std::string joined;
	for (const auto &a : layout_flags)
		joined += a + " ";
	SCOPED_TRACE(joined + "--nccl-mode " + mode);
	TempDir dir;
	const fs::path out = dir.path / "truth";
	std::vector<std::string> args = layout_flags;
	for (const char *a : {"--steps", "3", "--step-ms", "20", "--init-ms", "0", "--jitter", "30", "--quiet",
			      "--nccl-mode"})
		args.push_back(a);
	args.push_back(mode);
	args.push_back("--out");
	args.push_back(out.string());
	ASSERT_EQ(run_sim(args, dir.path, {}, std::chrono::seconds(60)), 0) << slurp(dir.path / "stderr.txt");
	expect_no_segments(out);

	const SimConfig cfg = config_of(layout_flags);
	const Layout l = layout_of(cfg);
	const std::string world_id = truth_of(out, 0)["communicators"][0]["id"];
	std::map<std::string, std::string> id_of_group; // kind/index -> id
	std::set<std::string> ids;
	for (int r = 0; r < cfg.ranks; r++) {
		SCOPED_TRACE("rank " + std::to_string(r));
		const json t = truth_of(out, r);
		const RankPlace p = place_of(l, r);
		EXPECT_EQ(t["status"], "completed");
		EXPECT_EQ(t["steps_completed"], kSteps);
		EXPECT_EQ(t["nccl_mode"], mode);
		EXPECT_EQ(t["layout"], json({{"tp", l.tp}, {"pp", l.pp}, {"dp", l.dp}, {"ep", l.ep}, {"accum", l.accum},
					     {"layers", l.layers}, {"stage", p.stage}, {"tp_rank", p.tp_rank},
					     {"dp_rank", p.dp_rank}, {"ep_rank", p.ep_rank}}));
		EXPECT_EQ(t["nccl_init"], 1 + (l.dp > 1) + (l.pp > 1));
		EXPECT_EQ(t["nccl_split"], (l.tp > 1) + (l.ep > 1));
		EXPECT_TRUE(t["nccl_errors"].empty()) << t["nccl_errors"];
		// --jitter: the factors of layout.h, per rank and step.
		ASSERT_EQ(t["jitter"]["factors"].size(), static_cast<std::size_t>(kSteps));
		for (int s = 0; s < kSteps; s++)
			EXPECT_DOUBLE_EQ(t["jitter"]["factors"][s][1].get<double>(), jitter_factor(30, r, s));

		const std::vector<GroupKind> kinds = comm_kinds(l);
		ASSERT_EQ(t["communicators"].size(), kinds.size());
		for (std::size_t i = 0; i < kinds.size(); i++) {
			const json &c = t["communicators"][i];
			const Group g = group_of(l, kinds[i], r);
			SCOPED_TRACE(c["kind"].get<std::string>());
			EXPECT_EQ(c["kind"], std::string(group_kind_label(g.kind)));
			EXPECT_EQ(c["index"], g.index);
			EXPECT_EQ(c["rank"], g.rank);
			EXPECT_EQ(c["nranks"], g.members.size());
			EXPECT_EQ(c["members"], json(g.members));
			const bool split = g.kind == GroupKind::Tp || g.kind == GroupKind::Ep;
			EXPECT_EQ(c["made"], split ? "split" : "init_rank");
			// The job's ids share the world's first 4 bytes; a group's is the same on every member.
			const std::string id = c["id"];
			ASSERT_EQ(id.size(), 32u);
			EXPECT_EQ(id.substr(0, 8), world_id.substr(0, 8));
			auto [it, fresh] = id_of_group.emplace(c["kind"].get<std::string>() + "/" +
								       std::to_string(g.index),
							       id);
			EXPECT_EQ(it->second, id);
			if (fresh) {
				EXPECT_TRUE(ids.insert(id).second) << "two groups share id " << id;
			}
			// Collectives per step: TP 4 per layer and micro-batch, DP one, none elsewhere.
			std::size_t colls = 0;
			if (g.kind == GroupKind::Tp)
				colls = static_cast<std::size_t>(kSteps * 4 * l.layers * l.accum);
			if (g.kind == GroupKind::Dp)
				colls = kSteps;
			ASSERT_EQ(c["collectives"].size(), colls);
			for (std::size_t k = 0; k < colls; k++) {
				const json &e = c["collectives"][k];
				EXPECT_EQ(e[0], k + 1);
				EXPECT_GT(e[2].get<std::int64_t>(), 0) << "never resolved";
				EXPECT_GE(e[3].get<std::int64_t>(), e[2].get<std::int64_t>());
			}
		}

		// Point-to-point: the pipeline's and the MoE all-to-alls', peers and bytes.
		std::map<std::string, int> sends, recvs;
		std::uint64_t ep_send_bytes = 0;
		for (const json &o : t["p2p"]) {
			const std::string comm = o["comm"];
			const int peer = o["peer"];
			(o["op"] == "send" ? sends : recvs)[comm]++;
			EXPECT_GT(o["gpu_start_ns"].get<std::int64_t>(), 0);
			EXPECT_GE(o["gpu_end_ns"].get<std::int64_t>(), o["gpu_start_ns"].get<std::int64_t>());
			if (comm == "pp") {
				EXPECT_EQ(o["bytes"], 2 * (1u << 16));
				EXPECT_EQ(std::abs(place_of(l, peer).stage - p.stage), 1);
				EXPECT_EQ(peer % (l.tp * l.dp), r % (l.tp * l.dp));
			} else {
				ASSERT_EQ(comm, "ep");
				EXPECT_NE(peer, r);
				const auto m = group_of(l, GroupKind::Ep, r).members;
				EXPECT_NE(std::find(m.begin(), m.end(), peer), m.end());
				if (o["op"] == "send")
					ep_send_bytes += o["bytes"].get<std::uint64_t>();
			}
		}
		EXPECT_EQ(sends["pp"], kSteps * pipeline_ops(l, p.stage, true));
		EXPECT_EQ(recvs["pp"], kSteps * pipeline_ops(l, p.stage, false));
		const int a2a = kSteps * l.accum * l.layers * 4 * (l.ep - 1);
		EXPECT_EQ(sends["ep"], a2a);
		EXPECT_EQ(recvs["ep"], a2a);
		if (l.ep > 1) {
			// Dispatch and backward's combine send t(me, j); combine and backward's dispatch t(j, me).
			std::uint64_t want = 0;
			for (int s = 0; s < kSteps; s++)
				for (int m = 0; m < l.accum; m++)
					for (int layer = p.stage * l.layers; layer < (p.stage + 1) * l.layers; layer++)
						for (int j = 0; j < l.ep; j++)
							if (j != p.ep_rank)
								want += 2 * 2 * kMoeHidden *
									static_cast<std::uint64_t>(moe_tokens(s, m, layer, p.ep_rank, j) +
												   moe_tokens(s, m, layer, j, p.ep_rank));
			EXPECT_EQ(ep_send_bytes, want);
		}
		const int send_calls = t["nccl"].contains("send") ? t["nccl"]["send"]["calls"].get<int>() : 0;
		EXPECT_EQ(send_calls, sends["pp"] + sends["ep"]);
		EXPECT_EQ(t["nccl_group"]["start"], t["nccl_group"]["end"]);
	}
}

TEST(SimFrameworkTest, LayoutsCompleteWithTheirCommunicatorsInBothModes)
{
	const std::vector<std::vector<std::string>> layouts = {
		{"--ranks", "8", "--tp", "2"},
		{"--ranks", "8", "--pp", "2", "--accum", "4"},
		{"--ranks", "8", "--tp", "2", "--pp", "2"},
		{"--ranks", "8", "--ep", "4"},
		{"--ranks", "8", "--tp", "2", "--pp", "2", "--ep", "2", "--accum", "3"},
	};
	for (const auto &l : layouts)
		for (const char *mode : {"async", "blocking"})
			check_run(l, mode);
}

// --eval-every and --checkpoint, in a framework job and a flat one: the pauses
// recorded with their times, and the job still completes.
TEST(SimFrameworkTest, PausesAreRecorded)
{
	for (bool framework : {true, false}) {
		SCOPED_TRACE(framework ? "framework" : "flat");
		TempDir dir;
		const fs::path out = dir.path / "truth";
		std::vector<std::string> args = {"--ranks", "4", "--steps", "4", "--step-ms", "10", "--init-ms", "0",
						 "--eval-every", "2:30", "--checkpoint", "1:2:50", "--quiet", "--out",
						 out.string()};
		if (framework)
			for (const char *a : {"--tp", "2"})
				args.push_back(a);
		ASSERT_EQ(run_sim(args, dir.path), 0) << slurp(dir.path / "stderr.txt");
		expect_no_segments(out);
		for (int r = 0; r < 4; r++) {
			SCOPED_TRACE("rank " + std::to_string(r));
			const json t = truth_of(out, r);
			EXPECT_EQ(t["status"], "completed");
			std::vector<std::pair<std::string, int>> want = {{"eval", 1}, {"eval", 3}};
			if (r == 1)
				want = {{"eval", 1}, {"checkpoint", 1}, {"eval", 3}, {"checkpoint", 3}};
			ASSERT_EQ(t["pauses"].size(), want.size()) << t["pauses"];
			for (std::size_t i = 0; i < want.size(); i++) {
				const json &p = t["pauses"][i];
				EXPECT_EQ(p["kind"], want[i].first);
				EXPECT_EQ(p["step"], want[i].second);
				const double ms = want[i].first == "eval" ? 30 : 50;
				EXPECT_EQ(p["ms"], ms);
				EXPECT_GE(p["end"].get<double>() - p["start"].get<double>(), ms / 1000 - 0.001);
				EXPECT_GT(p["start"].get<double>(), 1.6e9); // unix seconds
			}
		}
	}
}

// A rank that hangs in a pipeline: its peers block (a receive never gets its
// send), the launcher stops the job at --hang-timeout, nothing is left behind.
TEST(SimFrameworkTest, HangInAPipelineIsStoppedWithoutLeaks)
{
	for (const char *mode : {"async", "blocking"}) {
		SCOPED_TRACE(mode);
		TempDir dir;
		const fs::path out = dir.path / "truth";
		ASSERT_EQ(run_sim({"--ranks", "8", "--tp", "2", "--pp", "2", "--accum", "4", "--steps", "50", "--step-ms",
				   "20", "--init-ms", "0", "--hang", "2:2", "--hang-timeout", "1", "--nccl-mode", mode,
				   "--quiet", "--out", out.string()},
				  dir.path),
			  124)
			<< slurp(dir.path / "stderr.txt");
		expect_no_segments(out);
		for (int r = 0; r < 8; r++) {
			const json t = truth_of(out, r);
			EXPECT_EQ(t["status"], r == 2 ? "hung" : "stopped") << r;
			EXPECT_LE(t["steps_completed"].get<int>(), 3) << r;
		}
		EXPECT_EQ(truth_of(out, 2)["steps_completed"], 2);
	}
}

// A killed rank: the launcher aborts every communicator of the job (its peers
// wait in the TP, DP and PP ones), and unlinks them all.
TEST(SimFrameworkTest, KilledRankAbortsEveryCommunicator)
{
	TempDir dir;
	const fs::path out = dir.path / "truth";
	SimProcess p;
	ASSERT_TRUE(p.start({"--ranks", "8", "--tp", "2", "--pp", "2", "--ep", "2", "--steps", "0", "--step-ms", "20",
			     "--init-ms", "0", "--quiet", "--out", out.string()},
			    dir.path, {"ARGUS_SIM_GPU_ASSUME_LISTENING=1"}));
	for (int i = 0; i < 500 && !fs::exists(out / "job.json"); i++)
		std::this_thread::sleep_for(std::chrono::milliseconds(10));
	std::this_thread::sleep_for(std::chrono::milliseconds(500));
	const json job = json::parse(slurp(out / "job.json"));
	kill(job["ranks"][5]["pid"].get<int>(), SIGKILL);
	EXPECT_EQ(p.wait(std::chrono::seconds(20)), 1) << slurp(p.err);
	expect_no_segments(out);
	for (int r = 0; r < 8; r++) {
		if (r != 5) {
			EXPECT_EQ(truth_of(out, r)["status"], "aborted") << r;
		}
	}
}

// The new flags in --help, and a bad value of each: exit 2 with one line.
TEST(SimFrameworkTest, HelpAndBadFlagsThroughTheBinary)
{
	TempDir dir;
	ASSERT_EQ(run_sim({"--help"}, dir.path), 0);
	const std::string help = slurp(dir.path / "stdout.txt");
	for (const char *flag : {"--tp", "--ep", "--pp", "--accum", "--layers", "--jitter", "--eval-every", "--checkpoint"})
		EXPECT_NE(help.find(flag), std::string::npos) << flag;
	for (const std::vector<std::string> &args :
	     {std::vector<std::string>{"--ranks", "6", "--tp", "4"}, {"--ranks", "8", "--ep", "3"},
	      {"--ranks", "8", "--accum", "0"}, {"--ranks", "8", "--jitter", "200"}, {"--ranks", "8", "--eval-every", "x"},
	      {"--ranks", "8", "--checkpoint", "9:1:1"}}) {
		TempDir d;
		EXPECT_EQ(run_sim(args, d.path), 2) << args[2];
		const auto err = lines_of(slurp(d.path / "stderr.txt"));
		ASSERT_EQ(err.size(), 1u) << slurp(d.path / "stderr.txt");
		EXPECT_EQ(err[0].rfind("argus-sim: error: ", 0), 0u) << err[0];
	}
}

} // namespace
