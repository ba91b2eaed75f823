// Communicator names are a hash of the ncclUniqueId, never its bytes: the id starts
// with NCCL's bootstrap magic and the root's socket address.
#include "userspace/common/comm_id.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <string>

#include "userspace/registry/rank_registry.h"

namespace argus {
namespace {

// The first 16 bytes of an ncclUniqueId as NCCL 2.x lays them out: the 64-bit
// bootstrap magic, then the root's sockaddr_in (family, port, IPv4 10.1.2.3).
constexpr uint8_t kUid[16] = {0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
                              0x02, 0x00, 0x75, 0x30, 0x0a, 0x01, 0x02, 0x03};

std::string hex(const uint8_t* b, size_t n) {
  std::string out;
  char buf[3];
  for (size_t i = 0; i < n; ++i) {
    std::snprintf(buf, sizeof(buf), "%02x", b[i]);
    out += buf;
  }
  return out;
}

// Every 4-byte window of the raw id, in hex: none may show up in a name.
void expect_no_raw_bytes(const std::string& text) {
  const std::string raw = hex(kUid, sizeof(kUid));
  for (size_t i = 0; i + 8 <= raw.size(); i += 2)
    EXPECT_EQ(text.find(raw.substr(i, 8)), std::string::npos) << raw.substr(i, 8) << " in " << text;
}

TEST(CommId, IsAShortStableHashNotTheRawId) {
  const std::string id = comm_id_from_uid(kUid, sizeof(kUid));
  ASSERT_EQ(id.size(), 16u);
  for (char c : id) EXPECT_TRUE(std::isxdigit(static_cast<unsigned char>(c)) && !std::isupper(c)) << id;
  EXPECT_EQ(id, comm_id_from_uid(kUid, sizeof(kUid)));  // every rank hashes the same bytes
  expect_no_raw_bytes(id);
  uint8_t other[16];
  std::copy(std::begin(kUid), std::end(kUid), other);
  other[15] ^= 1;  // another root address: another communicator
  EXPECT_NE(comm_id_from_uid(other, sizeof(other)), id);
  // SHA-256 of the 16 bytes, first 8 bytes: pinned so that agents of one version
  // (and later versions) name a communicator alike on every node.
  EXPECT_EQ(id, "ea405fc2fffe6782");
}

TEST(CommId, JobIdFallbackUsesTheHash) {
  struct Clock0 : Clock {
    uint64_t monotonic_ns() const override { return 1; }
    double unix_seconds() const override { return 1.0; }
  } clock;
  RankRegistry reg(clock, {"n", 60, 10, false});
  reg.track(7, 1, "python", RankIdentity{}, {});
  NcclInitInfo info;
  info.rank = 1;
  info.nranks = 2;
  info.comm_id = comm_id_from_uid(kUid, sizeof(kUid));
  reg.on_nccl_init(7, info);
  const auto snap = reg.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].job_id, "nccl-" + info.comm_id.substr(0, 12));
  expect_no_raw_bytes(snap[0].job_id);
}

}  // namespace
}  // namespace argus
