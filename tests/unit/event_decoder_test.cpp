// Ring-buffer records: typed when well-formed, refused when not.
#include "decoder/event_decoder.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace argus {
namespace {

TEST(EventDecoder, DecodesEachType) {
  argus_nccl_coll_event c{};
  c.hdr.type = ARGUS_EV_NCCL_COLL;
  c.hdr.tgid = 42;
  c.op = ARGUS_OP_SEND;
  c.bytes = 4096;
  auto ev = decode_event(&c, sizeof(c));
  ASSERT_TRUE(ev);
  const auto* got = std::get_if<argus_nccl_coll_event>(&*ev);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->hdr.tgid, 42u);
  EXPECT_EQ(got->bytes, 4096u);
  EXPECT_EQ(event_source(*ev), static_cast<uint32_t>(ARGUS_SRC_NCCL));

  argus_exit_event x{};
  x.hdr.type = ARGUS_EV_EXIT;
  x.exit_code = 9;
  ev = decode_event(&x, sizeof(x));
  ASSERT_TRUE(ev);
  EXPECT_EQ(std::get<argus_exit_event>(*ev).exit_code, 9);
  EXPECT_STREQ(source_label(event_source(*ev)), "proc");
}

TEST(EventDecoder, RefusesShortUnknownAndNull) {
  argus_nccl_init_event i{};
  i.hdr.type = ARGUS_EV_NCCL_INIT;
  EXPECT_FALSE(decode_event(&i, sizeof(i) - 1));
  EXPECT_FALSE(decode_event(&i, 3));
  EXPECT_FALSE(decode_event(nullptr, 64));
  i.hdr.type = 0xdead;
  EXPECT_FALSE(decode_event(&i, sizeof(i)));
}

TEST(EventDecoder, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(128);
  size_t decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    buf[0] = static_cast<uint8_t>(rng() % 8);  // often a valid type
    buf[1] = buf[2] = buf[3] = 0;
    decoded += decode_event(buf.data(), rng() % buf.size()).has_value();
  }
  EXPECT_GT(decoded, 0u);
}

}  // namespace
}  // namespace argus
