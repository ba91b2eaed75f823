// The start-up capability check: parsed from /proc/self/status text, and each
// missing capability named with the layer it blinds.
#include "userspace/procfs/capabilities.h"

#include <gtest/gtest.h>

namespace argus {
namespace {

uint64_t bits(std::initializer_list<int> caps) {
  uint64_t v = 0;
  for (int c : caps) v |= uint64_t{1} << c;
  return v;
}

const CapabilityCheck& find(const CapabilityReport& r, const std::string& name) {
  for (const auto& c : r.checks)
    if (c.name == name) return c;
  throw std::runtime_error("no check for " + name);
}

TEST(Capabilities, ParsesCapEff) {
  EXPECT_EQ(parse_effective_caps("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\nCapBnd: 0\n"),
            0x000001ffffffffffull);
  EXPECT_EQ(parse_effective_caps("CapEff:\t00000000a80425fb"), 0xa80425fbull);
  EXPECT_FALSE(parse_effective_caps("CapPrm:\t0\n").has_value());
  EXPECT_FALSE(parse_effective_caps("CapEff:\tzz\n").has_value());
  EXPECT_FALSE(parse_effective_caps("CapEff:\t\n").has_value());
  EXPECT_FALSE(parse_effective_caps("CapEff:\t00000000000000000000\n").has_value());  // more than 64 bits
  EXPECT_FALSE(parse_effective_caps("").has_value());
}

TEST(Capabilities, RootHoldsEverything) {
  auto r = check_capabilities(0x000001ffffffffffull);
  EXPECT_TRUE(r.can_load_bpf);
  for (const auto& c : r.checks) EXPECT_TRUE(c.held) << c.name;
}

TEST(Capabilities, TheDaemonSetSetIsEnoughWithoutSysAdmin) {
  // CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH, CAP_SYS_RESOURCE, CAP_CHECKPOINT_RESTORE
  auto r = check_capabilities(bits({39, 38, 19, 2, 24, 40}));
  EXPECT_TRUE(r.can_load_bpf);
  for (const auto& c : r.checks) EXPECT_TRUE(c.held) << c.name;  // CHECKPOINT_RESTORE serves map_files
}

TEST(Capabilities, EachMissingOneNamesWhatGoesBlind) {
  auto r = check_capabilities(bits({39, 38}));
  EXPECT_TRUE(r.can_load_bpf);
  EXPECT_FALSE(find(r, "CAP_SYS_PTRACE").held);
  EXPECT_NE(find(r, "CAP_SYS_PTRACE").without.find("never found"), std::string::npos);
  EXPECT_EQ(find(r, "CAP_SYS_PTRACE").layer, "discovery");
  EXPECT_FALSE(find(r, "CAP_SYS_ADMIN").held);
  EXPECT_EQ(find(r, "CAP_SYS_ADMIN").layer, "map_files");
  EXPECT_FALSE(find(r, "CAP_DAC_READ_SEARCH").held);
  EXPECT_FALSE(find(r, "CAP_SYS_RESOURCE").held);
  for (const auto& c : r.checks) EXPECT_EQ(c.without.find('\n'), std::string::npos);

  EXPECT_FALSE(check_capabilities(bits({39})).can_load_bpf);
  EXPECT_FALSE(check_capabilities(bits({38, 19})).can_load_bpf);
  EXPECT_TRUE(check_capabilities(bits({21})).can_load_bpf);  // CAP_SYS_ADMIN: older kernels
  EXPECT_FALSE(check_capabilities(0).can_load_bpf);
}

}  // namespace
}  // namespace argus
