// Pure logic of libargus-cupti.so: CUPTI activity records -> the GPU wire format
// (bpf/argus_gpu_wire.h). Nothing here calls CUPTI: buffers are walked through a
// function pointer (the real cuptiActivityGetNextRecord, or packed_next_record for
// hand-built buffers), so all of it is unit-tested without a GPU or a driver.
//
// Record structs are the CUDA 13 toolkit's own: CUpti_ActivityKernel10 (kinds
// KERNEL and CONCURRENT_KERNEL), CUpti_ActivityMemcpy6, CUpti_ActivityMemset4.
#pragma once

#include <cupti_activity.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "bpf/argus_gpu_wire.h"

namespace argus::gpu {

using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;

// CUPTI timestamps -> CLOCK_MONOTONIC ns. Identity when a timestamp callback
// returning CLOCK_MONOTONIC is registered; otherwise an offset measured between
// cuptiGetTimestamp and clock_gettime(CLOCK_MONOTONIC).
struct ClockMap {
  int64_t offset_ns = 0;
  // 0 stays 0 (CUPTI: "no timing information"); never wraps below 0.
  uint64_t map(uint64_t t) const {
    if (t == 0) return 0;
    int64_t r = static_cast<int64_t>(t) + offset_ns;
    return r < 0 ? 0 : static_cast<uint64_t>(r);
  }
};

// ARGUS_GPU_F_NCCL / _P2P / _RECV from a kernel name as CUPTI reports it
// (mangled "_Z..." or plain).
uint8_t classify_kernel_name(std::string_view name);
// The identifier a (possibly Itanium-mangled) kernel name starts with:
// "_Z22ncclDevKernel_SendRecv..." -> "ncclDevKernel_SendRecv".
std::string_view kernel_base_name(std::string_view name);
// CUpti_ActivityMemcpyKind -> enum argus_gpu_copy_dir.
uint8_t copy_dir(uint32_t cupti_copy_kind);

// Kernel-name interning: the same name always gets the same id; ids from 1.
class NameTable {
 public:
  struct Ref {
    uint32_t id = 0;           // 0 = unnamed or the table is full
    uint8_t flags = 0;         // ARGUS_GPU_F_* derived from the name
    bool is_new = false;       // first sighting: fire argus:gpu_name(id, display)
    const char* display = "";  // demangled when possible; stable for the table's life
  };
  explicit NameTable(size_t max_names = 65536) : max_(max_names) {}
  Ref intern(std::string_view raw);
  // Same, for a NUL-terminated name as CUPTI hands it out: CUPTI shares one
  // string among all records of a kernel, so a small cache keyed by its address
  // (verified by content, so a reused address is harmless) skips hashing.
  Ref intern(const char* raw);
  size_t size() const { return by_name_.size(); }
  uint64_t overflow() const { return overflow_; }
  // Every interned name: f(id, display). (Announced again when a new agent listens.)
  template <class F>
  void for_each(F&& f) const {
    for (const auto& [raw, e] : by_name_) f(e.id, e.display->c_str());
  }

 private:
  struct Entry {
    uint32_t id;
    uint8_t flags;
    std::unique_ptr<std::string> display;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, Entry, Hash, std::equal_to<>> by_name_;
  struct CacheSlot {
    const char* ptr = nullptr;
    const std::string* key = nullptr;
    Ref ref;
  };
  static constexpr size_t kCacheSlots = 1024;
  std::unique_ptr<CacheSlot[]> cache_{new CacheSlot[kCacheSlots]};
  size_t max_;
  uint64_t overflow_ = 0;
};

enum class Outcome { kConverted, kSkippedKind, kUntimed };

// One CUPTI record -> one wire record.
class Converter {
 public:
  explicit Converter(NameTable& names) : names_(names) {}
  void set_clock(ClockMap c) { clock_ = c; }
  const ClockMap& clock() const { return clock_; }
  // On kConverted, *out is filled and *name is the kernel's name ref (is_new
  // means the caller must announce it before the record crosses the wire).
  Outcome convert(const CUpti_Activity* rec, argus_gpu_rec* out, NameTable::Ref* name);

 private:
  NameTable& names_;
  ClockMap clock_;
};

using NextRecordFn = CUptiResult (*)(uint8_t* buffer, size_t valid, CUpti_Activity** record);

// Where converted records go (the injection library fires USDT probes).
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void on_name(uint32_t id, const char* name) noexcept = 0;
  virtual void on_batch(const argus_gpu_rec* recs, uint32_t n, uint64_t dropped) noexcept = 0;
};

struct BufferResult {
  uint64_t records = 0;  // converted and handed to the sink
  uint64_t kernels = 0;  // ... of them kernels
  uint64_t batches = 0;  // on_batch calls
  uint64_t names = 0;    // on_name calls
  uint64_t skipped = 0;  // unknown activity kinds
  uint64_t untimed = 0;  // records without timestamps (start = end = 0)
  CUptiResult end = CUPTI_SUCCESS;  // what stopped the walk
};

// Walks one buffer, converts every record and hands chunks of at most
// ARGUS_GPU_BATCH_MAX to the sink. `dropped` rides on the first batch; a buffer
// with nothing to send but dropped > 0 yields one batch with n = 0.
// Names are announced before the batch that first uses them.
BufferResult process_buffer(Converter& conv, NextRecordFn next, uint8_t* buffer, size_t valid,
                            uint64_t dropped, Sink& sink);

// Size of a record of this kind as CUPTI lays it out, 0 for kinds we do not know.
size_t record_size(CUpti_ActivityKind kind);
// cuptiActivityGetNextRecord for hand-built buffers: records of the structs above
// back to back, each 8-byte aligned (the layout the real libcupti walks too).
CUptiResult packed_next_record(uint8_t* buffer, size_t valid, CUpti_Activity** record);

// Builds such a buffer (tests, benches, the integration test's driver).
class PackedBuffer {
 public:
  template <class T>
  void add(const T& rec) {
    size_t off = bytes_;
    size_t sz = (sizeof(T) + 7) & ~size_t{7};
    words_.resize((off + sz) / 8, 0);
    std::memcpy(reinterpret_cast<uint8_t*>(words_.data()) + off, &rec, sizeof(T));
    bytes_ = off + sz;
  }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words_.data()); }
  size_t size() const { return bytes_; }
  void clear() {
    words_.clear();
    bytes_ = 0;
  }

 private:
  std::vector<uint64_t> words_;
  size_t bytes_ = 0;
};

}  // namespace argus::gpu
