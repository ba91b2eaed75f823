// A rank's communicators (worker_rank.h), made as PyTorch/Megatron make them:
// the world with ncclCommInitRank from the launcher's unique id; in a
// framework job (layout.h) the DP and PP groups with ncclCommInitRank from an
// id every member derives alike from the world's (as if the group's first rank
// had broadcast it through the store), the TP and EP groups with ncclCommSplit
// from the world (color = group index, key = world rank). Every rank makes them
// in the same order (comm_kinds). Also their truth: the ids, members and logs.
#include "worker_rank.h"

#include "sim_comm_ids.h"

#include <cstring>
#include <map>

namespace argus::sim::worker_detail {
namespace {

std::string hex16(const std::array<unsigned char, 16> &b)
{
	static const char digits[] = "0123456789abcdef";
	std::string s;
	for (unsigned char c : b) {
		s.push_back(digits[c >> 4]);
		s.push_back(digits[c & 0xf]);
	}
	return s;
}

constexpr int kKindCode[] = {ARGUS_SIM_COMM_WORLD, ARGUS_SIM_COMM_TP, ARGUS_SIM_COMM_DP, ARGUS_SIM_COMM_PP,
			     ARGUS_SIM_COMM_EP};

} // namespace

StepResult Rank::make_comms()
{
	auto failed = [&](const char *api, ncclResult_t r) {
		truth_.nccl_errors[api][nccl_result_name(r)]++;
		note_nccl_error(api, r);
		return StepResult::NcclFailed;
	};
	RankComm world;
	world.group = group_of(layout_, GroupKind::World, rank_);
	std::memcpy(world.id.data(), id_.internal, world.id.size());
	truth_.nccl_init++;
	if (ncclResult_t r = nc_.ncclCommInitRank(&comm_, world_, id_, rank_); r != 0) {
		comm_ = nullptr;
		return failed("ncclCommInitRank", r);
	}
	world.handle = comm_;
	world.handle_value = reinterpret_cast<std::uintptr_t>(comm_);
	comms_.push_back(world);
	if (!cfg_.framework)
		return StepResult::Ok;

	std::uint64_t splits = 0; // the world's children so far (the shim derives their ids from it)
	for (GroupKind kind : comm_kinds(layout_)) {
		if (kind == GroupKind::World)
			continue;
		RankComm c;
		c.group = group_of(layout_, kind, rank_);
		ncclComm_t h = nullptr;
		unsigned char id[ARGUS_SIM_UNIQUE_ID_BYTES];
		if (kind == GroupKind::Tp || kind == GroupKind::Ep) {
			if (!nc_.ncclCommSplit) {
				log("the NCCL library has no ncclCommSplit (--tp/--ep need it)");
				return StepResult::NcclFailed;
			}
			c.split = true;
			argus_sim_derive_id(id_.internal, ARGUS_SIM_ID_SPLIT, splits++,
					    static_cast<std::uint32_t>(c.group.index), id);
			truth_.nccl_split++;
			if (ncclResult_t r = nc_.ncclCommSplit(comm_, c.group.index, rank_, &h, nullptr); r != 0 || !h)
				return failed("ncclCommSplit", r != 0 ? r : 3 /* ncclInternalError */);
		} else {
			argus_sim_derive_id(id_.internal, ARGUS_SIM_ID_GROUP,
					    static_cast<std::uint64_t>(kKindCode[static_cast<int>(kind)]),
					    static_cast<std::uint64_t>(c.group.index), id);
			NcclUniqueId uid{};
			std::memcpy(uid.internal, id, sizeof uid.internal);
			truth_.nccl_init++;
			if (ncclResult_t r = nc_.ncclCommInitRank(&h, static_cast<int>(c.group.members.size()), uid,
								  c.group.rank);
			    r != 0)
				return failed("ncclCommInitRank", r);
		}
		std::memcpy(c.id.data(), id, c.id.size());
		c.handle = h;
		c.handle_value = reinterpret_cast<std::uintptr_t>(h);
		comms_.push_back(std::move(c));
	}
	return StepResult::Ok;
}

// Children first, then the world (comm_), as a framework tears its groups down.
void Rank::destroy_comms(bool abort_comm)
{
	for (auto it = comms_.rbegin(); it != comms_.rend(); ++it) {
		if (!it->handle || it->handle == comm_)
			continue;
		if (abort_comm)
			nc_.ncclCommAbort(it->handle);
		else
			nc_.ncclCommDestroy(it->handle);
		it->handle = nullptr;
	}
	if (comm_) {
		if (abort_comm)
			nc_.ncclCommAbort(comm_);
		else
			nc_.ncclCommDestroy(comm_);
		comm_ = nullptr;
		if (!comms_.empty())
			comms_[0].handle = nullptr;
	}
}

ncclComm_t Rank::comm_of(GroupKind kind) const
{
	for (const RankComm &c : comms_)
		if (c.group.kind == kind)
			return c.handle;
	return nullptr;
}

const RankComm *Rank::comm_by_handle(std::uint64_t handle) const
{
	for (const RankComm &c : comms_)
		if (c.handle_value == handle)
			return &c;
	return nullptr;
}

// The truth's "communicators" (with their collective logs), "collectives" (the
// world's) and "p2p", from the shim's logs (kept by the emulated GPU).
void Rank::comms_truth()
{
	std::vector<argus_sim_coll_rec> colls;
	if (cu_.argus_sim_coll_log) {
		colls.resize(ARGUS_SIM_COLL_LOG_MAX);
		int n = cu_.argus_sim_coll_log(colls.data(), ARGUS_SIM_COLL_LOG_MAX);
		colls.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
	}
	std::map<std::uint64_t, nlohmann::json> per_comm;
	truth_.collectives.clear();
	const std::uint64_t world = comms_.empty() ? 0 : comms_[0].handle_value;
	for (const auto &c : colls) {
		per_comm[c.comm].push_back({c.seq, c.call_ns, c.gpu_start_ns, c.gpu_end_ns});
		// Without a framework job the world is the only communicator: every entry (as before).
		if (c.comm == world || !cfg_.framework)
			truth_.collectives.push_back(c);
	}
	truth_.communicators = nlohmann::json::array();
	for (const RankComm &c : comms_) {
		auto it = per_comm.find(c.handle_value);
		truth_.communicators.push_back({
			{"kind", std::string(group_kind_label(c.group.kind))},
			{"index", c.group.index},
			{"rank", c.group.rank},
			{"nranks", c.group.members.size()},
			{"members", c.group.members},
			{"made", c.split ? "split" : "init_rank"},
			{"id", hex16(c.id)},
			{"collectives", it == per_comm.end() ? nlohmann::json::array() : it->second},
		});
	}
	truth_.p2p = nlohmann::json::array();
	if (!cu_.argus_sim_p2p_log)
		return;
	std::vector<argus_sim_p2p_rec> ops(ARGUS_SIM_P2P_LOG_MAX);
	int n = cu_.argus_sim_p2p_log(ops.data(), ARGUS_SIM_P2P_LOG_MAX);
	for (int i = 0; i < n; i++) {
		const argus_sim_p2p_rec &o = ops[static_cast<std::size_t>(i)];
		const RankComm *c = comm_by_handle(o.comm);
		if (!c)
			continue;
		const int peer = o.peer >= 0 && static_cast<std::size_t>(o.peer) < c->group.members.size()
					 ? c->group.members[static_cast<std::size_t>(o.peer)]
					 : -1;
		truth_.p2p.push_back({{"op", o.is_send ? "send" : "recv"},
				      {"comm", std::string(group_kind_label(c->group.kind))},
				      {"comm_index", c->group.index},
				      {"peer", peer},
				      {"bytes", o.bytes},
				      {"call_ns", o.call_ns},
				      {"gpu_start_ns", o.gpu_start_ns},
				      {"gpu_end_ns", o.gpu_end_ns}});
	}
}

} // namespace argus::sim::worker_detail
