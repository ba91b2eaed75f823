#include "layout.h"

#include <algorithm>

namespace argus::sim {

std::string_view group_kind_label(GroupKind k)
{
	switch (k) {
	case GroupKind::World:
		return "world";
	case GroupKind::Tp:
		return "tp";
	case GroupKind::Dp:
		return "dp";
	case GroupKind::Pp:
		return "pp";
	case GroupKind::Ep:
		return "ep";
	}
	return "unknown";
}

Layout layout_of(const SimConfig &cfg)
{
	Layout l;
	l.world = cfg.ranks;
	l.tp = std::max(1, cfg.tp);
	l.pp = cfg.pp >= 2 ? cfg.pp : 1;
	l.dp = std::max(1, cfg.ranks / (l.tp * l.pp));
	l.ep = std::max(1, cfg.ep);
	l.accum = std::max(1, cfg.accum);
	l.layers = std::max(1, cfg.layers);
	return l;
}

RankPlace place_of(const Layout &l, int rank)
{
	RankPlace p;
	p.tp_rank = rank % l.tp;
	p.dp_rank = (rank / l.tp) % l.dp;
	p.stage = rank / (l.tp * l.dp);
	p.ep_rank = p.dp_rank % l.ep;
	return p;
}

Group group_of(const Layout &l, GroupKind kind, int rank)
{
	const RankPlace p = place_of(l, rank);
	Group g;
	g.kind = kind;
	switch (kind) {
	case GroupKind::World:
		for (int r = 0; r < l.world; r++)
			g.members.push_back(r);
		g.rank = rank;
		break;
	case GroupKind::Tp:
		g.index = rank / l.tp;
		for (int i = 0; i < l.tp; i++)
			g.members.push_back(g.index * l.tp + i);
		g.rank = p.tp_rank;
		break;
	case GroupKind::Dp:
		g.index = p.stage * l.tp + p.tp_rank;
		for (int d = 0; d < l.dp; d++)
			g.members.push_back(p.stage * l.tp * l.dp + d * l.tp + p.tp_rank);
		g.rank = p.dp_rank;
		break;
	case GroupKind::Pp:
		g.index = rank % (l.tp * l.dp);
		for (int s = 0; s < l.pp; s++)
			g.members.push_back(s * l.tp * l.dp + g.index);
		g.rank = p.stage;
		break;
	case GroupKind::Ep: {
		const int dp_index = p.stage * l.tp + p.tp_rank;
		const int first = p.dp_rank / l.ep * l.ep;
		g.index = dp_index * (l.dp / l.ep) + p.dp_rank / l.ep;
		for (int d = first; d < first + l.ep; d++)
			g.members.push_back(p.stage * l.tp * l.dp + d * l.tp + p.tp_rank);
		g.rank = p.ep_rank;
		break;
	}
	}
	return g;
}

std::vector<GroupKind> comm_kinds(const Layout &l)
{
	// Megatron's initialize_model_parallel makes DP, then TP, then PP, then EP.
	std::vector<GroupKind> v = {GroupKind::World};
	if (l.dp > 1)
		v.push_back(GroupKind::Dp);
	if (l.tp > 1)
		v.push_back(GroupKind::Tp);
	if (l.pp > 1)
		v.push_back(GroupKind::Pp);
	if (l.ep > 1)
		v.push_back(GroupKind::Ep);
	return v;
}

std::vector<PipeAction> schedule_1f1b(int pp, int stage, int accum)
{
	const bool first = stage == 0, last = stage == pp - 1;
	std::vector<PipeAction> v;
	auto exchange = [&](std::vector<PipeP2p> ops) {
		std::vector<PipeP2p> kept;
		for (const PipeP2p &o : ops)
			if (!(o.next ? last : first))
				kept.push_back(o);
		if (!kept.empty())
			v.push_back({PipeAction::Exchange, 0, std::move(kept)});
	};
	auto compute = [&](PipeAction::Kind k, int micro) { v.push_back({k, micro, {}}); };
	// Ops of one exchange, in Megatron's order: send-prev, recv-prev, send-next, recv-next.
	auto recv_forward = [](int m) { return PipeP2p{false, false, m}; };
	auto send_forward = [](int m) { return PipeP2p{true, true, m}; };
	auto recv_backward = [](int m) { return PipeP2p{false, true, m}; };
	auto send_backward = [](int m) { return PipeP2p{true, false, m}; };

	const int warmup = std::min(pp - stage - 1, accum);
	const int remaining = accum - warmup;
	int f = 0, b = 0;
	for (int i = 0; i < warmup; i++, f++) {
		exchange({recv_forward(f)});
		compute(PipeAction::Forward, f);
		exchange({send_forward(f)});
	}
	if (remaining > 0)
		exchange({recv_forward(f)});
	for (int i = 0; i < remaining; i++) {
		compute(PipeAction::Forward, f);
		exchange({send_forward(f), recv_backward(b)});
		f++;
		compute(PipeAction::Backward, b);
		if (i == remaining - 1)
			exchange({send_backward(b)});
		else
			exchange({send_backward(b), recv_forward(f)});
		b++;
	}
	for (int i = 0; i < warmup; i++, b++) {
		exchange({recv_backward(b)});
		compute(PipeAction::Backward, b);
		exchange({send_backward(b)});
	}
	return v;
}

NcclCall tp_all_reduce_call()
{
	return {Op::AllReduce, std::size_t{1} << 18, kNcclBfloat16, kNcclSum};
}

NcclCall pp_activation_call(bool send, int peer)
{
	return {send ? Op::Send : Op::Recv, std::size_t{1} << 16, kNcclFloat16, kNcclSum, 0, peer, true};
}

NcclCall dp_all_reduce_call()
{
	// The gradient buffer is the model's: the same size every step (DDP's
	// buckets are fixed after the first iteration, Megatron's buffer at start).
	return {Op::AllReduce, std::size_t{1} << 22, kNcclFloat32, kNcclSum};
}

int framework_units(const Layout &l)
{
	return 3 * l.layers * l.accum + l.layers;
}

double framework_kernel_us(const SimConfig &cfg, int kernel)
{
	const Layout l = layout_of(cfg);
	const double unit_us = static_cast<double>(cfg.step_ms) * 1000.0 / framework_units(l);
	switch (kernel) {
	case kFwdKernel:
		return unit_us * 0.5 * kGpuBusyShare;
	case kBwdKernel:
		return unit_us * kGpuBusyShare;
	case kLossKernel:
		return unit_us * kLossUnits * kGpuBusyShare;
	case kOptKernel:
		return unit_us * kGpuBusyShare;
	default: // --kernel-names beyond the four: unused by this step, given a length anyway
		return unit_us * 0.5 * kGpuBusyShare * kernel_weight(kernel < 0 ? 0 : kernel);
	}
}

std::uint64_t mix(std::uint64_t seed, std::initializer_list<std::uint64_t> values)
{
	std::uint64_t h = seed;
	for (std::uint64_t v : values) {
		std::uint64_t z = h ^ v;
		z += 0x9e3779b97f4a7c15ull;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		h = z ^ (z >> 31);
	}
	return h;
}

int moe_tokens(std::int64_t step, int micro, int layer, int src, int dst)
{
	const std::uint64_t h = mix(kMoeSeed, {static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(micro),
					       static_cast<std::uint64_t>(layer), static_cast<std::uint64_t>(src),
					       static_cast<std::uint64_t>(dst)});
	return kMoeMinTokens + static_cast<int>(h % kMoeTokenSpread);
}

double jitter_factor(double pct, int rank, std::int64_t step)
{
	if (pct <= 0)
		return 1.0;
	const std::uint64_t h = mix(kJitterSeed, {static_cast<std::uint64_t>(rank), static_cast<std::uint64_t>(step)});
	const double u = static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0;
	return 1.0 + pct / 100.0 * u;
}

} // namespace argus::sim
