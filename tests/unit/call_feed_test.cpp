// The call feed on recorded records: split, shrink and InitAll children named
// alike on every member, members given to the tracker with their rank where it
// is known, send/recv handed to the tracker with their peer, and a late
// attach's handles kept apart.
#include "userspace/agent/call_feed.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "tests/support/manual_clock.h"

namespace argus {
namespace {

argus_event_header header(uint32_t type, int pid, uint64_t ts) {
  argus_event_header h{};
  h.type = type;
  h.tgid = static_cast<uint32_t>(pid);
  h.tid = static_cast<uint32_t>(pid);
  h.ts_ns = ts;
  return h;
}

struct Feed {
  testing_support::ManualClock clock{1'000'000'000, 1.7e9};
  RankRegistry registry{clock, {"n", 300, 10, false}};
  CommNames names;
  ProcessGroups groups;
  SeqAligner aligner;
  CollectiveTracker tracker;
  NodeTimeline timeline;
  std::map<std::pair<int, uint64_t>, uint64_t> memory;  // (pid, addr) -> word: what read_word sees
  bool readable = true;
  CallFeed feed{registry, names, groups, aligner, tracker, timeline, [this](int pid, uint64_t addr) -> std::optional<uint64_t> {
                  if (!readable) return std::nullopt;
                  auto it = memory.find({pid, addr});
                  return it == memory.end() ? std::optional<uint64_t>(0) : it->second;
                }};
  uint64_t ts = 2'000'000'000;

  void track(int pid, int rank) {
    RankIdentity id;
    id.job_id = "j";
    id.rank = rank;
    id.world_size = 4;
    registry.track(pid, 1, "python", id, {});
  }
  void init(int pid, uint64_t comm, int rank, int nranks, uint8_t uid_byte) {
    argus_nccl_init_event e{};
    e.hdr = header(ARGUS_EV_NCCL_INIT, pid, ts++);
    e.comm = comm;
    e.rank = rank;
    e.nranks = nranks;
    std::fill(std::begin(e.uid), std::end(e.uid), uid_byte);
    feed.on_nccl_init(e);
  }
  void split(int pid, uint64_t parent, uint64_t child, uint64_t nth, int color, int key, uint64_t out = 0x5000) {
    argus_nccl_child_event e{};
    e.hdr = header(ARGUS_EV_NCCL_CHILD, pid, ts++);
    e.api = ARGUS_NCCL_COMM_SPLIT;
    e.parent = parent;
    e.comm = child;
    e.newcomm_ptr = out;
    e.nth = nth;
    e.color = color;
    e.key = key;
    feed.on_nccl_child(e);
  }
  void call(int pid, uint64_t comm, uint32_t op, uint64_t seq, int peer = -1, uint32_t tid = 0) {
    argus_nccl_coll_event e{};
    e.hdr = header(ARGUS_EV_NCCL_COLL, pid, ts++);
    if (tid != 0) e.hdr.tid = tid;
    e.comm = comm;
    e.op = op;
    e.seq = seq;
    e.peer = peer;
    e.bytes = 4096;
    feed.on_collective(e);
  }
  void c10d_backend(int pid, uint32_t tid, uint64_t backend, int rank, int size, uint32_t kind = ARGUS_C10D_GLOO) {
    argus_c10d_backend_event e{};
    e.hdr = header(ARGUS_EV_C10D_BACKEND, pid, ts++);
    e.hdr.tid = tid;
    e.backend = backend;
    e.rank = rank;
    e.size = size;
    e.kind = kind;
    feed.on_c10d_backend(e);
  }
  void c10d_text(int pid, uint32_t tid, uint64_t group, uint32_t what, const std::string& text) {
    argus_c10d_group_event e{};
    e.hdr = header(ARGUS_EV_C10D_GROUP, pid, ts++);
    e.hdr.tid = tid;
    e.group = group;
    e.what = what;
    e.len = static_cast<uint32_t>(text.size());
    std::snprintf(e.text, sizeof e.text, "%s", text.c_str());
    feed.on_c10d_group(e);
  }
  void c10d_call(int pid, uint64_t backend, uint32_t op, uint64_t seq, int peer = -1,
                 uint32_t kind = ARGUS_C10D_GLOO) {
    argus_c10d_coll_event e{};
    e.hdr = header(ARGUS_EV_C10D_COLL, pid, ts++);
    e.backend = backend;
    e.op = op;
    e.seq = seq;
    e.peer = peer;
    e.kind = kind;
    feed.on_c10d_collective(e);
  }
  const CommView* view(const std::string& name) const {
    static std::vector<CommView> all;
    all = tracker.comms();
    auto it = std::find_if(all.begin(), all.end(), [&](const CommView& v) { return v.comm == name; });
    return it == all.end() ? nullptr : &*it;
  }
};

// World of 4 (two on this node): a split into colors 0 and 1 by rank parity.
// Both members of color 0 here name the child alike, without seeing each other.
TEST(CallFeed, SplitChildrenAreNamedAlikeOnEveryMemberAndCountedApart) {
  Feed f;
  f.track(10, 0);
  f.track(12, 2);
  f.init(10, 0xa0, 0, 4, 0x11);
  f.init(12, 0xc0, 2, 4, 0x11);
  const std::string world = f.names.name_of(10, 0xa0);
  ASSERT_EQ(world, f.names.name_of(12, 0xc0));
  f.split(10, 0xa0, 0xa1, 1, 0, 0);
  f.split(12, 0xc0, 0xc1, 1, 0, 1);
  const std::string child = f.names.name_of(10, 0xa1);
  EXPECT_EQ(child, split_child_name(world, 1, 0));
  EXPECT_EQ(child, f.names.name_of(12, 0xc1));
  EXPECT_TRUE(f.names.anchored(10, 0xa1));
  // A second split of the world: another communicator, numbered apart.
  f.split(10, 0xa0, 0xa2, 2, 0, 0);
  f.split(12, 0xc0, 0xc2, 2, 0, 1);
  EXPECT_NE(f.names.name_of(10, 0xa2), child);
  EXPECT_EQ(f.names.name_of(10, 0xa2), f.names.name_of(12, 0xc2));
  for (uint64_t s = 1; s <= 3; ++s) {
    f.call(10, 0xa1, ARGUS_OP_ALL_REDUCE, s);
    f.call(12, 0xc1, ARGUS_OP_ALL_REDUCE, s);
  }
  f.call(10, 0xa2, ARGUS_OP_ALL_GATHER, 1);
  const CommView* c = f.view(child);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->members.size(), 2u);
  EXPECT_EQ(c->newest_seq, 3u);
  // A split child's ranks follow (key, parent rank) among the members this
  // node sees (right where the child lives here, as TP groups do).
  EXPECT_EQ(c->members.at(10).comm_rank, 0);
  EXPECT_EQ(c->members.at(12).comm_rank, 1);
  EXPECT_EQ(f.view(f.names.name_of(10, 0xa2))->newest_seq, 1u);
  const CommView* w = f.view(world);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->members.at(12).comm_rank, 2);  // an init's rank is given
  EXPECT_EQ(w->nranks, 4);
  // The registry records how each was made, and from what.
  const auto inits = f.registry.comm_inits(10);
  ASSERT_EQ(inits.size(), 3u);
  EXPECT_EQ(inits[1].api, static_cast<uint32_t>(ARGUS_NCCL_COMM_SPLIT));
  EXPECT_EQ(inits[1].parent, world);
  EXPECT_EQ(inits[1].comm_id, child);
  EXPECT_EQ(inits[1].rank, -1);
}

TEST(CallFeed, ANoColorSplitMakesNoCommunicatorButCountsTheSplit) {
  Feed f;
  f.track(10, 0);
  f.init(10, 0xa0, 0, 4, 0x11);
  f.split(10, 0xa0, 0, 1, ARGUS_NCCL_SPLIT_NOCOLOR, 0);
  EXPECT_TRUE(f.names.pending(10).empty());
  EXPECT_EQ(f.registry.comm_inits(10).size(), 1u);
  f.split(10, 0xa0, 0xa2, 2, 3, 0);  // its next split is the parent's second everywhere
  EXPECT_EQ(f.names.name_of(10, 0xa2), split_child_name(f.names.name_of(10, 0xa0), 2, 3));
}

// Split inside ncclGroupStart/End (or non-blocking): the handle is written
// after the split returned. The first call on an unnamed handle finds it where
// NCCL wrote it.
TEST(CallFeed, AChildWrittenLaterIsFoundWhereNcclWroteIt) {
  Feed f;
  f.track(10, 0);
  f.init(10, 0xa0, 0, 4, 0x11);
  f.split(10, 0xa0, 0, 1, 0, 0, 0x5000);
  f.split(10, 0xa0, 0, 2, 1, 0, 0x6000);
  ASSERT_EQ(f.names.pending(10).size(), 2u);
  const std::string world = f.names.name_of(10, 0xa0);
  f.memory[{10, 0x5000}] = 0xa1;
  f.memory[{10, 0x6000}] = 0xa2;
  f.call(10, 0xa2, ARGUS_OP_ALL_REDUCE, 1);  // the second child first
  EXPECT_EQ(f.names.name_of(10, 0xa2), split_child_name(world, 2, 1));
  f.readable = false;  // no access: the oldest pending child
  f.call(10, 0xa1, ARGUS_OP_ALL_REDUCE, 1);
  EXPECT_EQ(f.names.name_of(10, 0xa1), split_child_name(world, 1, 0));
  EXPECT_TRUE(f.names.pending(10).empty());
}

TEST(CallFeed, AShrinkChildHasItsRankComputedFromTheParents) {
  Feed f;
  f.track(10, 5);
  f.init(10, 0xa0, 5, 8, 0x11);
  argus_nccl_child_event e{};
  e.hdr = header(ARGUS_EV_NCCL_CHILD, 10, f.ts++);
  e.api = ARGUS_NCCL_COMM_SHRINK;
  e.parent = 0xa0;
  e.comm = 0xa1;
  e.nth = 1;
  e.n_excluded = 2;
  e.excluded[0] = 6;
  e.excluded[1] = 1;
  f.feed.on_nccl_child(e);
  const std::string world = f.names.name_of(10, 0xa0);
  const std::string child = f.names.name_of(10, 0xa1);
  EXPECT_EQ(child, shrink_child_name(world, 1, {1, 6}, 2));
  const CommView* c = f.view(child);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->members.at(10).comm_rank, 4);
  EXPECT_EQ(c->nranks, 6);
}

TEST(CallFeed, InitAllNamesEveryHandleOfTheCliqueOnce) {
  Feed f;
  f.track(10, 0);
  argus_nccl_init_all_event e{};
  e.hdr = header(ARGUS_EV_NCCL_INIT_ALL, 10, f.ts++);
  e.ndev = 3;
  e.comms[0] = 0xa0;
  e.comms[1] = 0xa1;
  e.comms[2] = 0xa2;
  f.feed.on_nccl_init_all(e);
  EXPECT_EQ(f.names.name_of(10, 0xa0), init_all_name(10, 1));
  EXPECT_EQ(f.names.name_of(10, 0xa2), init_all_name(10, 1));
  EXPECT_EQ(f.view(init_all_name(10, 1))->nranks, 3);
  e.ndev = 1000;  // a count past the record's array is read no further
  e.comms[0] = 0xb0;
  f.feed.on_nccl_init_all(e);
  EXPECT_EQ(f.names.name_of(10, 0xb0), init_all_name(10, 2));
}

// Pipeline traffic: rank 0 sends to rank 1; the tracker pairs the send with
// the receive by the ranks the inits gave.
TEST(CallFeed, SendAndRecvReachTheTrackerWithTheirPeer) {
  Feed f;
  f.track(10, 0);
  f.track(11, 1);
  f.init(10, 0xa0, 0, 2, 0x22);
  f.init(11, 0xb0, 1, 2, 0x22);
  f.call(11, 0xb0, ARGUS_OP_RECV, 0, 0);
  f.call(10, 0xa0, ARGUS_OP_SEND, 0, 1);
  const auto& m = f.tracker.p2p().matches();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].sender_pid, 10);
  EXPECT_EQ(m[0].receiver_pid, 11);
  EXPECT_GT(m[0].sender_lag_s(), 0);  // the receiver posted first
}

// Attached late: TP and DP handles of one rank are two communicators, and the
// n-th of each rank shares its name.
TEST(CallFeed, ALateRanksHandlesAreNeverMerged) {
  Feed f;
  f.track(10, 0);
  f.track(11, 1);
  for (int pid : {10, 11}) {
    const uint64_t base = pid == 10 ? 0xa0 : 0xb0;
    f.call(pid, base + 1, ARGUS_OP_ALL_REDUCE, 7);  // TP
    f.call(pid, base + 2, ARGUS_OP_ALL_GATHER, 3);  // DP
  }
  EXPECT_EQ(f.names.name_of(10, 0xa1), "job:j/c1");
  EXPECT_EQ(f.names.name_of(10, 0xa2), "job:j/c2");
  EXPECT_EQ(f.names.name_of(11, 0xb1), "job:j/c1");
  EXPECT_EQ(f.names.name_of(11, 0xb2), "job:j/c2");
  EXPECT_FALSE(f.names.anchored(10, 0xa1));
}


// PyTorch makes a group's backend, then names the group, on one thread: the
// backend is the communicator "<job>/pg:<name>" on every member, its rank and
// size the constructor's, labelled by the description that follows. A
// backend made on another thread is not named by this naming.
TEST(CallFeed, AC10dBackendIsNamedByTheGroupNamingThatFollowsOnItsThread) {
  Feed f;
  f.track(100, 0);
  f.track(101, 1);
  for (int pid : {100, 101}) {
    f.c10d_backend(pid, pid, 0xb000 + pid, pid - 100, 2);
    f.c10d_backend(pid, pid + 1000, 0xc000 + pid, 0, 1);  // another thread's, never named here
    f.c10d_text(pid, pid, 0xa000, ARGUS_C10D_GROUP_NAME, "0");
    f.c10d_text(pid, pid, 0xa000, ARGUS_C10D_GROUP_DESC, "default_pg");
  }
  const CommView* v = f.view("j/pg:0");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->nranks, 2);
  EXPECT_EQ(v->label, "default_pg");
  ASSERT_EQ(v->members.size(), 2u);
  EXPECT_EQ(v->members.at(100).comm_rank, 0);
  EXPECT_EQ(v->members.at(101).comm_rank, 1);

  // Their collectives are numbered on it from the first; barriers are collectives too.
  f.c10d_call(100, 0xb064, ARGUS_OP_ALL_REDUCE, 1);
  f.c10d_call(101, 0xb065, ARGUS_OP_ALL_REDUCE, 1);
  f.c10d_call(100, 0xb064, ARGUS_C10D_OP_BARRIER, 2);
  v = f.view("j/pg:0");
  EXPECT_EQ(v->newest_seq, 2u);
  EXPECT_EQ(v->members.at(100).last_seq, 2u);
  EXPECT_EQ(v->members.at(101).last_seq, 1u);

  const auto s = f.registry.snapshot();
  for (const auto& r : s)
    if (r.pid == 100) {
      ASSERT_EQ(r.process_groups.size(), 1u);
      EXPECT_EQ(r.process_groups[0].backend, 0xb064u);
      EXPECT_EQ(r.process_groups[0].name, "0");
      EXPECT_EQ(r.process_groups[0].desc, "default_pg");
      EXPECT_EQ(r.process_groups[0].backend_kind, "gloo");
      EXPECT_EQ(r.process_groups[0].comm_id, "j/pg:0");
      EXPECT_EQ(process_group_label(r.process_groups[0]), "default_pg");
    }
}

// A group of no description ("undefined", c10d's default) is labelled by its
// name; a backend whose making was not seen is named by its first use.
TEST(CallFeed, C10dGroupsWithoutDescriptionOrMakingAreStillFollowed) {
  Feed f;
  f.track(100, 0);
  f.c10d_backend(100, 100, 0xb1, 0, 2);
  f.c10d_text(100, 100, 0xa1, ARGUS_C10D_GROUP_NAME, "1");
  f.c10d_text(100, 100, 0xa1, ARGUS_C10D_GROUP_DESC, "undefined");
  ASSERT_NE(f.view("j/pg:1"), nullptr);
  EXPECT_EQ(f.view("j/pg:1")->label, "1");
  f.c10d_call(100, 0xdead, ARGUS_OP_ALL_REDUCE, 1);  // made before the agent attached
  EXPECT_EQ(f.names.name_of(100, 0xdead), "job:j/c1");
  // A naming with no backend made before it on its thread names nothing.
  f.c10d_text(100, 100, 0xa2, ARGUS_C10D_GROUP_NAME, "2");
  EXPECT_EQ(f.view("j/pg:2"), nullptr);
}

// ProcessGroupNCCL: its calls are the NCCL calls it makes on the caller's
// thread. The NCCL communicator its first call runs on keeps the group's
// label; its calls are counted once (as NCCL's: no "pg:" communicator); a
// send outside a batch runs on a pair communicator, labelled "<group> p2p".
TEST(CallFeed, ANcclBackendIsJoinedWithTheNcclCommunicatorItsCallsRunOn) {
  Feed f;
  f.track(100, 0);
  f.track(101, 1);
  for (int pid : {100, 101}) {
    f.c10d_backend(pid, pid, 0xb000 + pid, pid - 100, 2, ARGUS_C10D_NCCL);
    f.c10d_text(pid, pid, 0xa000, ARGUS_C10D_GROUP_NAME, "0");
    f.c10d_text(pid, pid, 0xa000, ARGUS_C10D_GROUP_DESC, "default_pg");
    f.c10d_backend(pid, pid, 0xc000 + pid, pid - 100, 2, ARGUS_C10D_NCCL);
    f.c10d_text(pid, pid, 0xa100, ARGUS_C10D_GROUP_NAME, "1");
    f.c10d_text(pid, pid, 0xa100, ARGUS_C10D_GROUP_DESC, "tp");
  }
  EXPECT_EQ(f.view("j/pg:0"), nullptr);  // the NCCL communicator is the group's
  // The first collective makes the communicator (lazily, inside the c10d call), then runs on it.
  for (int pid : {100, 101}) {
    f.c10d_call(pid, 0xb000 + pid, ARGUS_OP_ALL_REDUCE, 1, -1, ARGUS_C10D_NCCL);
    f.init(pid, 0xe000 + pid, pid - 100, 2, 0x11);
    f.call(pid, 0xe000 + pid, ARGUS_OP_ALL_REDUCE, 1);
  }
  const std::string world = f.names.name_of(100, 0xe064);
  const CommView* v = f.view(world);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->label, "default_pg");
  EXPECT_EQ(v->newest_seq, 1u);  // one collective, not two
  EXPECT_EQ(v->members.at(100).last_seq, 1u);
  EXPECT_EQ(f.view("j/pg:0"), nullptr);

  // A raw NCCL call with no c10d call before it on its thread joins nothing;
  // a c10d call's join waits for an NCCL call on its own thread.
  f.init(100, 0xe200, 0, 2, 0x22);
  f.call(100, 0xe200, ARGUS_OP_ALL_REDUCE, 1);
  f.c10d_call(100, 0xc064, ARGUS_OP_ALL_REDUCE, 1, -1, ARGUS_C10D_NCCL);
  f.call(100, 0xe200, ARGUS_OP_ALL_REDUCE, 2, -1, 555);
  EXPECT_EQ(f.view(f.names.name_of(100, 0xe200))->label, "");

  // A send outside a batch: c10d's pair communicator, "tp p2p"; the group's
  // own communicator is still the one its collectives run on.
  f.init(100, 0xe300, 0, 2, 0x33);
  f.init(101, 0xe301, 1, 2, 0x33);
  f.c10d_call(100, 0xc064, ARGUS_OP_SEND, 0, 1, ARGUS_C10D_NCCL);
  f.call(100, 0xe300, ARGUS_OP_SEND, 0, 1);
  f.c10d_call(100, 0xc064, ARGUS_OP_ALL_REDUCE, 2, -1, ARGUS_C10D_NCCL);
  f.init(100, 0xe400, 0, 2, 0x44);
  f.call(100, 0xe400, ARGUS_OP_ALL_REDUCE, 1);
  // A later p2p join on the group's communicator does not relabel it.
  f.c10d_call(100, 0xc064, ARGUS_OP_RECV, 0, 1, ARGUS_C10D_NCCL);
  f.call(100, 0xe400, ARGUS_OP_RECV, 0, 1);
  EXPECT_EQ(f.view(f.names.name_of(100, 0xe400))->label, "tp");
  const std::string pair = f.names.name_of(100, 0xe300);
  bool labelled = false;
  for (const auto& c : f.tracker.comms())
    if (c.comm == pair) labelled = c.label == "tp p2p";
  EXPECT_TRUE(labelled);

  for (const auto& r : f.registry.snapshot()) {
    if (r.pid != 100) continue;
    ASSERT_EQ(r.process_groups.size(), 2u);
    for (const auto& g : r.process_groups) {
      EXPECT_EQ(g.backend_kind, "nccl");
      const std::string expect = g.name == "0" ? world : f.names.name_of(100, 0xe400);
      EXPECT_EQ(g.nccl_comm, expect) << g.name;
    }
  }
}

// Every structure of a process stops at its cap; what is refused is counted.
TEST(ProcessGroupsCaps, EachStructureStopsAndCountsWhatItRefuses) {
  AgentCounters caps;
  ProcessGroups g(&caps, 2);
  ProcessGroupInfo b;
  b.backend_kind = "nccl";
  for (uint64_t i = 1; i <= 3; ++i) {  // one thread making backends it never names
    b.backend = i;
    g.on_backend(7, 70, b);
  }
  EXPECT_EQ(caps.get(Cap::kProcessGroups), 1u);
  for (uint32_t tid = 71; tid <= 72; ++tid) g.on_backend(7, tid, b);  // a third thread waiting: refused
  EXPECT_EQ(caps.get(Cap::kProcessGroups), 2u);
  EXPECT_EQ(g.on_name(7, 70, 0xa0, "0", "j/pg:0").size(), 2u);
  EXPECT_EQ(g.on_name(7, 71, 0xa1, "1", "j/pg:1").size(), 1u);
  EXPECT_EQ(g.on_name(7, 72, 0xa2, "2", "j/pg:2").size(), 0u);  // tid 72 was refused
  // Calls to join: two threads kept, a third refused; the same thread again is no refusal.
  for (uint32_t tid : {80u, 81u, 80u, 82u}) g.on_nccl_backend_call(7, tid, 1, false);
  EXPECT_EQ(caps.get(Cap::kProcessGroups), 3u);
  ASSERT_TRUE(g.on_nccl_call(7, 80, "c-a"));
  ASSERT_TRUE(g.on_nccl_call(7, 81, "c-b"));
  g.on_nccl_backend_call(7, 80, 1, false);
  EXPECT_FALSE(g.on_nccl_call(7, 80, "c-c"));  // the joined communicators are full
  EXPECT_EQ(caps.get(Cap::kProcessGroups), 4u);
  EXPECT_STREQ(label_of(Cap::kProcessGroups), "process_groups");
}

}  // namespace
}  // namespace argus
