// The steps of a rank (worker_rank.h): the flat step of workload.h, and what
// every step shares with the framework job's (worker_layout.cpp): the GPU faults'
// onsets, the jitter and the device memory (worker_memory.cpp) at its start, the
// synchronize and checks at its end, the host's compute pacing, and the pauses
// between steps (--eval-every, --checkpoint).
#include "worker_rank.h"

#include <algorithm>

namespace argus::sim::worker_detail {
namespace {

// --gpu-hang: every kernel takes the longest the emulated GPU allows (~66 min).
constexpr double kGpuHangFactor = 1e12;
// Bound of the truth's per-step lists (jitter factors, pauses): the newest.
constexpr std::size_t kTruthListMax = 1024;

void push_bounded(nlohmann::json &list, nlohmann::json item)
{
	if (list.size() >= kTruthListMax)
		list.erase(list.begin());
	list.push_back(std::move(item));
}

} // namespace

// --straggler: the host compute factor at step s; its onset is recorded once.
double Rank::straggler_factor(std::int64_t s) const
{
	return plan_.straggler_factor > 1.0 && s >= plan_.straggler_from_step ? plan_.straggler_factor : 1.0;
}

// `ns` of host compute: its --host-cpu share burnt on CPU, the rest slept. CPU
// time lost to other tasks delays the end, as a rank short of CPU falls behind.
bool Rank::host_compute(long long ns)
{
	if (ns <= 0)
		return !stop_requested();
	const long long t0 = now_ns();
	const long long cpu = static_cast<long long>(static_cast<double>(ns) * cfg_.host_cpu);
	long long took = 0;
	if (cpu > 0 && !host_burn(cpu, took))
		return false;
	return sleep_until(t0 + ns + std::max(0LL, took - cpu));
}

// Between steps: --eval-every (every rank: host busy, no NCCL call) and
// --checkpoint (one rank, asleep as in blocking I/O, outside any NCCL/CUDA call);
// the peers meet the late rank in their next collective. False on a stop.
bool Rank::pauses(std::int64_t s)
{
	auto pause = [&](const char *kind, int ms, bool busy) {
		const double start = realtime_s();
		const long long ns = static_cast<long long>(ms) * 1000000LL;
		const bool ok = busy ? host_compute(ns) : sleep_until(now_ns() + ns);
		push_bounded(truth_.pauses,
			     {{"kind", kind}, {"step", s}, {"ms", ms}, {"start", start}, {"end", realtime_s()}});
		return ok;
	};
	if (cfg_.eval_every > 0 && (s + 1) % cfg_.eval_every == 0 && !pause("eval", cfg_.eval_ms, true))
		return false;
	if (auto it = cfg_.checkpoints.find(rank_);
	    it != cfg_.checkpoints.end() && (s + 1) % it->second.first == 0 && !pause("checkpoint", it->second.second, false))
		return false;
	return true;
}

// Before the step's compute: the GPU faults' onsets, then (--pp) the pipeline's
// eager sends and receives on the compute stream (sends first: they never block,
// so the stages cannot deadlock), so that the compute queues behind the receive.
StepResult Rank::step_start(std::int64_t s)
{
	if (plan_.gpu_slow_factor > 1.0 && s == plan_.gpu_slow_from_step) {
		gpu_factor_ = plan_.gpu_slow_factor;
		add_fault({{"kind", "gpu_slow"},
			   {"factor", plan_.gpu_slow_factor},
			   {"from_step", s},
			   {"injected_at", realtime_s()}});
	}
	if (s == plan_.gpu_hang_step) {
		// A GPU stuck in a kernel: ~an hour per kernel from now on. Every rank still
		// issues the step's collectives (they only enqueue); none of them finishes.
		gpu_factor_ = kGpuHangFactor;
		add_fault({{"kind", "gpu_hang"}, {"step", s}, {"injected_at", realtime_s()}});
	}
	// --jitter: this step's compute factor, host and kernels alike.
	jitter_ = jitter_factor(cfg_.jitter_pct, rank_, s);
	if (cfg_.jitter_pct > 0) {
		if (truth_.jitter.is_null())
			truth_.jitter = {{"pct", cfg_.jitter_pct}, {"seed", kJitterSeed}, {"factors", nlohmann::json::array()}};
		push_bounded(truth_.jitter["factors"], {s, jitter_});
	}
	if (gpu_factor_ * jitter_ != applied_kernel_factor_) {
		applied_kernel_factor_ = gpu_factor_ * jitter_;
		set_kernel_durations(applied_kernel_factor_);
	}
	if (plan_.pp_stage >= 0 && s == 0 && plan_.bubble_ms > 0)
		add_fault({{"kind", "bubble"},
			   {"stage", plan_.pp_stage},
			   {"ms", plan_.bubble_ms},
			   {"injected_at", realtime_s()}});
	if (plan_.straggler_factor > 1.0 && s == plan_.straggler_from_step)
		add_fault({{"kind", "straggler"},
			   {"factor", plan_.straggler_factor},
			   {"from_step", s},
			   {"injected_at", realtime_s()}});
	// The step's device memory, before its compute (worker_memory.cpp).
	if (StepResult r = memory_step(s); r != StepResult::Ok)
		return r;
	if (plan_.pp_stage < 0)
		return StepResult::Ok;
	if (cfg_.framework)
		return StepResult::Ok; // its pipeline exchanges are part of the 1F1B schedule
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
	const long long host_ns =
		static_cast<long long>(static_cast<double>(cfg_.step_ms) * 1e6 * straggler_factor(s) * jitter_);
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
			if (!group_call(true))
				return StepResult::NcclFailed;
			in_group = true;
		}
		if (nccl(c.op, c.bytes(), call_nccl(c, nccl_stream_)) != 0)
			return StepResult::NcclFailed;
	}
	if (in_group && !group_call(false))
		return StepResult::NcclFailed;

	return step_end(s);
}

// The end every step shares: the loss comes back (on the stream), then the host
// waits for its GPU (every --sync-every steps) and checks its communicators.
StepResult Rank::step_end(std::int64_t s)
{
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
	for (const RankComm &c : comms_) {
		if (ncclResult_t async = 0; c.handle && nc_.ncclCommGetAsyncError(c.handle, &async) == 0 && async != 0) {
			truth_.nccl_errors["ncclCommGetAsyncError"][nccl_result_name(async)]++;
			note_nccl_error("ncclCommGetAsyncError", async);
			return StepResult::NcclFailed;
		}
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


} // namespace argus::sim::worker_detail
