// Query and path values of the API: the whole text is the number, or it is refused.
#include "exporters/query_params.h"

#include <gtest/gtest.h>

#include <string>

namespace argus {
namespace {

using namespace std::string_literals;

TEST(QueryParams, IntegersInRange) {
  EXPECT_EQ(parse_int_param("0", 0, 10), 0);
  EXPECT_EQ(parse_int_param("600", 1, 600), 600);
  EXPECT_EQ(parse_int_param("-3", -5, 5), -3);
  for (const char* bad : {"", "601", "0", "-1", " 5", "5 ", "+5", "5x", "0x10", "1e2", "99999999999999999999999"})
    EXPECT_FALSE(parse_int_param(bad, 1, 600)) << bad;
}

// Found by fuzz/fuzz_http_query: strtol stopped at a percent-decoded NUL, so
// "5\0junk" was taken as 5.
TEST(QueryParams, EmbeddedNulIsRefused) {
  EXPECT_FALSE(parse_int_param("5\0junk"s, 1, 600));
  EXPECT_FALSE(parse_int_param("\0"s, 0, 600));
  EXPECT_FALSE(parse_number_param("1700000050\0x"s));
  EXPECT_FALSE(parse_number_param("2\0"s));
}

TEST(QueryParams, FiniteNumbers) {
  EXPECT_DOUBLE_EQ(*parse_number_param("1700000050.5"), 1700000050.5);
  EXPECT_DOUBLE_EQ(*parse_number_param("-2"), -2);
  EXPECT_DOUBLE_EQ(*parse_number_param("1e3"), 1000);
  for (const char* bad : {"", "nan", "inf", "-inf", "1e999", "yesterday", " 5", "5 ", "\t5", "5x"})
    EXPECT_FALSE(parse_number_param(bad)) << bad;
}

}  // namespace
}  // namespace argus
