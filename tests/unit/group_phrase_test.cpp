// How a framework's group is named to users: its label and its members' job
// ranks, short ("tp (ranks 4-5)"), bounded however large the group.
#include <gtest/gtest.h>

#include "userspace/model/snapshot.h"

namespace argus {
namespace {

TEST(GroupPhrase, RanksAreListedAsRanges) {
  EXPECT_EQ(rank_list_text({}), "");
  EXPECT_EQ(rank_list_text({5, 4}), "4-5");
  EXPECT_EQ(rank_list_text({0, 2, 4}), "0, 2, 4");
  EXPECT_EQ(rank_list_text({11, 8, 9, 10, 0, 1, 2, 3, 3}), "0-3, 8-11");
  EXPECT_EQ(rank_list_text({-1, 7}), "7");  // a rank the agent does not know is left out
  // A DP group strided over 64 ranks: six pieces, then "...".
  std::vector<int> strided;
  for (int r = 0; r < 64; r += 8) strided.push_back(r);
  EXPECT_EQ(rank_list_text(strided), "0, 8, 16, 24, 32, 40, ...");
}

TEST(GroupPhrase, SaysWhetherEveryMemberIsHere) {
  EXPECT_EQ(group_phrase("tp", {4, 5}, 2), "tp (ranks 4-5)");
  EXPECT_EQ(group_phrase("dp", {0, 1}, 8), "dp (ranks 0-1 here, of 8)");
  EXPECT_EQ(group_phrase("pp", {3}, 2), "pp (rank 3 here, of 2)");
  EXPECT_EQ(group_phrase("default_pg", {}, 4), "default_pg");
  EXPECT_EQ(group_phrase("x", {-1}, 1), "x");
  EXPECT_EQ(group_phrase("tp", {2, 3}, 0), "tp (ranks 2-3)");  // size not known
}

}  // namespace
}  // namespace argus
