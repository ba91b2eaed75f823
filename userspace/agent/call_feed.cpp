#include "userspace/agent/call_feed.h"

#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "userspace/common/comm_id.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

bool made(int result) { return result == 0 || result == ARGUS_NCCL_IN_PROGRESS; }

}  // namespace

std::optional<uint64_t> read_process_word(int pid, uint64_t addr) {
  uint64_t v = 0;
  iovec local{&v, sizeof v};
  iovec remote{reinterpret_cast<void*>(addr), sizeof v};
  if (addr == 0 || process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof v))
    return std::nullopt;
  return v;
}

std::optional<std::string> CallFeed::job_of(int pid) const {
  const auto m = registry_.membership(pid);
  return m ? std::optional(m->job_id) : std::nullopt;
}

void CallFeed::on_nccl_init(const argus_nccl_init_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  const std::string name = comm_id_from_uid(e.uid, sizeof(e.uid));  // never the raw id
  if (made(e.result) && names_.on_init(pid, e.comm, name)) tracker_.add_member(name, pid, e.nranks, e.rank);
  NcclInitInfo info;
  info.rank = e.rank;
  info.nranks = e.nranks;
  info.result = e.result;
  info.api = e.api;
  info.comm = e.comm;
  info.comm_id = name;
  registry_.on_nccl_init(pid, info);
}

// A split or shrink: the child named from its parent's name, which the parent's
// making gave it (or, attached late, its first use). A split's rank in the
// child follows the keys of members this agent may not see: unknown (-1).
void CallFeed::on_nccl_child(const argus_nccl_child_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  if (!made(e.result)) return;
  const std::string parent = comm_key(pid, e.parent);
  const bool shrink = e.api == ARGUS_NCCL_COMM_SHRINK;
  std::string name;
  NcclInitInfo info;
  if (shrink) {
    const size_t n = std::clamp(e.n_excluded, 0, ARGUS_NCCL_EXCLUDE_MAX);
    std::vector<int> excluded(e.excluded, e.excluded + n);
    name = shrink_child_name(parent, e.nth, excluded, e.n_excluded);
    for (const auto& p : registry_.comm_inits(pid)) {
      if (p.comm_id != parent || !made(p.result)) continue;
      const auto [rank, nranks] = shrink_rank(p.rank, p.nranks, excluded, e.n_excluded);
      info.rank = rank;
      info.nranks = nranks;
    }
  } else {
    name = split_child_name(parent, e.nth, e.color);
    info.color = e.color;
    info.key = e.key;
  }
  if (name.empty()) return;  // NOCOLOR: no communicator (or a parent past the cap)
  const bool named = e.comm != 0 ? names_.on_init(pid, e.comm, name) : true;
  if (e.comm == 0) names_.on_pending_child(pid, e.newcomm_ptr, name);  // NCCL writes it later
  if (named) tracker_.add_member(name, pid, info.nranks, info.rank);
  if (named && !shrink)
    for (const auto& p : registry_.comm_inits(pid))
      if (p.comm_id == parent && made(p.result) && p.rank >= 0) tracker_.add_split_member(name, pid, e.key, p.rank);
  info.result = e.result;
  info.api = e.api;
  info.comm = e.comm;
  info.comm_id = name;
  info.parent = parent;
  registry_.on_nccl_init(pid, info);
}

// One process holds the whole clique: every handle is one communicator, whose
// ranks this process's calls cannot tell apart (one pid), so no rank is given.
void CallFeed::on_nccl_init_all(const argus_nccl_init_all_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  if (!made(e.result)) return;
  const std::string name = init_all_name(pid, names_.next_init_all(pid));
  const int n = std::clamp(e.ndev, 0, ARGUS_NCCL_INIT_ALL_MAX);
  bool named = false;
  for (int i = 0; i < n; ++i) named = (e.comms[i] != 0 && names_.on_init(pid, e.comms[i], name)) || named;
  if (named) tracker_.add_member(name, pid, e.ndev, -1);
  NcclInitInfo info;
  info.nranks = e.ndev;
  info.result = e.result;
  info.api = ARGUS_NCCL_COMM_INIT_ALL;
  info.comm = n > 0 ? e.comms[0] : 0;
  info.comm_id = name;
  registry_.on_nccl_init(pid, info);
}

// A pending child is the handle NCCL wrote through its out-pointer: read
// there when the process lets us; else, the oldest pending child (a group of
// splits ends before their children are used, in the order they were made).
bool CallFeed::bind_pending_child(int pid, uint64_t handle) {
  const auto& pending = names_.pending(pid);
  if (pending.empty()) return false;
  bool read_any = false;
  for (const auto& p : pending) {
    const auto v = read_word_ ? read_word_(pid, p.newcomm_ptr) : std::nullopt;
    read_any = read_any || v.has_value();
    if (v && *v == handle) return names_.bind_pending(pid, p.newcomm_ptr, handle);
  }
  return !read_any && names_.bind_pending(pid, 0, handle);
}

std::string CallFeed::comm_key(int pid, uint64_t handle) {
  std::string key = names_.name_of(pid, handle);
  if (!key.empty()) return key;
  if (bind_pending_child(pid, handle)) return names_.name_of(pid, handle);
  // A handle whose making was not seen: rare, so the registry is asked only then.
  key = names_.key_for(pid, handle, job_of(pid));
  if (!key.empty())
    spdlog::info("pid {}: communicator {:#x} made before the agent attached; named {} by its first use", pid,
                 handle, key);
  return key;
}

void CallFeed::on_collective(const argus_nccl_coll_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  const std::string key = on_call(pid, {e.comm, e.op, e.peer, e.seq, e.bytes, e.hdr.ts_ns, nccl_op_label(e.op)});
  if (auto j = groups_.on_nccl_call(pid, e.hdr.tid, key)) join_nccl_group(pid, key, *j);
}

// A ProcessGroupNCCL's communicator keeps the group's label; the group lists
// it. Its point-to-point communicators (one per peer pair) are "<label> p2p".
void CallFeed::join_nccl_group(int pid, const std::string& comm, const ProcessGroups::NcclJoin& j) {
  const std::string label = process_group_label(j.group);
  tracker_.set_label(comm, j.p2p ? label + " p2p" : label);
  if (!j.p2p) registry_.on_process_group(pid, j.group);
  spdlog::debug("pid {}: NCCL communicator {} is c10d group {}{}", pid, comm, label, j.p2p ? " (p2p)" : "");
}

// c10d's calls carry no size (a tensor list the probe does not walk): a
// late-attached rank's are numbered by order alone. ProcessGroupNCCL's are
// the NCCL calls they make, which the NCCL probes see: counted there once,
// and only joined here.
void CallFeed::on_c10d_collective(const argus_c10d_coll_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  if (e.kind == ARGUS_C10D_NCCL) {
    groups_.on_nccl_backend_call(pid, e.hdr.tid, e.backend, e.op == ARGUS_OP_SEND || e.op == ARGUS_OP_RECV);
    return;
  }
  on_call(pid, {e.backend, e.op, e.peer, e.seq, 0, e.hdr.ts_ns, c10d_op_label(e.op)});
}

// The communicator a call ran on, by the name all its ranks share; a
// late-attached rank's collectives held back until numbered like its peers'.
std::string CallFeed::on_call(int pid, const Call& c) {
  std::string key = comm_key(pid, c.handle);
  timeline_.on_collective_enter(pid, c.ts_ns, tracker_.step_seconds(pid));
  timeline_.on_collective_call(pid, c.label, key, c.ts_ns);
  if (key.empty()) return key;  // the process keeps its most names (counted)
  if (c.op == ARGUS_OP_SEND || c.op == ARGUS_OP_RECV) {
    tracker_.on_p2p(key, pid, c.op == ARGUS_OP_SEND, c.peer, c.ts_ns);
    return key;
  }
  if (c.seq == 0) return key;
  const bool init_seen = names_.anchored(pid, c.handle);
  const auto a = aligner_.on_arrival(key, pid, init_seen, c.seq, c.ts_ns, {c.op, c.bytes});
  if (!a) return key;
  if (a->first && !init_seen) {
    const auto m = registry_.membership(pid);
    tracker_.add_member(key, pid, m ? m->world_size : 0);
    spdlog::info("pid {} on {}: attached after its communicator began; its collectives numbered as its peers': "
                 "{}, {:+} on its own count",
                 pid, key, label_of(a->how), a->shift);
  }
  tracker_.on_arrival(key, pid, a->seq, a->ts_ns, c.op, c.bytes);
  return key;
}

// A backend is named by the next naming of a group on the thread that made it.
void CallFeed::on_c10d_backend(const argus_c10d_backend_event& e) {
  ProcessGroupInfo b;
  b.backend = e.backend;
  b.backend_kind = c10d_backend_label(e.kind);
  b.rank = e.rank;
  b.size = e.size;
  groups_.on_backend(static_cast<int>(e.hdr.tgid), e.hdr.tid, b);
}

// Named: its backends are a communicator every member names alike, each
// call on them counted from the first (the backend's making was seen).
void CallFeed::on_c10d_group(const argus_c10d_group_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  const std::string text(e.text, strnlen(e.text, sizeof e.text));
  if (e.what == ARGUS_C10D_GROUP_DESC) {
    for (const auto& b : groups_.on_desc(pid, e.group, text)) {
      tracker_.set_label(b.nccl_comm.empty() ? b.comm_id : b.nccl_comm, process_group_label(b));
      registry_.on_process_group(pid, b);
    }
    return;
  }
  if (e.what != ARGUS_C10D_GROUP_NAME || text.empty()) return;
  const std::string id = process_group_comm_id(job_of(pid), pid, text);
  for (const auto& b : groups_.on_name(pid, e.hdr.tid, e.group, text, id)) {
    // An NCCL backend's calls are its NCCL communicator's (joined at its first call).
    const bool nccl = b.backend_kind == c10d_backend_label(ARGUS_C10D_NCCL);
    if (!nccl && names_.on_init(pid, b.backend, id)) tracker_.add_member(id, pid, b.size, b.rank);
    tracker_.set_label(b.nccl_comm.empty() ? id : b.nccl_comm, process_group_label(b));
    registry_.on_process_group(pid, b);
  }
}

void CallFeed::on_call_done(const argus_call_done_event& e) {
  const int pid = static_cast<int>(e.hdr.tgid);
  const bool collective = e.cls == ARGUS_CLS_NCCL;
  const std::string comm = collective ? names_.name_of(pid, e.ptr) : std::string();
  timeline_.on_call(pid, collective, collective ? nccl_call_label(e.kind, e.id) : cuda_api_label(e.id), comm, e.start_ns,
                    e.hdr.ts_ns, e.ret);
  if (!collective && e.kind == ARGUS_STAT_CUDA_SYNC) tracker_.on_sync(pid, e.start_ns, e.hdr.ts_ns);
}

void CallFeed::on_gpu_batch(GpuBatch& b) {
  const int pid = static_cast<int>(b.hdr.tgid);
  const uint64_t truncated = b.sent > b.recs.size() ? b.sent - b.recs.size() : 0;
  timeline_.on_gpu_batch(pid, std::move(b.recs), b.dropped + truncated, tracker_.step_seconds(pid));
}

void CallFeed::on_gpu_name(const GpuName& n) { timeline_.on_gpu_name(static_cast<int>(n.hdr.tgid), n.name_id, n.name); }

}  // namespace argus
