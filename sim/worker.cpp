// One rank of the simulated training job (see worker.h and workload.h).
//
// The rank loads the CUDA and NCCL libraries with dlopen (as PyTorch does) and
// calls them through the PUBLIC names an application uses, so that the agent's
// uprobes on those files see exactly the calls counted here.
//
// This file: the rank's life (start-up, the step loop, the faults it injects, the stop
// signals, teardown and its truth file). worker_libs.cpp loads the libraries and makes the
// calls a step is made of; worker_rank.h declares the Rank and the libraries' C ABI.
#include "worker.h"
#include "worker_rank.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <unistd.h>

namespace argus::sim {
namespace {

using worker_detail::NcclUniqueId;

// ---- signals: stop at the next safe point ----

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_stop_sender = 0; // pid that sent the stop signal (kill), else 0

extern "C" void on_stop_signal(int, siginfo_t *si, void *)
{
	g_stop = 1;
	if (si && si->si_code == SI_USER)
		g_stop_sender = si->si_pid;
}

void install_signal_handlers()
{
	struct sigaction sa {};
	sa.sa_sigaction = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_SIGINFO; // no SA_RESTART: sleeps are cut short and re-checked
	sigaction(SIGTERM, &sa, nullptr);
	sigaction(SIGINT, &sa, nullptr);
	// The launcher starts ranks with them blocked (a stop before this point stays
	// pending and is taken now).
	sigset_t stop_sigs;
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	sigprocmask(SIG_UNBLOCK, &stop_sigs, nullptr);
}

} // namespace

namespace worker_detail {

long long now_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// CLOCK_REALTIME in unix seconds: the injection times of the truth's faults.
double realtime_s()
{
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool stop_requested()
{
	return g_stop != 0;
}

} // namespace worker_detail

namespace {

using worker_detail::now_ns;
using worker_detail::realtime_s;

// --hang: sleeps (no CPU, no library call) until SIGTERM/SIGINT.
void block_until_stopped()
{
	sigset_t stop_sigs, old;
	sigemptyset(&stop_sigs);
	sigaddset(&stop_sigs, SIGTERM);
	sigaddset(&stop_sigs, SIGINT);
	sigprocmask(SIG_BLOCK, &stop_sigs, &old);
	sigset_t wait_mask = old;
	sigdelset(&wait_mask, SIGTERM);
	sigdelset(&wait_mask, SIGINT);
	while (!g_stop)
		sigsuspend(&wait_mask); // no lost wake-up: the signals are blocked until here
	sigprocmask(SIG_SETMASK, &old, nullptr);
}

} // namespace

// Sleeps until CLOCK_MONOTONIC `t`; false if a stop was requested meanwhile.
bool worker_detail::sleep_until(long long t)
{
	timespec ts{};
	ts.tv_sec = static_cast<time_t>(t / 1000000000LL);
	ts.tv_nsec = static_cast<long>(t % 1000000000LL);
	for (;;) {
		if (g_stop)
			return false;
		int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
		if (rc == 0)
			return !g_stop;
		if (rc != EINTR)
			return !g_stop;
	}
}

namespace {

using worker_detail::sleep_until;

long long thread_cpu_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Burns `ns` of this thread's CPU time (not wall time: a thread that gets half
// a CPU takes twice as long, as a real rank's Python dispatch does); false if a
// stop was requested meanwhile.
bool burn_cpu(long long ns)
{
	const long long end = thread_cpu_ns() + ns;
	volatile std::uint64_t sink = 0;
	while (thread_cpu_ns() < end) {
		if (g_stop)
			return false;
		for (int j = 0; j < 2000; j++)
			sink = sink + static_cast<std::uint64_t>(j);
	}
	return !g_stop;
}

bool decode_hex_id(const char *hex, NcclUniqueId &id)
{
	if (!hex || std::strlen(hex) != 2 * sizeof id.internal)
		return false;
	auto nib = [](char c) -> int {
		if (c >= '0' && c <= '9')
			return c - '0';
		if (c >= 'a' && c <= 'f')
			return c - 'a' + 10;
		if (c >= 'A' && c <= 'F')
			return c - 'A' + 10;
		return -1;
	};
	for (std::size_t i = 0; i < sizeof id.internal; i++) {
		int hi = nib(hex[2 * i]), lo = nib(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return false;
		id.internal[i] = static_cast<char>(hi << 4 | lo);
	}
	return true;
}

// --gpu-hang: every kernel takes the longest the emulated GPU allows (~66 min).
constexpr double kGpuHangFactor = 1e12;

} // namespace

namespace worker_detail {

// The name NCCL gives a result code (the agent's table), or the number.
std::string nccl_result_name(int r)
{
	const char *name = argus_nccl_result_name(r);
	return name ? name : std::to_string(r);
}

std::string cuda_result_name(int r)
{
	const char *name = argus_cuda_result_name(r);
	return name ? name : "CUDA_ERROR_" + std::to_string(r);
}

bool env_int(const char *name, int &out)
{
	const char *v = std::getenv(name);
	if (!v || !*v)
		return false;
	char *end = nullptr;
	long x = std::strtol(v, &end, 10);
	if (*end != '\0' || x < 0 || x > (1 << 30))
		return false;
	out = static_cast<int>(x);
	return true;
}

// Burns `ns` of this thread's CPU time (--host-cpu); `took` = the wall time it took.
bool Rank::host_burn(long long ns, long long &took)
{
	const long long wall0 = now_ns(), cpu0 = thread_cpu_ns();
	const bool ok = burn_cpu(ns);
	took = now_ns() - wall0;
	truth_.host_cpu_burnt_ns += static_cast<std::uint64_t>(std::max(0LL, thread_cpu_ns() - cpu0));
	return ok;
}

// True when the stop signal came from our (live) launcher, which is stopping the
// whole job: it signals every rank and then aborts the communicator itself, so an
// ncclCommAbort here would only race its signals and fail a peer not yet told to
// stop. Any other stop (a signal to this rank alone, the launcher's death)
// aborts the communicator, releasing the peers (as PyTorch's watchdog does).
bool Rank::stopped_by_launcher() const
{
	int launcher = 0;
	return g_stop && env_int(kLauncherPidEnv, launcher) && launcher > 1 &&
	       g_stop_sender == launcher && getppid() == static_cast<pid_t>(launcher);
}

void Rank::teardown(bool abort_comm)
{
	truth_.gpu_memory.held_before_teardown = truth_.gpu_memory.held;
	// A rank that stops early aborts its communicators, which releases any peer
	// still waiting for it (as PyTorch's watchdog does).
	destroy_comms(abort_comm);
	if (!cu_.cuInit || !ctx_)
		return;
	// Everything the emulated GPU still runs or holds crosses argus:gpu_batch now,
	// so that the truth's "gpu" totals are final.
	if (cu_.argus_sim_gpu_flush_all)
		cu_.argus_sim_gpu_flush_all();
	if (event_)
		cuda("cuEventDestroy_v2", cu_.cuEventDestroy_v2(event_));
	memory_teardown();
	if (comm_buf_)
		mem_free("cuMemFree_v2", "cuMemFree", kCommBufBytes, cu_.cuMemFree_v2(comm_buf_));
	if (grads_)
		mem_free("cuMemFree_v2", "cuMemFree", kGradsBytes, cu_.cuMemFree_v2(grads_));
	if (params_)
		mem_free("cuMemFree_v2", "cuMemFree", kParamsBytes, cu_.cuMemFree_v2(params_));
	comm_buf_ = grads_ = params_ = 0;
	if (nccl_stream_)
		cuda("cuStreamDestroy_v2", cu_.cuStreamDestroy_v2(nccl_stream_));
	if (stream_)
		cuda("cuStreamDestroy_v2", cu_.cuStreamDestroy_v2(stream_));
	cuda("cuCtxDestroy_v2", cu_.cuCtxDestroy_v2(ctx_));
	ctx_ = nullptr;
}

void Rank::write_truth()
{
	if (cfg_.out_dir.empty())
		return;
	truth_.has_gpu = cu_.argus_sim_gpu_totals && cu_.argus_sim_gpu_totals(&truth_.gpu, sizeof truth_.gpu) == 0;
	truth_.nccl_mode = cfg_.nccl_async ? "async" : "blocking";
	truth_.host_cpu = cfg_.host_cpu;
	comms_truth();
	if (cfg_.framework)
		truth_.layout = {{"tp", layout_.tp},		{"pp", layout_.pp},
				 {"dp", layout_.dp},		{"ep", layout_.ep},
				 {"accum", layout_.accum},	{"layers", layout_.layers},
				 {"stage", place_.stage},	{"tp_rank", place_.tp_rank},
				 {"dp_rank", place_.dp_rank}, {"ep_rank", place_.ep_rank}};
	std::string path = cfg_.out_dir + "/rank-" + std::to_string(rank_) + ".json";
	if (!write_json_atomic(path, truth_.to_json()))
		log("cannot write " + path + ": " + std::strerror(errno));
}

// Records a fault as it fires; the truth file is written at once (status
// "running"), so a benchmark can read the injection time while the job runs.
void Rank::add_fault(nlohmann::json fault)
{
	truth_.faults.push_back(std::move(fault));
	write_truth();
}

// --hang at step s: the truth is written as the hang starts (the process may be
// killed later), the launcher is told (SIGUSR1), then the rank sleeps until
// SIGTERM/SIGINT, never entering the collective its peers wait in.
int Rank::hang(std::int64_t s)
{
	truth_.status = "hung";
	truth_.faults.push_back({{"kind", "hang"}, {"step", s}, {"injected_at", realtime_s()}});
	write_truth();
	int launcher = 0;
	if (env_int(kLauncherPidEnv, launcher) && launcher > 1 && launcher == static_cast<int>(getppid()))
		kill(static_cast<pid_t>(launcher), SIGUSR1);
	block_until_stopped();
	teardown(!stopped_by_launcher());
	return finish("hung", kWorkerOk);
}

int Rank::finish(const char *status, int code)
{
	truth_.status = status;
	write_truth();
	return code;
}

int Rank::run()
{
	if (!load_libraries())
		return kWorkerLoadFailed;

	// Framework start-up (imports, model construction) before the first CUDA call.
	if (!sleep_until(now_ns() + static_cast<long long>(cfg_.init_ms) * 1000000LL))
		return finish("stopped", kWorkerOk);

	if (!setup_cuda()) {
		teardown(false);
		return finish("failed", kWorkerCudaFailed);
	}

	if (make_comms() != StepResult::Ok) {
		bool stopped = g_stop;
		if (!stopped)
			log(nccl_error_);
		teardown(!stopped || !stopped_by_launcher());
		return stopped ? finish("stopped", kWorkerOk) : finish("aborted", kWorkerNcclFailed);
	}

	for (std::int64_t s = 0; cfg_.steps == 0 || s < cfg_.steps; s++) {
		if (g_stop) {
			teardown(!stopped_by_launcher());
			return finish("stopped", kWorkerOk);
		}
		cur_step_ = s;
		switch (cfg_.framework ? framework_step(s) : step(s)) {
		case StepResult::Ok:
			truth_.steps_completed++;
			if (!pauses(s)) {
				teardown(!stopped_by_launcher());
				return finish("stopped", kWorkerOk);
			}
			break;
		case StepResult::Stopped:
			teardown(!stopped_by_launcher());
			return finish("stopped", kWorkerOk);
		case StepResult::Hang:
			return hang(s);
		case StepResult::Exit:
			// A crash: no teardown, no ncclCommAbort (the peers stay blocked).
			truth_.faults.push_back({{"kind", "exit"}, {"step", s}, {"injected_at", realtime_s()}});
			return finish("exited", kWorkerInjectedExit);
		case StepResult::Oom:
			// PyTorch's OutOfMemoryError ends the process as --exit does (the fault is
			// recorded already): no teardown, the peers stay blocked.
			return finish("oom", kWorkerInjectedExit);
		case StepResult::NcclFailed: {
			// An aborted wait during shutdown is an orderly stop.
			bool stopped = g_stop;
			if (!stopped)
				log(nccl_error_);
			teardown(!stopped || !stopped_by_launcher());
			return stopped ? finish("stopped", kWorkerOk) : finish("aborted", kWorkerNcclFailed);
		}
		}
	}
	teardown(false);
	return finish("completed", kWorkerOk);
}

} // namespace worker_detail

using worker_detail::env_int;
using worker_detail::Rank;

int worker_main()
{
	install_signal_handlers();
	auto bad_env = [](const std::string &msg) {
		std::fprintf(stderr, "argus-sim worker: %s\n", msg.c_str());
		return kWorkerBadEnv;
	};
	const char *cfg_text = std::getenv(kWorkerConfigEnv);
	if (!cfg_text)
		return bad_env(std::string(kWorkerConfigEnv) + " is not set (worker mode is started by the launcher)");
	SimConfig cfg;
	try {
		cfg = config_from_json(nlohmann::json::parse(cfg_text));
	} catch (const std::exception &e) {
		return bad_env(std::string("bad ") + kWorkerConfigEnv + ": " + e.what());
	}
	int rank = 0, world = 0, local_rank = 0;
	if (!env_int("RANK", rank) || !env_int("WORLD_SIZE", world) || world < 1 || rank >= world)
		return bad_env("RANK/WORLD_SIZE missing or invalid");
	if (!env_int("LOCAL_RANK", local_rank))
		local_rank = rank;
	NcclUniqueId id{};
	if (!decode_hex_id(std::getenv(kNcclIdEnv), id))
		return bad_env(std::string(kNcclIdEnv) + " missing or not 256 hex digits");
	if (const char *job = std::getenv("TORCHELASTIC_RUN_ID"); job && *job)
		cfg.job_id = job;
	Rank r(std::move(cfg), rank, world, local_rank, id);
	return r.run();
}

} // namespace argus::sim
