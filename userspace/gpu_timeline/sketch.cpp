#include "userspace/gpu_timeline/sketch.h"

#include <algorithm>
#include <cmath>

namespace argus::gpu {
namespace {

// gamma = (1 + e) / (1 - e): every duration in a bucket is within e of its representative value.
const double kGamma = (1 + kSketchRelativeError) / (1 - kSketchRelativeError);
const double kLogGamma = std::log(kGamma);

// At most 10 bytes. Writes through a pointer into room made beforehand: a
// push_back per byte (a capacity check each, and a buffer regrown a dozen times
// a step) was the agent's largest single cost with folded GPU records.
constexpr size_t kMaxVarintBytes = 10;
inline uint8_t* put_varint(uint8_t* out, uint64_t v) {
  while (v >= 0x80) {
    *out++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *out++ = static_cast<uint8_t>(v);
  return out;
}

uint64_t zigzag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
int64_t unzigzag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

struct Reader {
  const std::vector<uint8_t>& in;
  size_t pos = 0;
  bool get(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos >= in.size()) return false;
      const uint8_t b = in[pos++];
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes: not a varint we wrote
  }
};

}  // namespace

int32_t StepSketch::bucket_of(uint64_t duration_ns) {
  if (duration_ns == 0) return 0;
  return static_cast<int32_t>(std::ceil(std::log(static_cast<double>(duration_ns)) / kLogGamma));
}

double StepSketch::bucket_value_ns(int32_t bucket) {
  if (bucket <= 0) return 0;
  // The bucket holds (gamma^(i-1), gamma^i]; 2 gamma^i / (gamma + 1) is within e of both ends.
  return 2 * std::pow(kGamma, bucket) / (kGamma + 1);
}

double KernelDistribution::quantile_ns(double q) const {
  if (count == 0) return 0;
  const double rank = q * static_cast<double>(count - 1);
  uint64_t seen = 0;
  for (const auto& [b, n] : buckets) {
    seen += n;
    if (static_cast<double>(seen) > rank) return StepSketch::bucket_value_ns(b);
  }
  return StepSketch::bucket_value_ns(buckets.rbegin()->first);
}

void StepSketch::add(uint32_t name_id, uint64_t duration_ns) {
  append({name_id, bucket_of(duration_ns), 1, duration_ns});
  count_ += 1;
}

void StepSketch::add_bucket(uint32_t name_id, int32_t bucket, uint64_t count, uint64_t sum_ns) {
  if (count == 0) return;
  append({name_id, bucket, count, sum_ns});
  count_ += count;
}

// By name, then bucket. Name ids are interned from 1 up, so they are usually few
// and dense: a counting sort by name (linear, sequential passes), then each
// name's buckets by insertion (a few; a std::sort past 16). A std::sort of the
// whole step was the agent's largest single cost with folded GPU records.
// Sparse ids (a producer's own numbering): a plain sort.
void StepSketch::sort_entries() {
  auto by_name_bucket = [](const Entry& a, const Entry& b) {
    return a.name_id != b.name_id ? a.name_id < b.name_id : a.bucket < b.bucket;
  };
  uint32_t max_id = 0;
  for (const auto& e : entries_) max_id = std::max(max_id, e.name_id);
  if (max_id > 4 * entries_.size() + 1024) {
    std::sort(entries_.begin(), entries_.end(), by_name_bucket);
    return;
  }
  name_end_.assign(static_cast<size_t>(max_id) + 1, 0);
  for (const auto& e : entries_) ++name_end_[e.name_id];
  for (size_t i = 1; i < name_end_.size(); ++i) name_end_[i] += name_end_[i - 1];
  sorted_.resize(entries_.size());
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) sorted_[--name_end_[it->name_id]] = *it;
  for (size_t begin = 0; begin < sorted_.size();) {
    size_t end = begin + 1;
    while (end < sorted_.size() && sorted_[end].name_id == sorted_[begin].name_id) ++end;
    if (end - begin > 16) {
      std::sort(sorted_.begin() + static_cast<long>(begin), sorted_.begin() + static_cast<long>(end), by_name_bucket);
    } else {
      for (size_t i = begin + 1; i < end; ++i) {
        const Entry e = sorted_[i];
        size_t j = i;
        for (; j > begin && sorted_[j - 1].bucket > e.bucket; --j) sorted_[j] = sorted_[j - 1];
        sorted_[j] = e;
      }
    }
    begin = end;
  }
  entries_.swap(sorted_);
}

// Sorted, with one entry per (name, bucket).
void StepSketch::compact() {
  sort_entries();
  size_t out = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (out > 0 && entries_[out - 1].name_id == entries_[i].name_id && entries_[out - 1].bucket == entries_[i].bucket) {
      entries_[out - 1].count += entries_[i].count;
      entries_[out - 1].sum_ns += entries_[i].sum_ns;
    } else {
      entries_[out++] = entries_[i];
    }
  }
  entries_.resize(out);
  compact_at_ = std::max(kCompactEvery, out + kCompactEvery);
}

std::map<uint32_t, KernelDistribution> StepSketch::kernels() const {
  std::map<uint32_t, KernelDistribution> out;
  for (const auto& e : entries_) {
    auto& k = out[e.name_id];
    k.count += e.count;
    k.sum_ns += e.sum_ns;
    k.buckets[e.bucket] += e.count;
  }
  return out;
}

// Layout: names, then per name: id, count, sum (µs), buckets, then per bucket the
// index delta (zigzag) and its count. Everything varint.
std::vector<uint8_t> StepSketch::encode() {
  compact();  // sorted, one entry per (name, bucket)
  size_t names = 0;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (i == 0 || entries_[i].name_id != entries_[i - 1].name_id) ++names;
  // Room for the worst case: 1 + 4 per name + 2 per bucket varints.
  encoded_.resize(kMaxVarintBytes * (1 + 4 * names + 2 * entries_.size()));
  uint8_t* out = put_varint(encoded_.data(), names);
  for (size_t i = 0; i < entries_.size();) {
    const uint32_t id = entries_[i].name_id;
    size_t end = i;
    uint64_t sum = 0, count = 0;
    for (; end < entries_.size() && entries_[end].name_id == id; ++end) {
      sum += entries_[end].sum_ns;
      count += entries_[end].count;
    }
    out = put_varint(out, id);
    out = put_varint(out, count);
    out = put_varint(out, (sum + 500) / 1000);
    out = put_varint(out, end - i);  // compacted: one entry per bucket
    int64_t prev = 0;
    for (size_t j = i; j < end; ++j) {
      out = put_varint(out, zigzag(static_cast<int64_t>(entries_[j].bucket) - prev));
      out = put_varint(out, entries_[j].count);
      prev = entries_[j].bucket;
    }
    i = end;
  }
  return {encoded_.data(), out};
}

std::optional<DecodedSketch> StepSketch::decode(const std::vector<uint8_t>& bytes) {
  Reader r{bytes};
  DecodedSketch s;
  uint64_t names = 0;
  if (!r.get(names) || names > bytes.size()) return std::nullopt;
  for (uint64_t i = 0; i < names; ++i) {
    uint64_t id = 0, count = 0, sum_us = 0, nb = 0;
    if (!r.get(id) || !r.get(count) || !r.get(sum_us) || !r.get(nb) || id > UINT32_MAX || nb > bytes.size())
      return std::nullopt;
    KernelDistribution k;
    k.count = count;
    k.sum_ns = sum_us * 1000;
    int64_t prev = 0;
    uint64_t total = 0;
    for (uint64_t j = 0; j < nb; ++j) {
      uint64_t delta = 0, n = 0;
      if (!r.get(delta) || !r.get(n)) return std::nullopt;
      // Two int32 bucket indices differ by less than 2^32; a larger delta is garbage
      // (and adding it unchecked could overflow int64).
      const int64_t step = unzigzag(delta);
      if (step <= -(int64_t{1} << 32) || step >= (int64_t{1} << 32)) return std::nullopt;
      prev += step;
      if (prev < INT32_MIN || prev > INT32_MAX) return std::nullopt;
      k.buckets[static_cast<int32_t>(prev)] += n;
      total += n;
    }
    if (total != count) return std::nullopt;
    s.kernels_[static_cast<uint32_t>(id)] = std::move(k);
  }
  if (r.pos != bytes.size()) return std::nullopt;
  return s;
}

}  // namespace argus::gpu
