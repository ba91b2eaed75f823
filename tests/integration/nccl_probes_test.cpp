// The NCCL probes alone on the real kernel: the BPF backend loaded, the attach
// plan on a private copy of the sim's libnccl.so.2, the records read as the
// agent reads them. What the simulated job recorded calling is what the
// records say: each send/recv's peer, the group it was made in, the groups
// counted, and a split's parent, color, key and count.
#include <mutex>

#include "tests/integration/harness.h"
#include "userspace/attach/attach_plan.h"
#include "userspace/probes/bpf_loader.h"
#include "userspace/wire/event_decoder.h"

namespace argus::itest {
namespace {

struct Probed {
  std::unique_ptr<BpfLoader> loader;
  AttachedUprobes links;
  std::vector<DecodedEvent> events;
  fs::path nccl;

  explicit Probed(const fs::path& dir) {
    nccl = dir / "libnccl.so.2";  // an inode of its own: no one else's job fires these probes
    fs::copy_file(lib("libnccl.so.2"), nccl);
    auto l = BpfLoader::create({});
    if (!l.ok()) ADD_FAILURE() << l.error();
    if (!l.ok()) return;
    loader = std::move(*l);
    auto symbols = elf::read_symbols(nccl.string());
    if (!symbols.ok()) ADD_FAILURE() << symbols.error();
    if (!symbols.ok()) return;
    links = loader->attach_uprobes(nccl.string(), plan_probes(*symbols, LibraryKind::Nccl, ProbeSet::Default));
    loader->set_event_handler([this](const void* data, size_t size) {
      if (auto ev = decode_event(data, size)) events.push_back(std::move(*ev));
    });
  }
  // Runs the sim on this copy of the shim until it ends, reading records meanwhile.
  std::map<int, json> run(const fs::path& dir, const std::string& job, int ranks, std::vector<std::string> extra) {
    extra.insert(extra.end(), {"--nccl-lib", nccl.string()});
    const auto out = dir / ("truth-" + job);
    Child sim(sim_args(out, job, ranks, 2, extra), dir / "sim.log");
    std::optional<int> st;
    for (int i = 0; i < 1200 && !st; ++i) {
      loader->poll_events(100);
      st = sim.wait_for(0ms);
    }
    loader->poll_events(0);
    if (!st || !WIFEXITED(*st) || WEXITSTATUS(*st) != 0) return {};
    return read_truth(out);
  }
  template <typename T>
  std::vector<T> of(int pid) const {
    std::vector<T> out;
    for (const auto& ev : events)
      if (const auto* e = std::get_if<T>(&ev); e && static_cast<int>(e->hdr.tgid) == pid) out.push_back(*e);
    return out;
  }
  std::optional<argus_stat_val> stat(int pid, uint16_t kind, uint16_t sub) const {
    for (const auto& s : loader->read_stats(static_cast<uint32_t>(pid)))
      if (s.key.kind == kind && s.key.sub == sub) return s.value;
    return std::nullopt;
  }
};

// Two pipeline stages, 1F1B over 2 micro-batches: every exchange is one group
// of a send, a receive or both.
TEST(NcclProbes, SendRecvCarryTheirPeerAndTheGroupTheyWereMadeIn) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("nccl-p2p");
  Probed p(dir);
  ASSERT_TRUE(p.loader);
  ASSERT_GT(p.links.probes, 0u);
  ASSERT_TRUE(p.links.errors.empty()) << p.links.errors.front();
  const auto truth = p.run(dir, "p2p-job", 2, {"--pp", "2", "--accum", "2"});
  ASSERT_EQ(truth.size(), 2u) << read_text(dir / "sim.log");
  for (const auto& [rank, t] : truth) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const int pid = t.at("pid").get<int>();
    std::vector<std::pair<std::string, int>> want;  // (op, peer), in call order
    for (const auto& x : t.at("p2p")) want.push_back({x.at("op").get<std::string>(), x.at("peer").get<int>()});
    ASSERT_FALSE(want.empty());
    std::vector<std::pair<std::string, int>> got;
    std::set<uint64_t> groups;
    for (const auto& e : p.of<argus_nccl_coll_event>(pid)) {
      if (e.op != ARGUS_OP_SEND && e.op != ARGUS_OP_RECV) continue;
      got.push_back({e.op == ARGUS_OP_SEND ? "send" : "recv", e.peer});  // a 2-rank PP group: rank = world rank
      EXPECT_EQ(e.seq, 0u);
      EXPECT_NE(e.group, 0u);  // every pipeline exchange is grouped
      groups.insert(e.group);
    }
    EXPECT_EQ(got, want);
    const uint64_t ended = t.at("nccl_group").at("end").get<uint64_t>();
    EXPECT_EQ(groups.size(), ended);  // no group here is empty
    const auto g = p.stat(pid, ARGUS_STAT_NCCL_GROUP, 0);
    ASSERT_TRUE(g);
    EXPECT_EQ(g->count, ended);
    EXPECT_EQ(g->sum, want.size());  // operations recorded inside them
    const auto timed = p.stat(pid, ARGUS_STAT_NCCL_GROUP_WAIT, 0);  // each end, outermost with operations
    ASSERT_TRUE(timed);
    EXPECT_EQ(timed->count, ended);
    // A send is still counted as op="send".
    const auto sends = p.stat(pid, ARGUS_STAT_NCCL_CALLS, ARGUS_OP_SEND);
    ASSERT_TRUE(sends);
    EXPECT_EQ(sends->count, t.at("nccl").at("send").at("calls").get<uint64_t>());
  }
}

// A blocking backend waits for a grouped exchange in its ncclGroupEnd: every
// outermost end with operations is timed, and the time the probes give is the
// time the job itself measured around those calls, less the probes' own cost.
TEST(NcclProbes, TheOutermostGroupEndIsTimedWhereTheExchangeWaits) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("nccl-group-wait");
  Probed p(dir);
  ASSERT_TRUE(p.loader);
  const auto truth = p.run(dir, "group-wait-job", 2, {"--pp", "2", "--accum", "2", "--nccl-mode", "blocking"});
  ASSERT_EQ(truth.size(), 2u) << read_text(dir / "sim.log");
  for (const auto& [rank, t] : truth) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const int pid = t.at("pid").get<int>();
    const uint64_t ended = t.at("nccl_group").at("end").get<uint64_t>();
    const double held_s = t.at("nccl_group").at("end_seconds").get<double>();
    ASSERT_GT(ended, 0u);
    ASSERT_GT(held_s, 0.0);
    const auto w = p.stat(pid, ARGUS_STAT_NCCL_GROUP_WAIT, 0);
    ASSERT_TRUE(w);
    EXPECT_EQ(w->count, ended);  // every group here has operations, none nests
    const double probed_s = static_cast<double>(w->sum) / 1e9;
    EXPECT_LE(probed_s, held_s);        // inside the call, within the job's clock reads around it
    EXPECT_GE(probed_s, 0.5 * held_s);  // less only the probes' entry and return
  }
  // No ncclGroupEnd return went unmatched (the ends are timed from their entry).
  const auto errors = p.loader->read_errors();
  const auto unmatched = errors.find(ARGUS_ERR_RETURN_UNMATCHED);
  EXPECT_EQ(unmatched == errors.end() ? 0u : unmatched->second, 0u);
}

// TP 2 x DP 2: the TP groups are split from the world, color = r / 2, key = r.
TEST(NcclProbes, ASplitSaysItsParentColorKeyAndCount) {
  ARGUS_REQUIRE_ROOT();
  const auto dir = make_temp_dir("nccl-split");
  Probed p(dir);
  ASSERT_TRUE(p.loader);
  const auto truth = p.run(dir, "split-job", 4, {"--tp", "2"});
  ASSERT_EQ(truth.size(), 4u) << read_text(dir / "sim.log");
  for (const auto& [rank, t] : truth) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const int pid = t.at("pid").get<int>();
    const auto inits = p.of<argus_nccl_init_event>(pid);
    ASSERT_FALSE(inits.empty());
    const uint64_t world = inits.front().comm;  // the world comes first
    const auto children = p.of<argus_nccl_child_event>(pid);
    ASSERT_EQ(children.size(), 1u);
    const auto& c = children[0];
    EXPECT_EQ(c.api, static_cast<uint32_t>(ARGUS_NCCL_COMM_SPLIT));
    EXPECT_EQ(c.result, 0);
    EXPECT_EQ(c.parent, world);
    EXPECT_EQ(c.nth, 1u);
    EXPECT_EQ(c.color, rank / 2);
    EXPECT_EQ(c.key, rank);
    EXPECT_NE(c.comm, 0u);  // a blocking split wrote the child's handle before it returned
    EXPECT_NE(c.newcomm_ptr, 0u);
    // The TP collectives ran on that handle, numbered from 1.
    uint64_t tp_calls = 0;
    for (const auto& e : p.of<argus_nccl_coll_event>(pid)) tp_calls += e.comm == c.comm;
    for (const auto& comm : t.at("communicators")) {
      if (comm.at("kind") == "tp") {
        EXPECT_EQ(tp_calls, comm.at("collectives").size());
      }
    }
  }
}

}  // namespace
}  // namespace argus::itest
