// The deterministic per-step call pattern of a simulated rank. Counts depend
// only on the step index (never on the rank), so every rank of the job makes
// matching calls, and tests can recompute the truth from the formulas below.
//
// Step s (0-based), world size W:
//   all_reduce      float32   count (1<<20) * (4 + s%4)        every step
//   all_reduce      bfloat16  count (1<<19) * (3 + s%3)        every step
//   all_gather      bfloat16  sendcount (1<<18) * (1 + s%2)    every step
//   reduce_scatter  float32   recvcount (1<<18) * (2 + s%2)    every step
//   broadcast       int64     count 1<<16, root 0              s%5 == 0
//   reduce          float64   count 1<<14, op max, root 0      s%5 == 0
//   all_to_all      uint8     count 1<<17                      s%5 == 0
//   group { send float16 count (1<<17) + 4096*(s%8) to (r+1)%W,
//           recv same count from (r-1+W)%W }                   every step, W > 1
// bytes = count * datatype size.
//
// With --pp P (stages of K = W/P ranks, stage(r) = r/K), at the START of every
// step, before the compute launches (step_pp_calls), outside any group, on the
// compute stream:
//   send  float16   count 1<<16 to r+K                        stage(r) < P-1
//   recv  float16   count 1<<16 from r-K                      stage(r) > 0
// They count in the truth's "send"/"recv" like the ring's grouped ones.
//
// The emulated GPU (cuda_shim.c, nccl_shim.c) runs one NCCL kernel per
// collective outside a group, one per ncclGroupEnd (ncclDevKernel_SendRecv) and
// one per eager (pp) send/recv: nccl_kernels = collectives + groups + pp calls.
//
// ---- A framework job (--tp, --ep, --accum or --layers given; layout.h) ----
// Ranks laid out as Megatron does (layout.h: stage, tp_rank, dp_rank, ep_rank
// and the groups); K = --accum, L = --layers (default 4), P = pipeline stages.
// Communicators, in creation order, each only when its groups have > 1 rank:
// world (ncclCommInitRank), DP (ncclCommInitRank, id derived from the world's,
// sim_comm_ids.h ARGUS_SIM_ID_GROUP), TP (ncclCommSplit of the world, color =
// group index, key = world rank), PP (as DP), EP (as TP). A step of stage s runs
// schedule_1f1b(P, s, K) (layout.h), every NCCL call on the NCCL stream:
//   forward of micro-batch m, per layer l (global layer g = s*L + l):
//     host 1/2 unit + launch sim_gemm_fwd; TP all_reduce; MoE dispatch;
//     host 1/2 unit + launch sim_gemm_fwd; MoE combine; TP all_reduce
//   then, on the last stage, the loss: host 1/4 unit + launch sim_layernorm
//   backward of m, layers in reverse:
//     MoE dispatch-direction; host 1 unit + sim_gemm_bwd; MoE combine-direction;
//     TP all_reduce; host 1 unit + sim_gemm_bwd; TP all_reduce
//   exchange: ncclGroupStart; its sends/recvs on the PP comm (peer = s +- 1);
//     ncclGroupEnd (a lone send or recv too)
// then the DP gradient all_reduce(s) on the DP comm (after --sync-before-coll's
// cuStreamSynchronize and the cuMemcpyDtoDAsync_v2 of kGradBucketBytes), the
// optimizer (L x host 1 unit + sim_adam_step), and the flat step's end (the loss
// cuMemcpyDtoHAsync_v2, cuStreamSynchronize, the s%10 extras). Per step:
//   TP all_reduce  bfloat16 count 1<<18                 4*K*L (tp > 1)
//   MoE all-to-all one group of ncclSend+ncclRecv to/from each other EP peer,
//                  bfloat16 count tokens * kMoeHidden    4*K*L groups (ep > 1)
//                  tokens: moe_tokens(s, m, g, src, dst) (layout.h), uneven,
//                  new every step; dispatch sends t(me, j), receives t(j, me);
//                  combine the reverse
//   PP send/recv   float16 count 1<<16, per schedule_1f1b's exchanges (pp > 1)
//   DP all_reduce  float32 count 1<<22 (the same every step), or --buckets N of
//                  step_bucket_call(b)                   1 or N (dp > 1)
// A unit = step_ms / (3*K*L + L) x straggler factor x jitter; a kernel runs
// kGpuBusyShare of its chunk's nominal host time (layout.h framework_kernel_us)
// x --gpu-slow x jitter; --kernels-per-step does not apply. --hang/--exit fire
// right before the step's first NCCL call (at the DP all-reduce when there is
// none). --bubble STAGE:MS delays every receive kernel of that stage by MS.
//
// ---- Both steps ----
// --jitter PCT: host compute and kernel durations of step s scaled by
// jitter_factor(PCT, rank, s) = 1 + PCT/100 * u, u = (mix(kJitterSeed, {rank, s})
// >> 11) * 2^-53 * 2 - 1 (layout.h); the truth lists the factors.
// --eval-every K:MS: after every step s with (s+1) % K == 0, every rank's host
// computes MS ms (its --host-cpu share on CPU), no NCCL call. --checkpoint
// RANK:EVERY:MS: after every step with (s+1) % EVERY == 0 that rank sleeps MS ms
// (a checkpoint write), outside any call. Both in the truth's "pauses".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace argus::sim {

// ncclDataType_t values of nccl.h.
enum NcclType : int {
	kNcclInt8 = 0,
	kNcclUint8 = 1,
	kNcclInt32 = 2,
	kNcclUint32 = 3,
	kNcclInt64 = 4,
	kNcclUint64 = 5,
	kNcclFloat16 = 6,
	kNcclFloat32 = 7,
	kNcclFloat64 = 8,
	kNcclBfloat16 = 9,
	kNcclFloat8e4m3 = 10,
	kNcclFloat8e5m2 = 11,
};

// ncclRedOp_t values.
enum NcclRedOp : int { kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4 };

constexpr std::size_t nccl_type_size(int t)
{
	switch (t) {
	case kNcclInt8:
	case kNcclUint8:
	case kNcclFloat8e4m3:
	case kNcclFloat8e5m2:
		return 1;
	case kNcclFloat16:
	case kNcclBfloat16:
		return 2;
	case kNcclInt32:
	case kNcclUint32:
	case kNcclFloat32:
		return 4;
	default:
		return 8;
	}
}

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Send, Recv };

// The contract's `op` label.
constexpr std::string_view op_label(Op op)
{
	switch (op) {
	case Op::AllReduce:
		return "all_reduce";
	case Op::AllGather:
		return "all_gather";
	case Op::ReduceScatter:
		return "reduce_scatter";
	case Op::Broadcast:
		return "broadcast";
	case Op::Reduce:
		return "reduce";
	case Op::AllToAll:
		return "all_to_all";
	case Op::Send:
		return "send";
	case Op::Recv:
		return "recv";
	}
	return "unknown";
}

struct NcclCall {
	Op op;
	std::size_t count;
	int dtype;
	int redop = kNcclSum; // reductions only
	int root = 0;         // broadcast/reduce
	int peer = -1;        // send/recv
	bool grouped = false; // inside the step's ncclGroupStart/End
	std::uint64_t bytes() const { return count * nccl_type_size(dtype); }
};

// Every NCCL call of step `step` for `rank` of `world`, in call order.
inline std::vector<NcclCall> step_nccl_calls(std::int64_t step, int rank, int world)
{
	const std::size_t s = static_cast<std::size_t>(step);
	std::vector<NcclCall> v;
	v.push_back({Op::AllReduce, (std::size_t{1} << 20) * (4 + s % 4), kNcclFloat32, kNcclSum});
	v.push_back({Op::AllReduce, (std::size_t{1} << 19) * (3 + s % 3), kNcclBfloat16, kNcclSum});
	v.push_back({Op::AllGather, (std::size_t{1} << 18) * (1 + s % 2), kNcclBfloat16});
	v.push_back({Op::ReduceScatter, (std::size_t{1} << 18) * (2 + s % 2), kNcclFloat32, kNcclSum});
	if (s % 5 == 0) {
		v.push_back({Op::Broadcast, std::size_t{1} << 16, kNcclInt64, kNcclSum, 0});
		v.push_back({Op::Reduce, std::size_t{1} << 14, kNcclFloat64, kNcclMax, 0});
		v.push_back({Op::AllToAll, std::size_t{1} << 17, kNcclUint8});
	}
	if (world > 1) {
		const std::size_t n = (std::size_t{1} << 17) + 4096 * (s % 8);
		v.push_back({Op::Send, n, kNcclFloat16, kNcclSum, 0, (rank + 1) % world, true});
		v.push_back({Op::Recv, n, kNcclFloat16, kNcclSum, 0, (rank - 1 + world) % world, true});
	}
	return v;
}

// --pp: the pipeline's eager point-to-point calls of step `step` for `rank` of
// `world` with `stages` stages (none when stages < 2 or it does not divide world).
inline std::vector<NcclCall> step_pp_calls(std::int64_t step, int rank, int world, int stages)
{
	(void)step; // the same every step
	std::vector<NcclCall> v;
	if (stages < 2 || world % stages != 0)
		return v;
	const int per_stage = world / stages;
	const int stage = rank / per_stage;
	const std::size_t n = std::size_t{1} << 16;
	if (stage < stages - 1)
		v.push_back({Op::Send, n, kNcclFloat16, kNcclSum, 0, rank + per_stage, false});
	if (stage > 0)
		v.push_back({Op::Recv, n, kNcclFloat16, kNcclSum, 0, rank - per_stage, false});
	return v;
}

// --buckets N: DDP's gradient all-reduces, issued during backward (the second
// half of the step's launches), bucket b after launch
// k/2 + ((b+1) * (k - k/2)) / N - 1 of the k launches:
//   all_reduce  float32  count (1<<18) * (1 + b%4)
inline NcclCall step_bucket_call(int bucket)
{
	return {Op::AllReduce, (std::size_t{1} << 18) * static_cast<std::size_t>(1 + bucket % 4), kNcclFloat32,
		kNcclSum};
}

// Host-side CUDA pattern of a step (see worker.cpp):
//   kernels_per_step launches; launch i uses kernel i%4 and the symbol
//   cuLaunchKernelEx_ptsz if i%16==15, cuLaunchKernelEx if i%8==7,
//   cuLaunchKernel_ptsz if i%8==3, else cuLaunchKernel;
//   cuStreamSynchronize every step (cuStreamSynchronize_ptsz on odd steps);
//   cuCtxSynchronize, cuEventRecord and cuEventSynchronize when s%10 == 0.
//   Host-API copies: at setup one cuMemcpyHtoD_v2 of 4096 bytes; every step
//   (after the launches) cuMemcpyDtoDAsync_v2 of kGradBucketBytes and (before
//   the synchronize) cuMemcpyDtoHAsync_v2 of 64 bytes (the loss); when
//   s%10 == 0 (after cuEventSynchronize) cuMemcpyHtoDAsync_v2 of 256 bytes and
//   cuMemcpyDtoD_v2 of kCheckpointBytes. At ~25 GB/s all take 0 us emulated.
//   Kernel durations (argus_sim_set_kernel_us): step_ms * kGpuBusyShare /
//   kernels_per_step * kKernelWeights[k] us, truncated (at least 1); from a
//   --gpu-slow rank's onset step on, that value x FACTOR, truncated.
inline constexpr int kKernelCount = 4;
inline constexpr const char *kKernelNames[kKernelCount] = {
	"sim_gemm_fwd", "sim_gemm_bwd", "sim_layernorm", "sim_adam_step"};
// Relative kernel durations (mean 1.0). The GPU is busy ~60% of step_ms.
inline constexpr double kKernelWeights[kKernelCount] = {1.25, 1.5, 0.25, 1.0};
// --kernel-names N > kKernelCount: kernels kKernelCount.. are "sim_kernel_<k>",
// weight kernel_weight(k) (0.25..1.75, mean ~1).
inline constexpr int kMaxKernelNames = 1024;
inline std::string kernel_name(int k)
{
	return k < kKernelCount ? kKernelNames[k] : "sim_kernel_" + std::to_string(k);
}
inline double kernel_weight(int k)
{
	return k < kKernelCount ? kKernelWeights[k] : 0.25 + 1.5 * static_cast<double>((k * 37) % 101) / 100.0;
}
inline constexpr double kGpuBusyShare = 0.6;
inline constexpr std::size_t kGradBucketBytes = 4096;
inline constexpr std::size_t kCheckpointBytes = 8192;

} // namespace argus::sim
