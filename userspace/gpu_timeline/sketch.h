// A compact per-step summary of a rank's GPU kernels: for each kernel name, the
// distribution of its durations as a log-bucketed sketch (relative error
// ±kSketchRelativeError), varint-encoded. Old steps can be compared without
// keeping a trace; the encoded size is what a step costs to keep.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bpf/argus_gpu_wire.h"

namespace argus::gpu {

// The producer's folder buckets durations too (ARGUS_GPU_SKETCH records): one constant.
inline constexpr double kSketchRelativeError = ARGUS_GPU_SKETCH_REL_ERR;

struct KernelDistribution {
  uint64_t count = 0;
  uint64_t sum_ns = 0;
  std::map<int32_t, uint64_t> buckets;  // log bucket index -> count

  // Duration below which `q` (0..1) of the kernels ran; 0 when empty.
  double quantile_ns(double q) const;
};

// A sketch read back from its bytes.
class DecodedSketch {
 public:
  const std::map<uint32_t, KernelDistribution>& kernels() const { return kernels_; }

 private:
  friend class StepSketch;
  std::map<uint32_t, KernelDistribution> kernels_;
};

// The builder: add() is on the agent's per-record path, so it only appends to a
// buffer that keeps its capacity from step to step (no allocation per record,
// and a sequential write: a hash lookup per record missed the cache on a busy
// node). Every kCompactEvery appends the buffer is sorted and equal (name,
// bucket) pairs merged, so a sketch that spans many steps (no step mark came)
// holds its distinct pairs plus at most that many; encode() does the same once.
class StepSketch {
 public:
  void add(uint32_t name_id, uint64_t duration_ns);
  // `count` kernels of one name in one bucket, as a folding producer sends them.
  void add_bucket(uint32_t name_id, int32_t bucket, uint64_t count, uint64_t sum_ns);
  bool empty() const { return entries_.empty(); }
  uint64_t count() const { return count_; }  // kernels added
  size_t entries() const { return entries_.size(); }  // held: distinct pairs + at most kCompactEvery
  static constexpr size_t kCompactEvery = 4096;
  void clear() {
    entries_.clear();
    count_ = 0;
    compact_at_ = kCompactEvery;
  }

  std::vector<uint8_t> encode();
  // The distributions of what was added (what decode(encode()) gives, before rounding).
  std::map<uint32_t, KernelDistribution> kernels() const;
  // nullopt on malformed input (truncated, bad varints, trailing bytes).
  static std::optional<DecodedSketch> decode(const std::vector<uint8_t>& bytes);

  static int32_t bucket_of(uint64_t duration_ns);
  static double bucket_value_ns(int32_t bucket);  // a representative duration of the bucket

 private:
  struct Entry {
    uint32_t name_id;
    int32_t bucket;
    uint64_t count;
    uint64_t sum_ns;
  };
  void append(const Entry& e) {
    entries_.push_back(e);
    if (entries_.size() >= compact_at_) compact();
  }
  void compact();
  void sort_entries();

  std::vector<Entry> entries_;
  uint64_t count_ = 0;
  size_t compact_at_ = kCompactEvery;
  // sort_entries()' scratch, kept from step to step.
  std::vector<Entry> sorted_;
  std::vector<uint32_t> name_end_;
  std::vector<uint8_t> encoded_;  // encode()'s room, kept too: the step keeps an exact copy
};

}  // namespace argus::gpu
