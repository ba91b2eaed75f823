// rdma/parse.h: rate strings, state lines, counters, and counter resets/wraps.
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "rdma/parse.h"

namespace argus::rdma {
namespace {

struct RateCase {
  const char* text;
  double gbps;
  uint64_t bytes_per_second;
  int width;
  const char* speed;
};

TEST(RdmaParse, RateTable) {
  const RateCase cases[] = {
      {"400 Gb/sec (4X NDR)", 400, 50'000'000'000ULL, 4, "NDR"},
      {"100 Gb/sec (4X EDR)\n", 100, 12'500'000'000ULL, 4, "EDR"},
      {"25 Gb/sec (1X EDR)", 25, 3'125'000'000ULL, 1, "EDR"},
      {"40 Gb/sec (4X QDR)", 40, 5'000'000'000ULL, 4, "QDR"},
      {"10 Gb/sec (1X)", 10, 1'250'000'000ULL, 1, ""},
      {"10 Gb/sec (4X)", 10, 1'250'000'000ULL, 4, ""},  // SDR: the kernel prints no name
      {"200 Gb/sec (4X HDR)", 200, 25'000'000'000ULL, 4, "HDR"},
      {"200 Gb/sec (2X NDR)", 200, 25'000'000'000ULL, 2, "NDR"},
      {"2.5 Gb/sec (1X)", 2.5, 312'500'000ULL, 1, ""},
      {"56 Gb/sec (4X FDR)", 56, 7'000'000'000ULL, 4, "FDR"},
      {"40 Gb/sec (4X FDR10)", 40, 5'000'000'000ULL, 4, "FDR10"},
      {"600 Gb/sec (12X HDR)", 600, 75'000'000'000ULL, 12, "HDR"},
      {"800 Gb/sec (4X XDR)", 800, 100'000'000'000ULL, 4, "XDR"},
      {"53.125 Gb/sec (1X HDR)", 53.125, 6'640'625'000ULL, 1, "HDR"},
      {"  100 Gb/sec  ", 100, 12'500'000'000ULL, 0, ""},  // no (..): width unknown
  };
  for (const auto& c : cases) {
    auto r = parse_rate(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.error();
    EXPECT_DOUBLE_EQ(r->gbps, c.gbps) << c.text;
    EXPECT_EQ(r->bytes_per_second, c.bytes_per_second) << c.text;
    EXPECT_EQ(r->width, c.width) << c.text;
    EXPECT_EQ(r->speed, c.speed) << c.text;
  }
  EXPECT_DOUBLE_EQ(parse_rate("400 Gb/sec (4X NDR)")->lane_gbps(), 100);
  EXPECT_DOUBLE_EQ(parse_rate("200 Gb/sec (4X HDR)")->lane_gbps(), 50);
}

TEST(RdmaParse, UnknownRateStrings) {
  for (const char* bad : {"", "fast", "Gb/sec (4X NDR)", "400", "400 parsecs (4X NDR)", "400 Gb/sec (3X NDR)",
                          "400 Gb/sec (4X ZZZ)", "400 Gb/sec 4X NDR", "-5 Gb/sec (1X)", "400 Gb/sec (X NDR)",
                          "nan Gb/sec (1X)", "400 Gb/sec (4X NDR"}) {
    EXPECT_FALSE(parse_rate(bad).ok()) << "'" << bad << "'";
  }
}

TEST(RdmaParse, States) {
  auto s = parse_state("4: ACTIVE\n");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->id, 4);
  EXPECT_EQ(s->name, "ACTIVE");
  auto p = parse_state("5: LinkUp");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->id, 5);
  EXPECT_EQ(p->name, "LinkUp");
  EXPECT_EQ(parse_state("7: Phy Test")->name, "Phy Test");
  for (const char* bad : {"", "ACTIVE", "x: ACTIVE", "4:", ": ACTIVE", "4: A: B", "-1: DOWN"}) {
    EXPECT_FALSE(parse_state(bad).ok()) << bad;
  }
}

TEST(RdmaParse, Counters) {
  EXPECT_EQ(*parse_counter("0\n"), 0u);
  EXPECT_EQ(*parse_counter(" 18446744073709551615 "), std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"", "\n", "N/A (no PMA)", "12abc", "-1", "18446744073709551616", "0x10", "1 2"}) {
    EXPECT_FALSE(parse_counter(bad).ok()) << bad;
  }
}

TEST(RdmaParse, CounterDeltaGrowthResetAndWrap) {
  auto d = counter_delta(100, 150);
  EXPECT_EQ(d.delta, 50u);
  EXPECT_FALSE(d.reset);
  EXPECT_FALSE(d.wrapped);

  // Backwards = reset (driver reload): the new value counts from 0.
  d = counter_delta(5'000'000'000ULL, 1234);
  EXPECT_TRUE(d.reset);
  EXPECT_EQ(d.delta, 1234u);
  d = counter_delta(1000, 0);
  EXPECT_TRUE(d.reset);
  EXPECT_EQ(d.delta, 0u);

  // A legacy 32-bit counter wrapping.
  d = counter_delta(0xFFFFFF00ULL, 0x10);
  EXPECT_TRUE(d.wrapped);
  EXPECT_EQ(d.delta, 0x100u + 0x10u);
  // A 64-bit wrap.
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  d = counter_delta(max - 9, 5);
  EXPECT_TRUE(d.wrapped);
  EXPECT_EQ(d.delta, 15u);
  // Mid-range going backwards is a reset, not a wrap.
  d = counter_delta(0x80000000ULL, 0x10);
  EXPECT_TRUE(d.reset);
  EXPECT_EQ(d.delta, 0x10u);
}

}  // namespace
}  // namespace argus::rdma
