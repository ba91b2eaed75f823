#include "launcher.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ib_fixture.h"
#include "job_segments.h"
#include "sim_gpu.h"
#include "sim_shm.h"
#include "truth.h"

extern char **environ;

namespace argus::sim {
namespace {

namespace fs = std::filesystem;

constexpr long long kStopGraceNs = 5'000'000'000LL; // SIGTERM -> SIGKILL
constexpr int kInjectedExitStatus = 1;  // a rank's --exit or out-of-memory (worker.h kWorkerInjectedExit)
constexpr int kHangTimeoutStatus = 124; // the launcher stopped the job at --hang-timeout

long long now_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::string self_exe()
{
	std::error_code ec;
	fs::path p = fs::read_symlink("/proc/self/exe", ec);
	if (ec)
		throw UsageError("cannot resolve /proc/self/exe: " + ec.message());
	fs::path c = fs::canonical(p, ec);
	return ec ? p.string() : c.string();
}

// A library path as the ranks will get it: absolute, checked to exist.
std::string resolve_lib(const std::string &flag, const std::string &given, const fs::path &fallback)
{
	fs::path p = given.empty() ? fallback : fs::path(given);
	std::error_code ec;
	p = fs::absolute(p, ec).lexically_normal();
	if (!fs::is_regular_file(p, ec))
		throw UsageError(flag + ": " + p.string() + ": no such file");
	return p.string();
}

void random_bytes(unsigned char *buf, std::size_t n)
{
	std::size_t got = 0;
	while (got < n) {
		ssize_t r = getrandom(buf + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		got += static_cast<std::size_t>(r);
	}
	// Without an entropy source, mix time and pid (ids only need to differ).
	unsigned long long x = static_cast<unsigned long long>(now_ns()) ^
			       (static_cast<unsigned long long>(getpid()) << 32);
	for (std::size_t i = got; i < n; i++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		buf[i] = static_cast<unsigned char>(x >> 56);
	}
}

std::string to_hex(const unsigned char *b, std::size_t n)
{
	static const char digits[] = "0123456789abcdef";
	std::string s;
	s.reserve(2 * n);
	for (std::size_t i = 0; i < n; i++) {
		s.push_back(digits[b[i] >> 4]);
		s.push_back(digits[b[i] & 0xf]);
	}
	return s;
}

struct RankProc {
	int rank = 0;
	int local_rank = 0;
	pid_t pid = -1;
	bool alive = false;
	bool hung = false; // told us (SIGUSR1) that its --hang fired
	int status = 0;
};

// The environment a real launcher (torchrun) gives rank `rank`, on top of ours.
std::vector<std::string> rank_env(const SimConfig &cfg, int rank, int local_rank,
				  const std::string &id_hex, const std::string &cfg_json)
{
	const std::vector<std::pair<std::string, std::string>> ours = {
		{"RANK", std::to_string(rank)},
		{"LOCAL_RANK", std::to_string(local_rank)},
		{"WORLD_SIZE", std::to_string(cfg.ranks)},
		{"LOCAL_WORLD_SIZE", std::to_string(local_world_size_of(cfg, node_of(cfg, rank)))},
		{"GROUP_RANK", std::to_string(node_of(cfg, rank))},
		{"GROUP_WORLD_SIZE", std::to_string(cfg.nodes)},
		{kNodeEnv, node_name(node_of(cfg, rank))},
		{kLauncherPidEnv, std::to_string(getpid())},
		{"ROLE_RANK", std::to_string(rank)},
		{"ROLE_WORLD_SIZE", std::to_string(cfg.ranks)},
		{"ROLE_NAME", "default"},
		{"MASTER_ADDR", "127.0.0.1"},
		{"MASTER_PORT", std::to_string(cfg.master_port)},
		{"TORCHELASTIC_RUN_ID", cfg.job_id},
		{"TORCHELASTIC_RESTART_COUNT", "0"},
		{"TORCHELASTIC_MAX_RESTARTS", "0"},
		{kNcclIdEnv, id_hex},
		{kWorkerConfigEnv, cfg_json},
		// --pp/--bubble: the delay of this rank's eager receives on the emulated GPU
		// (always set, so that an inherited value never skews a run).
		{ARGUS_SIM_PP_RECV_DELAY_ENV, std::to_string(pp_recv_delay_us(cfg, rank))},
		// --nccl-mode: what the NCCL shim emulates (always set, for the same reason).
		{ARGUS_SIM_NCCL_MODE_ENV, cfg.nccl_async ? "async" : "blocking"},
		// --gpu-fold (always set, for the same reason).
		{ARGUS_SIM_GPU_FOLD_ENV, cfg.gpu_fold ? "1" : "0"},
		// --gpu-mem-mb: the emulated GPU's capacity (always set, for the same reason).
		{ARGUS_SIM_GPU_MEM_MB_ENV, std::to_string(cfg.gpu_mem_mb)},
	};
	std::vector<std::string> env;
	for (char **e = environ; e && *e; e++) {
		std::string_view kv(*e);
		auto eq = kv.find('=');
		std::string_view key = kv.substr(0, eq);
		bool overridden = false;
		for (const auto &[k, v] : ours)
			overridden = overridden || key == k;
		if (!overridden)
			env.emplace_back(kv);
	}
	for (const auto &[k, v] : ours)
		env.push_back(k + "=" + v);
	return env;
}

std::string describe_status(int st)
{
	if (WIFEXITED(st))
		return "exited with status " + std::to_string(WEXITSTATUS(st));
	if (WIFSIGNALED(st))
		return std::string("was killed by signal ") + std::to_string(WTERMSIG(st)) + " (" +
		       strsignal(WTERMSIG(st)) + ")";
	return "ended with wait status " + std::to_string(st);
}

class Launcher {
public:
	explicit Launcher(SimConfig cfg) : cfg_(std::move(cfg)) {}
	int run();

private:
	void say(const std::string &line) const
	{
		if (!cfg_.quiet) {
			std::fprintf(stdout, "argus-sim: %s\n", line.c_str());
			std::fflush(stdout);
		}
	}
	static void warn(const std::string &line)
	{
		std::fprintf(stderr, "argus-sim: %s\n", line.c_str());
	}
	void create_comm_segment();
	bool spawn(RankProc &p, const std::string &id_hex, const std::string &cfg_json,
		   const sigset_t &child_mask);
	void write_job_json();
	void signal_alive(int sig);
	// A rank that exits with status 1 out of memory (--mem-oom, --mem-leak) ended as
	// planned, as an --exit rank does; planned_exit says how, for the log.
	bool may_run_out_of_memory(int rank) const
	{
		return cfg_.mem_ooms.count(rank) || cfg_.mem_leaks.count(rank);
	}
	std::string planned_exit(int rank) const
	{
		if (auto it = cfg_.exits.find(rank); it != cfg_.exits.end())
			return "exited at step " + std::to_string(it->second) + " (--exit)";
		if (auto it = cfg_.mem_ooms.find(rank); it != cfg_.mem_ooms.end())
			return "ran out of GPU memory by step " + std::to_string(it->second) + " (--mem-oom)";
		return "ran out of GPU memory (--mem-leak)";
	}
	int supervise();
	void setup_ib_fixture();
	void start_ib_runner();
	int run_ib_only();

	SimConfig cfg_;
	std::string exe_;
	unsigned char id_[ARGUS_SIM_UNIQUE_ID_BYTES] = {};
	char shm_name_[ARGUS_SIM_SHM_NAME_MAX] = {};
	argus_sim_shm *shm_ = nullptr;
	std::vector<RankProc> procs_;
	sigset_t handled_{};
	// --ib-fixture: the tree, the thread that evolves it, node-0's ranks' traffic.
	std::unique_ptr<IbFixture> ib_;
	std::unique_ptr<IbFixtureRunner> ib_runner_;
	std::vector<CollectiveBytes> ib_bytes_;
};

void Launcher::setup_ib_fixture()
{
	if (cfg_.ib_fixture.empty())
		return;
	std::vector<DegradeSpec> specs;
	for (const auto &d : cfg_.degrade) {
		std::string err;
		auto spec = parse_degrade(d, err);
		if (!spec)
			throw UsageError(err);
		specs.push_back(*spec);
	}
	std::error_code ec;
	const std::string dir = fs::absolute(cfg_.ib_fixture, ec).lexically_normal().string();
	try {
		ib_ = std::make_unique<IbFixture>(dir, IbLayout::standard(), specs);
		ib_->lay_out();
	} catch (const std::exception &e) {
		throw UsageError(e.what());
	}
	// The fixture is node-0's: its ranks, by local rank (= GPU index).
	const int local = local_world_size_of(cfg_, 0);
	for (int l = 0; l < local; l++)
		ib_bytes_.emplace_back(l, cfg_.ranks);
	say("job " + cfg_.job_id + ": InfiniBand fixture in " + dir + " (" + std::to_string(specs.size()) +
	    " fault(s) to inject)");
}

void Launcher::start_ib_runner()
{
	if (!ib_)
		return;
	ib_runner_ = std::make_unique<IbFixtureRunner>(*ib_, [this] {
		std::vector<std::uint64_t> bytes(ib_bytes_.size(), 0);
		for (std::size_t l = 0; l < ib_bytes_.size() && l < static_cast<std::size_t>(cfg_.ranks); l++) {
			const std::uint64_t colls =
				shm_ ? __atomic_load_n(&shm_->rank_colls[l], __ATOMIC_RELAXED) : 0;
			bytes[l] = ib_bytes_[l].after(colls);
		}
		return bytes;
	});
	ib_runner_->start();
}

// --ib-only: no ranks; the traffic of cfg_.ranks ranks stepping every step_ms.
int Launcher::run_ib_only()
{
	sigset_t mask, old_mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGHUP);
	sigprocmask(SIG_BLOCK, &mask, &old_mask);
	const long long start = now_ns();
	auto steps_done = [&] {
		std::int64_t steps = cfg_.step_ms > 0 ? (now_ns() - start) / (cfg_.step_ms * 1000000LL)
						       : cfg_.steps;
		if (cfg_.steps > 0 && steps > cfg_.steps)
			steps = cfg_.steps;
		return steps;
	};
	ib_runner_ = std::make_unique<IbFixtureRunner>(*ib_, [&] {
		const std::int64_t steps = steps_done();
		std::vector<std::uint64_t> bytes(ib_bytes_.size(), 0);
		for (std::size_t l = 0; l < ib_bytes_.size(); l++)
			bytes[l] = ib_bytes_[l].after_steps(steps);
		return bytes;
	});
	ib_runner_->start();
	while (true) {
		if (cfg_.steps > 0 && steps_done() >= cfg_.steps)
			break;
		timespec slice{0, 100'000'000L};
		siginfo_t info{};
		int sig = sigtimedwait(&mask, &info, &slice);
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
			say("job " + cfg_.job_id + ": stopping (" + strsignal(sig) + ")");
			break;
		}
	}
	ib_runner_->stop();
	ib_runner_.reset();
	sigprocmask(SIG_SETMASK, &old_mask, nullptr);
	say("job " + cfg_.job_id + ": InfiniBand fixture done (--ib-only)");
	return 0;
}

void Launcher::create_comm_segment()
{
	for (int attempt = 0; attempt < 8; attempt++) {
		random_bytes(id_, sizeof id_);
		argus_sim_shm_name(id_, shm_name_);
		int created = 0;
		shm_ = argus_sim_shm_open(shm_name_, static_cast<uint32_t>(cfg_.ranks), 1, &created,
					  1000000000L);
		if (shm_ && created)
			return;
		argus_sim_shm_close(shm_); // an unlikely name clash: not ours, try another id
		shm_ = nullptr;
	}
	throw std::runtime_error(std::string("cannot create shared memory for the communicator: ") +
				 std::strerror(errno));
}

bool Launcher::spawn(RankProc &p, const std::string &id_hex, const std::string &cfg_json,
		     const sigset_t &child_mask)
{
	std::vector<std::string> env = rank_env(cfg_, p.rank, p.local_rank, id_hex, cfg_json);
	std::vector<char *> envp;
	for (auto &s : env)
		envp.push_back(s.data());
	envp.push_back(nullptr);
	std::string arg0 = "argus-sim", arg1 = kWorkerFlag;
	char *argv[] = {arg0.data(), arg1.data(), nullptr};
	const pid_t parent = getpid();

	pid_t pid = fork();
	if (pid < 0)
		return false;
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, &child_mask, nullptr);
		// Ranks stop if the launcher dies without cleaning up.
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			_exit(1);
		execve(exe_.c_str(), argv, envp.data());
		std::fprintf(stderr, "argus-sim: cannot exec %s: %s\n", exe_.c_str(), std::strerror(errno));
		_exit(127);
	}
	p.pid = pid;
	p.alive = true;
	return true;
}

void Launcher::write_job_json()
{
	if (cfg_.out_dir.empty())
		return;
	nlohmann::json ranks = nlohmann::json::array();
	for (const auto &p : procs_)
		ranks.push_back({{"rank", p.rank},
				 {"local_rank", p.local_rank},
				 {"node", node_name(node_of(cfg_, p.rank))},
				 {"pid", p.pid}});
	nlohmann::json j = {
		{"job_id", cfg_.job_id},
		{"world_size", cfg_.ranks},
		{"nodes", cfg_.nodes},
		{"launcher_pid", static_cast<int>(getpid())},
		{"nccl_lib", cfg_.nccl_lib},
		{"cuda_lib", cfg_.cuda_lib},
		{"shm", shm_name_},
		// Every segment of the job starts so (the communicators the ranks derive).
		{"shm_prefix", std::string(shm_name_, std::strlen(ARGUS_SIM_SHM_PREFIX) + 2 * ARGUS_SIM_JOB_ID_BYTES)},
		{"master_port", cfg_.master_port},
		{"steps", cfg_.steps},
		{"step_ms", cfg_.step_ms},
		{"ranks", ranks},
	};
	std::string path = cfg_.out_dir + "/job.json";
	if (!write_json_atomic(path, j))
		warn("cannot write " + path + ": " + std::strerror(errno));
}

void Launcher::signal_alive(int sig)
{
	for (const auto &p : procs_)
		if (p.alive)
			kill(p.pid, sig);
}

int Launcher::supervise()
{
	bool all_ok = true;
	bool stopping = false;
	bool aborted = false;
	bool killed = false;
	bool hang_timed_out = false;
	long long kill_at = 0;
	// --hang/--exit: when the first one fired (the peers block from then on, as
	// with NCCL: the job only ends by a signal or --hang-timeout).
	long long fault_at = 0;
	std::size_t alive = 0;
	for (const auto &p : procs_)
		alive += p.alive ? 1 : 0;
	auto begin_stop = [&](const std::string &why) {
		stopping = true;
		kill_at = now_ns() + kStopGraceNs;
		say("job " + cfg_.job_id + ": stopping (" + why + ")");
		signal_alive(SIGTERM);
		argus_sim_shm_abort(shm_, ARGUS_SIM_ABORT_SHUTDOWN, -1);
		abort_job_segments(id_, shm_name_, ARGUS_SIM_ABORT_SHUTDOWN);
	};

	while (alive > 0) {
		timespec slice{0, 200'000'000L};
		siginfo_t info{};
		int sig = sigtimedwait(&handled_, &info, &slice);
		if (sig == SIGUSR1) {
			for (auto &p : procs_) {
				if (p.pid != info.si_pid || !p.alive || p.hung || !cfg_.hangs.count(p.rank))
					continue;
				p.hung = true;
				if (fault_at == 0)
					fault_at = now_ns();
				say("job " + cfg_.job_id + ": rank " + std::to_string(p.rank) + " hung at step " +
				    std::to_string(cfg_.hangs.at(p.rank)) + " (--hang); its peers wait for it");
				if (stopping || aborted)
					kill(p.pid, SIGTERM); // the job is ending already
			}
		}
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
			if (!stopping) {
				begin_stop(strsignal(sig));
			} else if (!killed) {
				// A second signal: no more grace.
				signal_alive(SIGKILL);
				killed = true;
			}
		}
		int st = 0;
		pid_t pid;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			for (auto &p : procs_) {
				if (p.pid != pid || !p.alive)
					continue;
				p.alive = false;
				p.status = st;
				alive--;
				bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
				if (!ok && WIFEXITED(st) && WEXITSTATUS(st) == kInjectedExitStatus &&
				    (cfg_.exits.count(p.rank) || may_run_out_of_memory(p.rank))) {
					// --exit, or out of memory (--mem-oom, --mem-leak): expected. The
					// peers stay blocked, as after a hang.
					if (fault_at == 0)
						fault_at = now_ns();
					say("job " + cfg_.job_id + ": rank " + std::to_string(p.rank) + " " +
					    planned_exit(p.rank) + "; its peers wait for it");
					continue;
				}
				if (!ok) {
					all_ok = false;
					if (!killed)
						warn("rank " + std::to_string(p.rank) + " (pid " + std::to_string(pid) +
						     ") " + describe_status(st));
					if (cfg_.no_abort && !stopping) {
						// --no-abort: its peers wait for it, as after --exit.
						if (fault_at == 0)
							fault_at = now_ns();
						continue;
					}
					if (!stopping && !aborted) {
						// Release the peers that wait for it in a collective.
						aborted = true;
						warn("job " + cfg_.job_id + ": aborting the communicator");
						argus_sim_shm_abort(shm_, ARGUS_SIM_ABORT_RANK_FAILED, -1);
						abort_job_segments(id_, shm_name_, ARGUS_SIM_ABORT_RANK_FAILED);
						// A hung rank is not in the communicator: stop it directly
						// (every --hang rank: coalesced SIGUSR1s may hide one).
						for (const auto &q : procs_)
							if (q.alive && cfg_.hangs.count(q.rank))
								kill(q.pid, SIGTERM);
					}
				}
			}
		}
		// A rank may still be making a communicator (its segment is new): abort
		// those too, every slice, until the job is gone.
		if (stopping || aborted)
			abort_job_segments(id_, shm_name_,
					   stopping ? ARGUS_SIM_ABORT_SHUTDOWN : ARGUS_SIM_ABORT_RANK_FAILED);
		if (!stopping && alive > 0 && fault_at != 0 && cfg_.hang_timeout_s > 0 &&
		    now_ns() >= fault_at + static_cast<long long>(cfg_.hang_timeout_s * 1e9)) {
			hang_timed_out = true;
			begin_stop("--hang-timeout");
		}
		if (stopping && !killed && alive > 0 && now_ns() >= kill_at) {
			warn("job " + cfg_.job_id + ": ranks still running after 5 s; killing them");
			signal_alive(SIGKILL);
			killed = true;
		}
	}
	if (!all_ok)
		return 1;
	return hang_timed_out ? kHangTimeoutStatus : 0;
}

int Launcher::run()
{
	if (cfg_.job_id.empty())
		cfg_.job_id = "sim-" + std::to_string(getpid());
	if (cfg_.ib_only) {
		setup_ib_fixture();
		return run_ib_only();
	}
	exe_ = self_exe();
	const fs::path libdir = fs::path(exe_).parent_path() / ".." / "lib";
	cfg_.nccl_lib = resolve_lib("--nccl-lib", cfg_.nccl_lib, libdir / "libnccl.so.2");
	cfg_.cuda_lib = resolve_lib("--cuda-lib", cfg_.cuda_lib, libdir / "libcuda.so.1");
	if (!cfg_.out_dir.empty()) {
		std::error_code ec;
		fs::path out = fs::absolute(cfg_.out_dir, ec).lexically_normal();
		fs::create_directories(out, ec);
		if (ec || !fs::is_directory(out))
			throw UsageError("--out: cannot create " + out.string() +
					 (ec ? ": " + ec.message() : std::string()));
		cfg_.out_dir = out.string();
		while (cfg_.out_dir.size() > 1 && cfg_.out_dir.back() == '/')
			cfg_.out_dir.pop_back();
	}
	setup_ib_fixture();

	create_comm_segment();
	const std::string id_hex = to_hex(id_, sizeof id_);
	const std::string cfg_json = to_json(cfg_).dump();

	// Signals are taken synchronously (sigtimedwait); ranks get child_mask below.
	sigemptyset(&handled_);
	sigaddset(&handled_, SIGINT);
	sigaddset(&handled_, SIGTERM);
	sigaddset(&handled_, SIGHUP);
	sigaddset(&handled_, SIGCHLD);
	sigaddset(&handled_, SIGUSR1); // a rank's --hang fired
	sigset_t old_mask;
	sigprocmask(SIG_BLOCK, &handled_, &old_mask);
	// A rank starts with SIGTERM/SIGINT blocked and unblocks them once its
	// handlers are in (worker_main): an early stop is then orderly, not a death.
	sigset_t child_mask = old_mask;
	sigaddset(&child_mask, SIGTERM);
	sigaddset(&child_mask, SIGINT);

	procs_.resize(static_cast<std::size_t>(cfg_.ranks));
	for (int r = 0; r < cfg_.ranks; r++) {
		RankProc &p = procs_[static_cast<std::size_t>(r)];
		p.rank = r;
		p.local_rank = local_rank_of(cfg_, r); // --nodes: contiguous blocks
		if (!spawn(p, id_hex, cfg_json, child_mask)) {
			warn(std::string("cannot start rank ") + std::to_string(r) + ": " + std::strerror(errno));
			procs_.resize(static_cast<std::size_t>(r));
			argus_sim_shm_abort(shm_, ARGUS_SIM_ABORT_SHUTDOWN, -1);
			signal_alive(SIGKILL);
			for (auto &q : procs_)
				if (q.alive)
					waitpid(q.pid, nullptr, 0);
			argus_sim_shm_close(shm_);
			shm_unlink(shm_name_);
			for (const std::string &name : job_segments(id_))
				shm_unlink(name.c_str());
			sigprocmask(SIG_SETMASK, &old_mask, nullptr);
			return 1;
		}
		say("job " + cfg_.job_id + ": rank " + std::to_string(r) + "/" + std::to_string(cfg_.ranks) +
		    " started, pid " + std::to_string(p.pid));
	}
	write_job_json();
	start_ib_runner();

	int rc = supervise();

	if (ib_runner_)
		ib_runner_->stop(); // the last counters, while shm_ is still mapped
	argus_sim_shm_close(shm_);
	shm_ = nullptr;
	shm_unlink(shm_name_);
	// The ranks' own segments (a killed rank never unlinks the ones it made).
	for (const std::string &name : job_segments(id_))
		shm_unlink(name.c_str());
	sigprocmask(SIG_SETMASK, &old_mask, nullptr);
	if (rc == 0 && cfg_.exits.empty() && cfg_.mem_ooms.empty() && cfg_.mem_leaks.empty())
		say("job " + cfg_.job_id + ": all " + std::to_string(cfg_.ranks) + " ranks exited 0");
	else if (rc == 0)
		say("job " + cfg_.job_id + ": all " + std::to_string(cfg_.ranks) +
		    " ranks ended as planned (status 0, or 1 for --exit and out of memory)");
	else if (rc == kHangTimeoutStatus)
		say("job " + cfg_.job_id + ": stopped at --hang-timeout");
	else
		warn("job " + cfg_.job_id + ": some ranks failed");
	return rc;
}

} // namespace

int launcher_main(SimConfig cfg)
{
	Launcher l(std::move(cfg));
	return l.run();
}

} // namespace argus::sim
