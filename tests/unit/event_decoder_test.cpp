// Ring-buffer records: typed when well-formed, refused when not.
#include "userspace/wire/event_decoder.h"
#include "userspace/wire/labels.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace argus {
namespace {

TEST(EventDecoder, DecodesEachType) {
  argus_nccl_coll_event c{};
  c.hdr.type = ARGUS_EV_NCCL_COLL;
  c.hdr.tgid = 42;
  c.op = ARGUS_OP_SEND;
  c.seq = 4096;
  auto ev = decode_event(&c, sizeof(c));
  ASSERT_TRUE(ev);
  const auto* got = std::get_if<argus_nccl_coll_event>(&*ev);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->hdr.tgid, 42u);
  EXPECT_EQ(got->seq, 4096u);
  EXPECT_EQ(event_source(*ev), EventSource::kNccl);

  argus_exit_event x{};
  x.hdr.type = ARGUS_EV_EXIT;
  x.exit_code = 9;
  ev = decode_event(&x, sizeof(x));
  ASSERT_TRUE(ev);
  EXPECT_EQ(std::get<argus_exit_event>(*ev).exit_code, 9);
  EXPECT_STREQ(label_of(event_source(*ev)), "proc");
}

TEST(EventDecoder, SendCarriesItsPeerAndGroup) {
  argus_nccl_coll_event c{};
  c.hdr.type = ARGUS_EV_NCCL_COLL;
  c.op = ARGUS_OP_SEND;
  c.peer = 3;
  c.group = 12;
  auto ev = decode_event(&c, sizeof(c));
  ASSERT_TRUE(ev);
  EXPECT_EQ(std::get<argus_nccl_coll_event>(*ev).peer, 3);
  EXPECT_EQ(std::get<argus_nccl_coll_event>(*ev).group, 12u);
  EXPECT_FALSE(decode_event(&c, 56));  // the record before peer and group existed
}

TEST(EventDecoder, ChildAndInitAllRecords) {
  argus_nccl_child_event ch{};
  ch.hdr.type = ARGUS_EV_NCCL_CHILD;
  ch.api = ARGUS_NCCL_COMM_SPLIT;
  ch.parent = 0xa0;
  ch.color = 2;
  ch.nth = 1;
  auto ev = decode_event(&ch, sizeof(ch));
  ASSERT_TRUE(ev);
  EXPECT_EQ(std::get<argus_nccl_child_event>(*ev).color, 2);
  EXPECT_EQ(event_source(*ev), EventSource::kNccl);
  EXPECT_FALSE(decode_event(&ch, sizeof(ch) - 1));
  ch.api = ARGUS_NCCL_INIT_RANK;  // an init is no child
  EXPECT_FALSE(decode_event(&ch, sizeof(ch)));

  argus_nccl_init_all_event all{};
  all.hdr.type = ARGUS_EV_NCCL_INIT_ALL;
  all.ndev = 2;
  all.comms[1] = 0xb1;
  ev = decode_event(&all, sizeof(all));
  ASSERT_TRUE(ev);
  EXPECT_EQ(std::get<argus_nccl_init_all_event>(*ev).comms[1], 0xb1u);
  EXPECT_EQ(event_source(*ev), EventSource::kNccl);
  EXPECT_FALSE(decode_event(&all, sizeof(all) - 8));
}

// c10d's records: a group's text ends inside the record whatever BPF copied.
TEST(EventDecoder, C10dRecords) {
  argus_c10d_group_event g{};
  g.hdr.type = ARGUS_EV_C10D_GROUP;
  g.group = 0xa0;
  g.what = ARGUS_C10D_GROUP_DESC;
  std::memset(g.text, 'x', sizeof g.text);  // no NUL at all
  auto ev = decode_event(&g, sizeof(g));
  ASSERT_TRUE(ev);
  const auto& got = std::get<argus_c10d_group_event>(*ev);
  EXPECT_EQ(std::strlen(got.text), sizeof(g.text) - 1);
  EXPECT_EQ(event_source(*ev), EventSource::kNccl);
  EXPECT_FALSE(decode_event(&g, sizeof(g) - 1));

  argus_c10d_coll_event c{};
  c.hdr.type = ARGUS_EV_C10D_COLL;
  c.backend = 0xb0;
  c.op = ARGUS_C10D_OP_BARRIER;
  c.seq = 7;
  ev = decode_event(&c, sizeof(c));
  ASSERT_TRUE(ev);
  EXPECT_EQ(std::get<argus_c10d_coll_event>(*ev).seq, 7u);

  argus_c10d_backend_event b{};
  b.hdr.type = ARGUS_EV_C10D_BACKEND;
  b.rank = 3;
  b.size = 4;
  ev = decode_event(&b, sizeof(b));
  ASSERT_TRUE(ev);
  EXPECT_EQ(std::get<argus_c10d_backend_event>(*ev).size, 4);
  EXPECT_FALSE(decode_event(&b, sizeof(b) - 8));
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

TEST(EventDecoder, GpuBatchTakesExactlyItsRecords) {
  auto ev = std::make_unique<argus_gpu_batch_event>();
  std::memset(ev.get(), 0, sizeof(*ev));
  ev->hdr.type = ARGUS_EV_GPU_BATCH;
  ev->hdr.tgid = 7;
  ev->n = 3;
  ev->sent = 5;
  ev->dropped = 11;
  for (uint32_t i = 0; i < 3; ++i) ev->recs[i].correlation_id = 100 + i;
  const size_t size = offsetof(argus_gpu_batch_event, recs) + 3 * sizeof(argus_gpu_rec);
  auto d = decode_event(ev.get(), size);
  ASSERT_TRUE(d);
  const auto& b = std::get<GpuBatch>(*d);
  ASSERT_EQ(b.recs.size(), 3u);
  EXPECT_EQ(b.recs[2].correlation_id, 102u);
  EXPECT_EQ(b.sent, 5u);
  EXPECT_EQ(b.dropped, 11u);
  EXPECT_STREQ(label_of(event_source(*d)), "gpu");
  EXPECT_FALSE(decode_event(ev.get(), size - 1));  // fewer bytes than n records
  ev->n = ARGUS_GPU_BATCH_MAX + 1;                  // a count BPF never writes
  EXPECT_FALSE(decode_event(ev.get(), sizeof(*ev)));

  argus_gpu_name_event n{};
  n.hdr.type = ARGUS_EV_GPU_NAME;
  n.name_id = 4;
  std::memset(n.name, 'k', sizeof(n.name));  // no NUL: kept to the buffer's end, never past it
  d = decode_event(&n, sizeof(n));
  ASSERT_TRUE(d);
  EXPECT_EQ(std::get<GpuName>(*d).name.size(), sizeof(n.name));
  EXPECT_FALSE(decode_event(&n, sizeof(n) - 1));

  argus_call_done_event c{};
  c.hdr.type = ARGUS_EV_CALL_DONE;
  c.cls = ARGUS_CLS_CUDA;
  d = decode_event(&c, sizeof(c));
  ASSERT_TRUE(d);
  EXPECT_STREQ(label_of(event_source(*d)), "cuda");
}

TEST(EventDecoder, RandomBytesNeverCrash) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(128);
  size_t decoded = 0;
  for (int i = 0; i < 20000; ++i) {
    for (auto& b : buf) b = static_cast<uint8_t>(rng());
    buf[0] = static_cast<uint8_t>(rng() % 11);  // often a valid type
    buf[1] = buf[2] = buf[3] = 0;
    decoded += decode_event(buf.data(), rng() % buf.size()).has_value();
  }
  EXPECT_GT(decoded, 0u);
}

}  // namespace
}  // namespace argus
