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

// Sleeps until CLOCK_MONOTONIC `t`; false if a stop was requested meanwhile.
bool sleep_until(long long t)
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

// Before the step's compute: the GPU faults' onsets, then (--pp) the pipeline's
// eager sends and receives on the compute stream (sends first: they never block,
// so the stages cannot deadlock), so that the compute queues behind the receive.
StepResult Rank::step_start(std::int64_t s)
{
	if (plan_.gpu_slow_factor > 1.0 && s == plan_.gpu_slow_from_step) {
		set_kernel_durations(plan_.gpu_slow_factor);
		add_fault({{"kind", "gpu_slow"},
			   {"factor", plan_.gpu_slow_factor},
			   {"from_step", s},
			   {"injected_at", realtime_s()}});
	}
	if (s == plan_.gpu_hang_step) {
		// A GPU stuck in a kernel: ~an hour per kernel from now on. Every rank still
		// issues the step's collectives (they only enqueue); none of them finishes.
		set_kernel_durations(kGpuHangFactor);
		add_fault({{"kind", "gpu_hang"}, {"step", s}, {"injected_at", realtime_s()}});
	}
	if (plan_.pp_stage < 0)
		return StepResult::Ok;
	if (s == 0 && plan_.bubble_ms > 0)
		add_fault({{"kind", "bubble"},
			   {"stage", plan_.pp_stage},
			   {"ms", plan_.bubble_ms},
			   {"injected_at", realtime_s()}});
	for (const NcclCall &c : step_pp_calls(s, rank_, world_, cfg_.pp))
		if (nccl(c.op, c.bytes(), call_nccl(c, stream_)) != 0)
			return StepResult::NcclFailed;
	return StepResult::Ok;
}

StepResult Rank::step(std::int64_t s)
{
	if (StepResult r = step_start(s); r != StepResult::Ok)
		return r;

	// (a) host compute, spread between the kernel launches (slower from the
	// straggler's onset on).
	const bool slow = plan_.straggler_factor > 1.0 && s >= plan_.straggler_from_step;
	if (slow && s == plan_.straggler_from_step)
		add_fault({{"kind", "straggler"},
			   {"factor", plan_.straggler_factor},
			   {"from_step", s},
			   {"injected_at", realtime_s()}});
	const long long host_ns = static_cast<long long>(
		static_cast<double>(cfg_.step_ms) * 1e6 * (slow ? plan_.straggler_factor : 1.0));
	const int k = cfg_.kernels_per_step;
	const long long t0 = now_ns();
	// --hang / --exit fire right before the step's first collective.
	bool first_collective = true;
	auto before_collective = [&]() -> StepResult {
		if (!first_collective)
			return StepResult::Ok;
		first_collective = false;
		if (s == plan_.hang_step)
			return StepResult::Hang;
		if (s == plan_.exit_step)
			return StepResult::Exit;
		return StepResult::Ok;
	};
	// Paced by absolute deadlines, so that timer and wake-up jitter never add
	// up over a step's chunks. --host-cpu: a stretch of that share of the host
	// compute is CPU work (thread CPU time), one busy stretch as a real rank's
	// Python dispatch is (short bursts would slip between a hog's time
	// slices). The wall time it loses to other tasks (a noisy neighbour, a
	// CPU quota) moves every later deadline, so a rank short of CPU falls
	// behind. Ranks place their stretch at different points of the step, so
	// that many ranks on few cores do not queue behind one another (on a real
	// node each rank has cores of its own).
	const long long cpu_ns = static_cast<long long>(static_cast<double>(host_ns) * cfg_.host_cpu);
	const long long busy_from = world_ > 1 ? (host_ns - cpu_ns) * (rank_ % world_) / (world_ - 1) : 0;
	const long long busy_to = busy_from + cpu_ns;
	long long host_pos = 0;
	long long starved_ns = 0;
	auto compute_until = [&](long long until) {
		const long long b0 = std::clamp(busy_from, host_pos, until);
		const long long b1 = std::clamp(busy_to, host_pos, until);
		host_pos = until;
		if (b1 > b0) {
			long long took = 0;
			if (!sleep_until(t0 + starved_ns + b0) || !host_burn(b1 - b0, took))
				return false;
			starved_ns += std::max(0LL, took - (b1 - b0));
		}
		return sleep_until(t0 + starved_ns + until);
	};
	if (k == 0) {
		if (!compute_until(host_ns))
			return StepResult::Stopped;
	}
	const int backward = k / 2; // launches from here on are the backward pass
	int bucket = 0;
	for (int i = 0; i < k; i++) {
		if (!compute_until(host_ns * (i + 1) / k))
			return StepResult::Stopped;
		launch(i);
		// --buckets: DDP all-reduces a gradient bucket as soon as backward filled it.
		while (bucket < cfg_.buckets && i >= backward &&
		       i + 1 >= backward + ((bucket + 1) * (k - backward)) / cfg_.buckets) {
			if (StepResult r = before_collective(); r != StepResult::Ok)
				return r;
			const NcclCall c = step_bucket_call(bucket++);
			if (nccl(c.op, c.bytes(), call_nccl(c, nccl_stream_)) != 0)
				return StepResult::NcclFailed;
		}
	}
	if (StepResult r = before_collective(); r != StepResult::Ok)
		return r;

	// --sync-before-coll: the host waits for its GPU before communicating
	// (loss.item(), timing code): a slow GPU then delays this rank's collectives.
	if (cfg_.sync_before_coll)
		cuda("cuStreamSynchronize", cu_.cuStreamSynchronize(stream_));

	// The gradient bucket is copied into the communication buffer (on the
	// stream, no wait: the emulated copy takes no time at this size).
	copy("cuMemcpyDtoDAsync_v2", "dtod", kGradBucketBytes,
	     cu_.cuMemcpyDtoDAsync_v2(comm_buf_, grads_, kGradBucketBytes, stream_));

	// (b) gradient sync and the rest of the step's communication.
	bool in_group = false;
	for (const NcclCall &c : step_nccl_calls(s, rank_, world_)) {
		if (c.grouped && !in_group) {
			truth_.group_start++;
			ncclResult_t r = nc_.ncclGroupStart();
			if (r != 0) {
				truth_.nccl_errors["ncclGroupStart"][nccl_result_name(r)]++;
				note_nccl_error("ncclGroupStart", r);
				return StepResult::NcclFailed;
			}
			in_group = true;
		}
		if (nccl(c.op, c.bytes(), call_nccl(c, nccl_stream_)) != 0)
			return StepResult::NcclFailed;
	}
	if (in_group) {
		truth_.group_end++;
		ncclResult_t r = nc_.ncclGroupEnd();
		if (r != 0) {
			truth_.nccl_errors["ncclGroupEnd"][nccl_result_name(r)]++;
			note_nccl_error("ncclGroupEnd", r);
			return StepResult::NcclFailed;
		}
	}

	// (c) the loss comes back (on the stream), then wait for the GPU.
	copy("cuMemcpyDtoHAsync_v2", "dtoh", sizeof loss_host_,
	     cu_.cuMemcpyDtoHAsync_v2(loss_host_, grads_, sizeof loss_host_, stream_));
	// --sync-every K: only every K-th step waits for the GPU (the host runs ahead).
	if ((s + 1) % cfg_.sync_every != 0)
		return StepResult::Ok;
	if (s % 2 == 1)
		cuda("cuStreamSynchronize_ptsz", cu_.cuStreamSynchronize_ptsz(stream_));
	else
		cuda("cuStreamSynchronize", cu_.cuStreamSynchronize(stream_));
	// As PyTorch's watchdog: an asynchronous collective that failed (a peer died,
	// the job was aborted) fails the step.
	if (ncclResult_t async = 0; nc_.ncclCommGetAsyncError(comm_, &async) == 0 && async != 0) {
		truth_.nccl_errors["ncclCommGetAsyncError"][nccl_result_name(async)]++;
		note_nccl_error("ncclCommGetAsyncError", async);
		return StepResult::NcclFailed;
	}
	if (s % 10 == 0) {
		cuda("cuCtxSynchronize", cu_.cuCtxSynchronize());
		cuda("cuEventRecord", cu_.cuEventRecord(event_, stream_));
		cuda("cuEventSynchronize", cu_.cuEventSynchronize(event_));
		// Every 10 steps, with the device idle: new optimizer state goes up and
		// a checkpoint copy of the parameters is taken on the device.
		copy("cuMemcpyHtoDAsync_v2", "htod", sizeof lr_host_,
		     cu_.cuMemcpyHtoDAsync_v2(params_, lr_host_, sizeof lr_host_, stream_));
		copy("cuMemcpyDtoD_v2", "dtod", kCheckpointBytes,
		     cu_.cuMemcpyDtoD_v2(grads_, params_, kCheckpointBytes));
	}
	return StepResult::Ok;
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
	if (comm_) {
		// A rank that stops early aborts the communicator, which releases any peer
		// still waiting for it (as PyTorch's watchdog does).
		if (abort_comm)
			nc_.ncclCommAbort(comm_);
		else
			nc_.ncclCommDestroy(comm_);
		comm_ = nullptr;
	}
	if (!cu_.cuInit || !ctx_)
		return;
	// Everything the emulated GPU still runs or holds crosses argus:gpu_batch now,
	// so that the truth's "gpu" totals are final.
	if (cu_.argus_sim_gpu_flush_all)
		cu_.argus_sim_gpu_flush_all();
	if (event_)
		cuda("cuEventDestroy_v2", cu_.cuEventDestroy_v2(event_));
	if (comm_buf_)
		cuda("cuMemFree_v2", cu_.cuMemFree_v2(comm_buf_));
	if (grads_)
		cuda("cuMemFree_v2", cu_.cuMemFree_v2(grads_));
	if (params_)
		cuda("cuMemFree_v2", cu_.cuMemFree_v2(params_));
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
	if (cu_.argus_sim_coll_log) {
		truth_.collectives.resize(ARGUS_SIM_COLL_LOG_MAX);
		int n = cu_.argus_sim_coll_log(truth_.collectives.data(), ARGUS_SIM_COLL_LOG_MAX);
		truth_.collectives.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
	}
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

	truth_.nccl_init++;
	ncclResult_t r = nc_.ncclCommInitRank(&comm_, world_, id_, rank_);
	if (r != 0) {
		comm_ = nullptr;
		truth_.nccl_errors["ncclCommInitRank"][nccl_result_name(r)]++;
		note_nccl_error("ncclCommInitRank", r);
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
		switch (step(s)) {
		case StepResult::Ok:
			truth_.steps_completed++;
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
