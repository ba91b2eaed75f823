// dump_hash_map on real kernel maps (root): the batched read and the key-by-key
// walk give the same entries, for plain, per-CPU and LRU hashes, empty and full,
// and with more entries than one batch.
#include "userspace/probes/map_dump.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace argus {
namespace {

bool can_make_maps() {
  if (::geteuid() == 0) return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") ADD_FAILURE() << "CI=true and not root: BPF maps need root";
  return false;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// key -> the value's bytes, for comparing dumps whatever their order.
std::map<uint64_t, std::vector<uint8_t>> by_key(const MapDump& d) {
  std::map<uint64_t, std::vector<uint8_t>> m;
  for (size_t i = 0; i < d.n; ++i) m[d.key<uint64_t>(i)] = std::vector<uint8_t>(d.value(i), d.value(i) + d.value_size);
  return m;
}

void fill_and_compare(bpf_map_type type, uint32_t max_entries, uint32_t entries) {
  const int ncpus = libbpf_num_possible_cpus();
  ASSERT_GT(ncpus, 0);
  const bool per_cpu = type == BPF_MAP_TYPE_PERCPU_HASH;
  const size_t value_size = per_cpu ? 8u * static_cast<size_t>(ncpus) : 8u;
  Fd m{bpf_map_create(type, "argus_dump_test", 8, 8, max_entries, nullptr)};
  ASSERT_GE(m.fd, 0) << "bpf_map_create: " << errno;
  for (uint64_t k = 0; k < entries; ++k) {
    std::vector<uint64_t> v(value_size / 8);
    for (size_t c = 0; c < v.size(); ++c) v[c] = k * 1000 + c;
    ASSERT_EQ(bpf_map_update_elem(m.fd, &k, v.data(), BPF_ANY), 0) << k;
  }
  const MapDump batched = dump_hash_map(m.fd, 8, value_size, MapDumpMode::kBatch);
  const MapDump walked = dump_hash_map(m.fd, 8, value_size, MapDumpMode::kWalk);
  const MapDump chosen = dump_hash_map(m.fd, 8, value_size);
  EXPECT_TRUE(batched.batched) << "this kernel has BPF_MAP_LOOKUP_BATCH for hash maps (5.6+)";
  EXPECT_FALSE(walked.batched);
  EXPECT_EQ(walked.n, entries);
  EXPECT_EQ(batched.n, entries);
  EXPECT_EQ(chosen.n, entries);
  const auto w = by_key(walked);
  EXPECT_EQ(by_key(batched), w);
  EXPECT_EQ(by_key(chosen), w);
  for (const auto& [k, v] : w) {  // and the values are the ones written
    uint64_t first = 0;
    std::memcpy(&first, v.data(), 8);
    EXPECT_EQ(first, k * 1000);
  }
}

TEST(MapDump, BatchedAndWalkedReadsAgreeOnAHash) {
  if (!can_make_maps()) GTEST_SKIP() << "needs root";
  fill_and_compare(BPF_MAP_TYPE_HASH, 4096, 3000);  // more than one batch of 256
}

TEST(MapDump, BatchedAndWalkedReadsAgreeOnAPerCpuHash) {
  if (!can_make_maps()) GTEST_SKIP() << "needs root";
  fill_and_compare(BPF_MAP_TYPE_PERCPU_HASH, 1024, 700);
}

TEST(MapDump, BatchedAndWalkedReadsAgreeOnAnLruHash) {
  if (!can_make_maps()) GTEST_SKIP() << "needs root";
  fill_and_compare(BPF_MAP_TYPE_LRU_HASH, 2048, 500);
}

TEST(MapDump, EmptyAndFullMaps) {
  if (!can_make_maps()) GTEST_SKIP() << "needs root";
  fill_and_compare(BPF_MAP_TYPE_HASH, 64, 0);
  fill_and_compare(BPF_MAP_TYPE_HASH, 64, 64);
}

TEST(MapDump, NotAMapIsEmptyNotACrash) {
  const MapDump d = dump_hash_map(-1, 8, 8);
  EXPECT_EQ(d.n, 0u);
  EXPECT_TRUE(d.keys.empty());
}

}  // namespace
}  // namespace argus
