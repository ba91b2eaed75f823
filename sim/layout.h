// The framework job's layout (--tp, --ep, --pp, --accum; sim_config.h): which
// groups a rank belongs to, the pipeline schedule each stage runs, and the
// deterministic draws of a step (MoE token counts, compute jitter). Pure
// functions of the configuration, so tests recompute the truth from them.
//
// Megatron's rank order, TP fastest, then DP, then PP outermost:
//   tp_rank = r % tp, dp_rank = (r / tp) % dp, stage = r / (tp * dp),
//   dp = ranks / (tp * pp); EP groups are `ep` consecutive DP ranks
//   (ep_rank = dp_rank % ep). --pp alone: stage(r) = r / (ranks / pp), the same.
// Groups and their index (members in rank order; a rank's place in its group
// is its index there):
//   tp  index r / tp                     members idx*tp + i
//   dp  index stage * tp + tp_rank       members stage*tp*dp + d*tp + tp_rank
//   pp  index r % (tp * dp)              members s*tp*dp + idx
//   ep  index dp_index * (dp/ep) + dp_rank / ep
//       members: the DP group's members with dp_rank in [g*ep, (g+1)*ep)
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "sim_config.h"
#include "workload.h"

namespace argus::sim {

struct Layout {
	int world = 1;
	int tp = 1, pp = 1, dp = 1, ep = 1;
	int accum = 1;
	int layers = 4; // per stage
};

struct RankPlace {
	int stage = 0, tp_rank = 0, dp_rank = 0, ep_rank = 0;
};

enum class GroupKind { World, Tp, Dp, Pp, Ep };
std::string_view group_kind_label(GroupKind k); // "world", "tp", "dp", "pp", "ep"

struct Group {
	GroupKind kind = GroupKind::World;
	int index = 0;
	int rank = 0; // the rank's place in it
	std::vector<int> members; // world ranks, in group-rank order
};

Layout layout_of(const SimConfig &cfg);
RankPlace place_of(const Layout &l, int rank);
Group group_of(const Layout &l, GroupKind kind, int rank);
// The communicators every rank makes, in creation order (the world first): a
// group kind only when its groups have more than one rank.
std::vector<GroupKind> comm_kinds(const Layout &l);

// ---- the 1F1B schedule (Megatron's forward_backward_pipelining_without_interleaving) ----

// One send or receive of a pipeline exchange: to/from the next stage or the previous.
struct PipeP2p {
	bool send = false;
	bool next = false; // the peer is stage + 1 (else stage - 1)
	int micro = 0;
	bool operator==(const PipeP2p &) const = default;
};

struct PipeAction {
	enum Kind { Forward, Backward, Exchange } kind = Forward;
	int micro = 0;              // Forward/Backward
	std::vector<PipeP2p> ops;   // Exchange: one ncclGroupStart..End
};

// A stage's step: warm-up forwards min(pp - stage - 1, K), then one forward and
// one backward per remaining micro-batch, then the cool-down backwards. The
// exchanges are Megatron's recv_forward, send_forward, send_forward_recv_backward,
// send_backward_recv_forward, send_backward and recv_backward, each a group of
// its sends and receives in the order send-prev, recv-prev, send-next,
// recv-next; one without any operation (the first stage's recv_forward...) is
// left out.
std::vector<PipeAction> schedule_1f1b(int pp, int stage, int accum);

// ---- deterministic draws ----

inline constexpr std::uint64_t kMoeSeed = 0x6d6f652d746f6b73ull;    // "moe-toks"
inline constexpr std::uint64_t kJitterSeed = 0x6a69747465722121ull; // "jitter!!"
// h = seed; for each value v: h = splitmix64_finalize(h ^ v).
std::uint64_t mix(std::uint64_t seed, std::initializer_list<std::uint64_t> values);

// MoE: tokens rank `src` of an EP group routes to the experts of rank `dst` for
// micro-batch `micro` of step `step` at global layer `layer` (stage * layers + l):
// 64 + mix(kMoeSeed, {step, micro, layer, src, dst}) % 449, uneven and new every
// step. The dispatch sends t(me, j) to j and receives t(j, me); the combine sends
// t(j, me) back and receives t(me, j); backward repeats both, mirrored.
inline constexpr int kMoeMinTokens = 64;
inline constexpr int kMoeTokenSpread = 449;
inline constexpr std::size_t kMoeHidden = 512; // bfloat16 elements per token
int moe_tokens(std::int64_t step, int micro, int layer, int src, int dst);

// ---- the framework step's calls and compute (workload.h documents them) ----

NcclCall tp_all_reduce_call();                       // bfloat16 count 1<<18, sum
NcclCall pp_activation_call(bool send, int peer);    // float16 count 1<<16
NcclCall dp_all_reduce_call();                      // float32 count 1<<22, every step
// Host compute units of a step: 3 per layer and micro-batch (forward 1, backward
// 2) plus 1 per layer for the optimizer; the last stage's loss adds 1/4 per
// micro-batch on top (by design: it is not a straggler).
int framework_units(const Layout &l);
inline constexpr double kLossUnits = 0.25;
// Kernels of the framework step: forward chunks launch kernel 0 (sim_gemm_fwd,
// half a unit of host compute), backward ones kernel 1 (sim_gemm_bwd, one unit),
// the loss kernel 2 (sim_layernorm), the optimizer kernel 3 (sim_adam_step, one
// unit per layer); each kernel runs kGpuBusyShare of its chunk's nominal host time.
enum FrameworkKernel { kFwdKernel = 0, kBwdKernel = 1, kLossKernel = 2, kOptKernel = 3 };
double framework_kernel_us(const SimConfig &cfg, int kernel);

// --jitter PCT: the compute factor of `rank` at `step`,
// 1 + PCT/100 * u with u = (mix(kJitterSeed, {rank, step}) >> 11) * 2^-53 * 2 - 1.
double jitter_factor(double pct, int rank, std::int64_t step);

} // namespace argus::sim
