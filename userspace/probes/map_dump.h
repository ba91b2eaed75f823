// Reading a whole BPF hash map each stats pass. Walking it key by key costs two
// syscalls per entry (get_next_key, lookup): at 512 ranks that was most of the
// agent's CPU. BPF_MAP_LOOKUP_BATCH (kernel 5.6+) reads hundreds of entries per
// syscall; where the kernel has no batch ops for the map, the key-by-key walk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace argus {

struct MapDump {
  size_t key_size = 0, value_size = 0, n = 0;
  std::vector<uint8_t> keys, values;  // n entries each, packed
  bool batched = false;               // read with BPF_MAP_LOOKUP_BATCH
  template <class K>
  K key(size_t i) const {
    K k;
    std::memcpy(&k, keys.data() + i * key_size, sizeof(K));
    return k;
  }
  const uint8_t* value(size_t i) const { return values.data() + i * value_size; }
};

enum class MapDumpMode { kAuto, kBatch, kWalk };

// Every entry of the hash map `fd`. value_size is what one lookup returns (for a
// per-CPU map: round_up(size, 8) * possible CPUs). kAuto: batched, falling back to
// the walk when the kernel refuses batch ops; kBatch / kWalk: only that way (tests).
// Entries added or deleted meanwhile may or may not be in it, as with any walk.
MapDump dump_hash_map(int fd, size_t key_size, size_t value_size, MapDumpMode mode = MapDumpMode::kAuto);

}  // namespace argus
