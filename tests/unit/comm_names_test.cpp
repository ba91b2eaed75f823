// Communicator names: every member of a communicator computes the same one on
// its own (splits and shrinks from their parent's), and a process's handles
// are never merged, even those whose making the agent missed.
#include "userspace/comms/comm_names.h"

#include <gtest/gtest.h>

#include "bpf/argus.h"

namespace argus {
namespace {

const std::string kWorld = "0123456789abcdef";

TEST(CommNames, SplitMembersOfOneColorShareANameAndOtherColorsDiffer) {
  // Two ranks of color 1 (their keys differ: the key orders ranks, it does not name).
  const std::string a = split_child_name(kWorld, 1, 1);
  const std::string b = split_child_name(kWorld, 1, 1);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 16u);  // the shape of every communicator name
  EXPECT_NE(a, split_child_name(kWorld, 1, 0));
  // The parent's second split with the same color is another communicator.
  EXPECT_NE(a, split_child_name(kWorld, 2, 1));
  // So is a split of another parent.
  EXPECT_NE(a, split_child_name("fedcba9876543210", 1, 1));
  // NOCOLOR makes none; nor does an unnamed parent.
  EXPECT_EQ(split_child_name(kWorld, 1, ARGUS_NCCL_SPLIT_NOCOLOR), "");
  EXPECT_EQ(split_child_name("", 1, 1), "");
}

TEST(CommNames, ShrinkNamesByParentCountAndTheExcludedRanksInAnyOrder) {
  const std::string a = shrink_child_name(kWorld, 1, {5, 2}, 2);
  EXPECT_EQ(a, shrink_child_name(kWorld, 1, {2, 5}, 2));
  EXPECT_NE(a, shrink_child_name(kWorld, 1, {2}, 1));
  EXPECT_NE(a, shrink_child_name(kWorld, 2, {2, 5}, 2));
  EXPECT_NE(a, split_child_name(kWorld, 1, 0));
  // A list longer than the event holds is named by its length and first ranks.
  EXPECT_NE(shrink_child_name(kWorld, 1, {2, 5}, 40), a);
}

TEST(CommNames, ShrinkRankClosesTheGaps) {
  EXPECT_EQ(shrink_rank(5, 8, {1, 6, 3}, 3), std::make_pair(3, 5));
  EXPECT_EQ(shrink_rank(0, 8, {1, 6, 3}, 3), std::make_pair(0, 5));
  EXPECT_EQ(shrink_rank(7, 8, {6, 6}, 2), std::make_pair(6, 7));      // a rank listed twice goes once
  EXPECT_EQ(shrink_rank(3, 8, {3}, 1), std::make_pair(-1, 7));        // excluded: not a member
  EXPECT_EQ(shrink_rank(-1, -1, {3}, 1), std::make_pair(-1, -1));     // parent unknown
  EXPECT_EQ(shrink_rank(5, 64, {1, 2}, 40), std::make_pair(-1, -1));  // the list was cut
}

TEST(CommNames, InitAllCliquesAreNamedPerProcessAndCall) {
  EXPECT_EQ(init_all_name(10, 1), init_all_name(10, 1));
  EXPECT_NE(init_all_name(10, 1), init_all_name(10, 2));
  EXPECT_NE(init_all_name(10, 1), init_all_name(11, 1));
}

// A late attach: the agent saw none of a process's communicators being made.
// Each handle gets its own name, numbered in first-use order, so that the TP
// and DP collectives of one rank are never counted as one communicator's, and
// the n-th handle of every rank of the job shares its name.
TEST(CommNames, UnseenHandlesAreNamedApartInFirstUseOrder) {
  AgentCounters counters;
  CommNames names(&counters);
  const std::optional<std::string> job = "j";
  EXPECT_EQ(names.key_for(100, 0xa, job), "job:j/c1");
  EXPECT_EQ(names.key_for(100, 0xb, job), "job:j/c2");
  EXPECT_EQ(names.key_for(100, 0xa, job), "job:j/c1");  // remembered
  // Another rank of the job, its own handles, used in the same order.
  EXPECT_EQ(names.key_for(200, 0x7a, job), "job:j/c1");
  EXPECT_EQ(names.key_for(200, 0x7b, job), "job:j/c2");
  // A process that claims no job (not tracked): its own.
  EXPECT_EQ(names.key_for(300, 0xa, std::nullopt), "pid:300/c1");
  EXPECT_EQ(names.unseen_named(), 5u);
  EXPECT_EQ(counters.get(AgentCount::kCommsUnseen), 5u);
  EXPECT_FALSE(names.anchored(100, 0xa));
  // A handle whose making was seen keeps its making's name.
  EXPECT_TRUE(names.on_init(100, 0xc, kWorld));
  EXPECT_EQ(names.key_for(100, 0xc, job), kWorld);
  EXPECT_TRUE(names.anchored(100, 0xc));
}

TEST(CommNames, UnseenHandlesPastTheBoundAreRefusedNotMerged) {
  AgentCounters counters;
  CommNames names(&counters, 2);
  const std::optional<std::string> job = "j";
  EXPECT_EQ(names.key_for(1, 0xa, job), "job:j/c1");
  EXPECT_EQ(names.key_for(1, 0xb, job), "job:j/c2");
  EXPECT_EQ(names.key_for(1, 0xc, job), "");
  EXPECT_EQ(names.key_for(1, 0xd, job), "");
  EXPECT_EQ(counters.get(Cap::kCommHandles), 2u);
  EXPECT_FALSE(names.on_init(1, 0xe, kWorld));
  EXPECT_EQ(counters.get(Cap::kCommHandles), 3u);
}

// A split inside a group (or non-blocking) returns before NCCL writes the
// child's handle: the child waits for the first call on a handle of no name.
TEST(CommNames, PendingChildrenBindByWhereTheHandleWasWrittenOrInOrder) {
  CommNames names;
  names.on_pending_child(1, 0x1000, "aaaaaaaaaaaaaaaa");
  names.on_pending_child(1, 0x2000, "bbbbbbbbbbbbbbbb");
  ASSERT_EQ(names.pending(1).size(), 2u);
  EXPECT_TRUE(names.pending(2).empty());
  EXPECT_TRUE(names.bind_pending(1, 0x2000, 0xb));
  EXPECT_EQ(names.name_of(1, 0xb), "bbbbbbbbbbbbbbbb");
  EXPECT_TRUE(names.anchored(1, 0xb));  // made while the agent watched: counted from its first call
  EXPECT_FALSE(names.bind_pending(1, 0x3000, 0xc));  // written nowhere pending
  EXPECT_TRUE(names.bind_pending(1, 0, 0xa));         // the oldest
  EXPECT_EQ(names.name_of(1, 0xa), "aaaaaaaaaaaaaaaa");
  EXPECT_FALSE(names.bind_pending(1, 0, 0xd));
  names.on_pending_child(1, 0x1000, "cccccccccccccccc");
  names.retain({});
  EXPECT_TRUE(names.pending(1).empty());
  EXPECT_EQ(names.name_of(1, 0xa), "");
}

}  // namespace
}  // namespace argus
