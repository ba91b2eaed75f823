// The framework job's step (layout.h, workload.h): Megatron's 1F1B schedule of
// --accum micro-batches on this rank's pipeline stage, each micro-batch's
// forward and backward through --layers layers with their TP all-reduces and
// MoE all-to-alls, then the DP gradient all-reduce, the optimizer, and the end
// every step shares (step_end). All NCCL calls go on the NCCL stream, as
// ProcessGroupNCCL's do; the compute stream waits for them on the GPU.
#include "worker_rank.h"

namespace argus::sim::worker_detail {

// --hang / --exit fire right before the step's first NCCL call: in a pipeline
// the peer's receive then never gets its send.
StepResult Rank::before_first_nccl(std::int64_t s)
{
	if (!first_nccl_)
		return StepResult::Ok;
	first_nccl_ = false;
	if (s == plan_.hang_step)
		return StepResult::Hang;
	if (s == plan_.exit_step)
		return StepResult::Exit;
	return StepResult::Ok;
}

// ncclGroupStart (start) or ncclGroupEnd, counted, and the time the end held
// this thread; false on an error.
bool Rank::group_call(bool start)
{
	const char *api = start ? "ncclGroupStart" : "ncclGroupEnd";
	(start ? truth_.group_start : truth_.group_end)++;
	const long long t0 = now_ns();
	ncclResult_t r = start ? nc_.ncclGroupStart() : nc_.ncclGroupEnd();
	if (!start)
		truth_.group_end_ns += static_cast<std::uint64_t>(now_ns() - t0);
	if (r != 0) {
		truth_.nccl_errors[api][nccl_result_name(r)]++;
		note_nccl_error(api, r);
		return false;
	}
	return true;
}

StepResult Rank::tp_all_reduce()
{
	ncclComm_t tp = comm_of(GroupKind::Tp);
	if (!tp)
		return StepResult::Ok;
	if (StepResult r = before_first_nccl(cur_step_); r != StepResult::Ok)
		return r;
	const NcclCall c = tp_all_reduce_call();
	return nccl(c.op, c.bytes(), call_nccl(c, nccl_stream_, tp)) == 0 ? StepResult::Ok : StepResult::NcclFailed;
}

// One MoE all-to-all over the EP group, as grouped send/recv to and from every
// peer (PyTorch's all_to_all_single before NCCL 2.28), with this micro-batch's
// uneven token counts (layout.h moe_tokens).
StepResult Rank::moe_all_to_all(std::int64_t s, int micro, int layer, bool dispatch)
{
	ncclComm_t ep = comm_of(GroupKind::Ep);
	if (!ep)
		return StepResult::Ok;
	if (StepResult r = before_first_nccl(s); r != StepResult::Ok)
		return r;
	if (!group_call(true))
		return StepResult::NcclFailed;
	const int me = place_.ep_rank;
	for (int j = 0; j < layout_.ep; j++) {
		if (j == me)
			continue;
		const int out = dispatch ? moe_tokens(s, micro, layer, me, j) : moe_tokens(s, micro, layer, j, me);
		const int in = dispatch ? moe_tokens(s, micro, layer, j, me) : moe_tokens(s, micro, layer, me, j);
		const NcclCall send{Op::Send, static_cast<std::size_t>(out) * kMoeHidden, kNcclBfloat16, kNcclSum, 0, j, true};
		const NcclCall recv{Op::Recv, static_cast<std::size_t>(in) * kMoeHidden, kNcclBfloat16, kNcclSum, 0, j, true};
		if (nccl(send.op, send.bytes(), call_nccl(send, nccl_stream_, ep)) != 0 ||
		    nccl(recv.op, recv.bytes(), call_nccl(recv, nccl_stream_, ep)) != 0)
			return StepResult::NcclFailed;
	}
	return group_call(false) ? StepResult::Ok : StepResult::NcclFailed;
}

// One pipeline exchange (recv_forward, send_forward_recv_backward, ...): one
// group on the PP communicator, whose rank is the stage.
StepResult Rank::exchange(const PipeAction &a)
{
	ncclComm_t pp = comm_of(GroupKind::Pp);
	if (!pp)
		return StepResult::Ok;
	if (StepResult r = before_first_nccl(cur_step_); r != StepResult::Ok)
		return r;
	if (!group_call(true))
		return StepResult::NcclFailed;
	for (const PipeP2p &o : a.ops) {
		const NcclCall c = pp_activation_call(o.send, o.next ? place_.stage + 1 : place_.stage - 1);
		if (nccl(c.op, c.bytes(), call_nccl(c, nccl_stream_, pp)) != 0)
			return StepResult::NcclFailed;
	}
	return group_call(false) ? StepResult::Ok : StepResult::NcclFailed;
}

// Per layer: attention (half a unit), its TP all-reduce, the MoE dispatch, the
// MLP/experts (half a unit), the MoE combine, the MLP's TP all-reduce. The last
// stage then computes the loss.
StepResult Rank::forward(std::int64_t s, int micro, long long unit_ns)
{
	for (int l = 0; l < layout_.layers; l++) {
		const int layer = place_.stage * layout_.layers + l;
		if (!host_compute(unit_ns / 2) || !launch(static_cast<int>(launches_++), kFwdKernel))
			return StepResult::Stopped;
		if (StepResult r = tp_all_reduce(); r != StepResult::Ok)
			return r;
		if (StepResult r = moe_all_to_all(s, micro, layer, true); r != StepResult::Ok)
			return r;
		if (!host_compute(unit_ns / 2) || !launch(static_cast<int>(launches_++), kFwdKernel))
			return StepResult::Stopped;
		if (StepResult r = moe_all_to_all(s, micro, layer, false); r != StepResult::Ok)
			return r;
		if (StepResult r = tp_all_reduce(); r != StepResult::Ok)
			return r;
	}
	if (place_.stage == layout_.pp - 1) {
		const auto loss_ns = static_cast<long long>(static_cast<double>(unit_ns) * kLossUnits);
		if (!host_compute(loss_ns) || !launch(static_cast<int>(launches_++), kLossKernel))
			return StepResult::Stopped;
	}
	return StepResult::Ok;
}

// The forward mirrored, layers in reverse: the MLP's gradient (one unit), the
// combine's backward (a dispatch-direction all-to-all), its TP all-reduce, the
// attention's gradient (one unit), the dispatch's backward, its TP all-reduce.
StepResult Rank::backward(std::int64_t s, int micro, long long unit_ns)
{
	for (int l = layout_.layers - 1; l >= 0; l--) {
		const int layer = place_.stage * layout_.layers + l;
		if (StepResult r = moe_all_to_all(s, micro, layer, true); r != StepResult::Ok)
			return r;
		if (!host_compute(unit_ns) || !launch(static_cast<int>(launches_++), kBwdKernel))
			return StepResult::Stopped;
		if (StepResult r = moe_all_to_all(s, micro, layer, false); r != StepResult::Ok)
			return r;
		if (StepResult r = tp_all_reduce(); r != StepResult::Ok)
			return r;
		if (!host_compute(unit_ns) || !launch(static_cast<int>(launches_++), kBwdKernel))
			return StepResult::Stopped;
		if (StepResult r = tp_all_reduce(); r != StepResult::Ok)
			return r;
	}
	return StepResult::Ok;
}

// After the last micro-batch: the gradients' all-reduce over the DP group
// (--buckets N bucket all-reduces, else one), after --sync-before-coll's wait.
StepResult Rank::dp_all_reduce(std::int64_t s)
{
	if (StepResult r = before_first_nccl(s); r != StepResult::Ok)
		return r; // a step with no NCCL call before: the hang fires here
	if (cfg_.sync_before_coll)
		cuda("cuStreamSynchronize", cu_.cuStreamSynchronize(stream_));
	copy("cuMemcpyDtoDAsync_v2", "dtod", kGradBucketBytes,
	     cu_.cuMemcpyDtoDAsync_v2(comm_buf_, grads_, kGradBucketBytes, stream_));
	ncclComm_t dp = comm_of(GroupKind::Dp);
	if (!dp)
		return StepResult::Ok;
	const int n = cfg_.buckets > 0 ? cfg_.buckets : 1;
	for (int b = 0; b < n; b++) {
		const NcclCall c = cfg_.buckets > 0 ? step_bucket_call(b) : dp_all_reduce_call();
		if (nccl(c.op, c.bytes(), call_nccl(c, nccl_stream_, dp)) != 0)
			return StepResult::NcclFailed;
	}
	return StepResult::Ok;
}

StepResult Rank::framework_step(std::int64_t s)
{
	first_nccl_ = true;
	if (StepResult r = step_start(s); r != StepResult::Ok)
		return r;
	const long long unit_ns = static_cast<long long>(static_cast<double>(cfg_.step_ms) * 1e6 *
							 straggler_factor(s) * jitter_ / framework_units(layout_));
	for (const PipeAction &a : schedule_1f1b(layout_.pp, place_.stage, layout_.accum)) {
		StepResult r = a.kind == PipeAction::Forward	? forward(s, a.micro, unit_ns)
			       : a.kind == PipeAction::Backward ? backward(s, a.micro, unit_ns)
								 : exchange(a);
		if (r != StepResult::Ok)
			return r;
	}
	if (StepResult r = dp_all_reduce(s); r != StepResult::Ok)
		return r;
	for (int l = 0; l < layout_.layers; l++)
		if (!host_compute(unit_ns) || !launch(static_cast<int>(launches_++), kOptKernel))
			return StepResult::Stopped;
	return step_end(s);
}

} // namespace argus::sim::worker_detail
