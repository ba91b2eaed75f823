#include "launcher.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sim_shm.h"
#include "truth.h"

extern char **environ;

namespace argus::sim {
namespace {

namespace fs = std::filesystem;

constexpr long long kStopGraceNs = 5'000'000'000LL; // SIGTERM -> SIGKILL

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
		{"LOCAL_WORLD_SIZE", std::to_string(cfg.ranks)},
		{"GROUP_RANK", "0"},
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
	int supervise();

	SimConfig cfg_;
	std::string exe_;
	unsigned char id_[ARGUS_SIM_UNIQUE_ID_BYTES] = {};
	char shm_name_[ARGUS_SIM_SHM_NAME_MAX] = {};
	argus_sim_shm *shm_ = nullptr;
	std::vector<RankProc> procs_;
	sigset_t handled_{};
};

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
		ranks.push_back({{"rank", p.rank}, {"local_rank", p.local_rank}, {"pid", p.pid}});
	nlohmann::json j = {
		{"job_id", cfg_.job_id},
		{"world_size", cfg_.ranks},
		{"launcher_pid", static_cast<int>(getpid())},
		{"nccl_lib", cfg_.nccl_lib},
		{"cuda_lib", cfg_.cuda_lib},
		{"shm", shm_name_},
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
	long long kill_at = 0;
	std::size_t alive = 0;
	for (const auto &p : procs_)
		alive += p.alive ? 1 : 0;

	while (alive > 0) {
		timespec slice{0, 200'000'000L};
		siginfo_t info{};
		int sig = sigtimedwait(&handled_, &info, &slice);
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
			if (!stopping) {
				stopping = true;
				kill_at = now_ns() + kStopGraceNs;
				say("job " + cfg_.job_id + ": stopping (" + strsignal(sig) + ")");
				signal_alive(SIGTERM);
				argus_sim_shm_abort(shm_, ARGUS_SIM_ABORT_SHUTDOWN, -1);
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
				if (!ok) {
					all_ok = false;
					if (!killed)
						warn("rank " + std::to_string(p.rank) + " (pid " + std::to_string(pid) +
						     ") " + describe_status(st));
					if (!stopping && !aborted) {
						// Release the peers that wait for it in a collective.
						aborted = true;
						warn("job " + cfg_.job_id + ": aborting the communicator");
						argus_sim_shm_abort(shm_, ARGUS_SIM_ABORT_RANK_FAILED, -1);
					}
				}
			}
		}
		if (stopping && !killed && alive > 0 && now_ns() >= kill_at) {
			warn("job " + cfg_.job_id + ": ranks still running after 5 s; killing them");
			signal_alive(SIGKILL);
			killed = true;
		}
	}
	return all_ok ? 0 : 1;
}

int Launcher::run()
{
	if (cfg_.job_id.empty())
		cfg_.job_id = "sim-" + std::to_string(getpid());
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

	create_comm_segment();
	const std::string id_hex = to_hex(id_, sizeof id_);
	const std::string cfg_json = to_json(cfg_).dump();

	// Signals are taken synchronously (sigtimedwait); ranks get the old mask back.
	sigemptyset(&handled_);
	sigaddset(&handled_, SIGINT);
	sigaddset(&handled_, SIGTERM);
	sigaddset(&handled_, SIGHUP);
	sigaddset(&handled_, SIGCHLD);
	sigset_t old_mask;
	sigprocmask(SIG_BLOCK, &handled_, &old_mask);

	procs_.resize(static_cast<std::size_t>(cfg_.ranks));
	for (int r = 0; r < cfg_.ranks; r++) {
		RankProc &p = procs_[static_cast<std::size_t>(r)];
		p.rank = r;
		p.local_rank = r; // one simulated node
		if (!spawn(p, id_hex, cfg_json, old_mask)) {
			warn(std::string("cannot start rank ") + std::to_string(r) + ": " + std::strerror(errno));
			procs_.resize(static_cast<std::size_t>(r));
			argus_sim_shm_abort(shm_, ARGUS_SIM_ABORT_SHUTDOWN, -1);
			signal_alive(SIGKILL);
			for (auto &q : procs_)
				if (q.alive)
					waitpid(q.pid, nullptr, 0);
			argus_sim_shm_close(shm_);
			shm_unlink(shm_name_);
			sigprocmask(SIG_SETMASK, &old_mask, nullptr);
			return 1;
		}
		say("job " + cfg_.job_id + ": rank " + std::to_string(r) + "/" + std::to_string(cfg_.ranks) +
		    " started, pid " + std::to_string(p.pid));
	}
	write_job_json();

	int rc = supervise();

	argus_sim_shm_close(shm_);
	shm_ = nullptr;
	shm_unlink(shm_name_);
	sigprocmask(SIG_SETMASK, &old_mask, nullptr);
	if (rc == 0)
		say("job " + cfg_.job_id + ": all " + std::to_string(cfg_.ranks) + " ranks exited 0");
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
