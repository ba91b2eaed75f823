// BPF's aggregates (the stats map: counts and sums per process, kind, sub-id and
// code) decoded into a rank's counters. BPF keeps totals since it first saw the
// process, so a decode replaces the counters it covers, never adds to them.
#pragma once
#include <cstdint>
#include <vector>

#include "bpf/argus.h"
#include "userspace/model/snapshot.h"

namespace argus {

// One aggregate as BPF keeps it (argus_stat_key + summed argus_stat_val).
struct AggregateRecord {
  uint32_t tgid = 0;
  uint16_t kind = 0;
  uint16_t sub = 0;
  int32_t code = 0;
  uint64_t count = 0;
  uint64_t sum = 0;
  uint64_t object = 0;  // ARGUS_STAT_C10D_CALLS: the backend's address (the key's code and pad)
};

// One entry of the stats map as the backend reads it.
struct StatEntry {
  argus_stat_key key;
  argus_stat_val value;  // summed over CPUs
};

// The same, as the counters take it.
AggregateRecord aggregate_of(const StatEntry& s);

// Sets every counter the aggregates cover (NCCL, synchronize, launches, copies,
// errors, Python GC timing, block I/O, on/off CPU) from `records`, the process's
// whole set: a counter with no record reads zero.
void apply_aggregates(const std::vector<AggregateRecord>& records, RankSnapshot& s);

}  // namespace argus
