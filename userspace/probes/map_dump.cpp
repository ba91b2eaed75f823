#include "userspace/probes/map_dump.h"

#include <bpf/bpf.h>

#include <algorithm>
#include <cerrno>

namespace argus {
namespace {

constexpr uint32_t kFirstChunk = 256;
constexpr uint32_t kMaxChunk = 1u << 16;

// The key-by-key walk: get_next_key, then a lookup (an entry deleted meanwhile is skipped).
void walk(int fd, MapDump& d) {
  std::vector<uint8_t> key(d.key_size), next(d.key_size), value(d.value_size);
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    key = next;
    prev = key.data();
    if (bpf_map_lookup_elem(fd, key.data(), value.data()) != 0) continue;
    d.keys.insert(d.keys.end(), key.begin(), key.end());
    d.values.insert(d.values.end(), value.begin(), value.end());
    ++d.n;
  }
}

// BPF_MAP_LOOKUP_BATCH until ENOENT (the end). False when the kernel refuses it
// before anything was read (no batch ops for this map or kernel): walk instead.
bool batch(int fd, MapDump& d) {
  // The position token: a bucket index for hash maps, a key for others; room for either.
  std::vector<uint8_t> in(std::max<size_t>(d.key_size, 8)), out(in.size());
  bool first = true;
  uint32_t chunk = kFirstChunk;
  for (;;) {
    uint32_t count = chunk;
    d.keys.resize((d.n + count) * d.key_size);
    d.values.resize((d.n + count) * d.value_size);
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    const int err = bpf_map_lookup_batch(fd, first ? nullptr : in.data(), out.data(), d.keys.data() + d.n * d.key_size,
                                         d.values.data() + d.n * d.value_size, &count, &opts);
    const int e = err ? errno : 0;
    if (err && e == ENOSPC && count == 0 && chunk < kMaxChunk) {  // one bucket holds more than the chunk
      chunk *= 2;
      continue;
    }
    // The kernel reports how many it copied on success and at the end (ENOENT); on
    // any other error `count` is not to be trusted.
    if (!err || e == ENOENT) d.n += count;
    if (err) {
      d.keys.resize(d.n * d.key_size);
      d.values.resize(d.n * d.value_size);
      if (e == ENOENT) return true;  // read to the end
      return !first;  // refused at once: walk instead; failed midway: keep what was read (the next pass reads again)
    }
    in = out;
    first = false;
  }
}

}  // namespace

MapDump dump_hash_map(int fd, size_t key_size, size_t value_size, MapDumpMode mode) {
  MapDump d;
  d.key_size = key_size;
  d.value_size = value_size;
  if (mode != MapDumpMode::kWalk) {
    if (batch(fd, d)) {
      d.batched = true;
      return d;
    }
    d = MapDump{key_size, value_size, 0, {}, {}, false};
    if (mode == MapDumpMode::kBatch) return d;
  }
  walk(fd, d);
  return d;
}

}  // namespace argus
