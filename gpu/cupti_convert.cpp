#include "gpu/cupti_convert.h"

#include <cxxabi.h>

#include <cstdlib>

namespace argus::gpu {

std::string_view kernel_base_name(std::string_view n) {
  if (n.size() < 3 || n[0] != '_' || n[1] != 'Z') return n;
  size_t p = 2;
  if (p < n.size() && n[p] == 'L') ++p;  // internal linkage
  if (p < n.size() && n[p] == 'N') ++p;  // nested name: its first component
  size_t len = 0, q = p;
  while (q < n.size() && n[q] >= '0' && n[q] <= '9' && len < 100000) len = len * 10 + static_cast<size_t>(n[q++] - '0');
  if (q == p || len == 0 || q + len > n.size()) return n;
  return n.substr(q, len);
}

uint8_t classify_kernel_name(std::string_view name) {
  std::string_view base = kernel_base_name(name);
  if (!base.starts_with("nccl")) return 0;
  uint8_t flags = ARGUS_GPU_F_NCCL;
  // The operation token: ncclDevKernel_<Op>_..., ncclKernel_<Op>_..., or the
  // older nccl<Op>Kernel_... spellings.
  std::string_view op;
  for (std::string_view prefix : {std::string_view("ncclDevKernel_"), std::string_view("ncclKernel_")}) {
    if (base.starts_with(prefix)) {
      op = base.substr(prefix.size());
      break;
    }
  }
  if (op.empty()) op = base.substr(4);
  op = op.substr(0, op.find('_'));
  bool send = op.find("Send") != std::string_view::npos;
  bool recv = op.find("Recv") != std::string_view::npos;
  if (send || recv) flags |= ARGUS_GPU_F_P2P;
  if (recv && !send) flags |= ARGUS_GPU_F_RECV;
  if (send && !recv) flags |= ARGUS_GPU_F_SEND;
  return flags;
}

uint8_t copy_dir(uint32_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      return ARGUS_GPU_COPY_HTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      return ARGUS_GPU_COPY_DTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
      return ARGUS_GPU_COPY_DTOD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return ARGUS_GPU_COPY_HTOH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return ARGUS_GPU_COPY_PTOP;
    default:
      return ARGUS_GPU_COPY_OTHER;
  }
}

static std::string demangle(std::string_view raw) {
  std::string s(raw);
  if (!raw.starts_with("_Z")) return s;
  int status = 0;
  char* d = abi::__cxa_demangle(s.c_str(), nullptr, nullptr, &status);
  if (status == 0 && d) s = d;
  std::free(d);
  return s;
}

NameTable::Ref NameTable::intern(std::string_view raw) {
  Ref ref;
  if (raw.empty()) return ref;
  auto it = by_name_.find(raw);
  if (it != by_name_.end()) {
    ref.id = it->second.id;
    ref.flags = it->second.flags;
    ref.display = it->second.display->c_str();
    return ref;
  }
  uint8_t flags = classify_kernel_name(raw);
  if (by_name_.size() >= max_) {  // keep the flags, lose the name
    ++overflow_;
    ref.flags = flags;
    return ref;
  }
  Entry e{static_cast<uint32_t>(by_name_.size() + 1), flags, std::make_unique<std::string>(demangle(raw))};
  ref.id = e.id;
  ref.flags = e.flags;
  ref.display = e.display->c_str();
  ref.is_new = true;
  by_name_.emplace(std::string(raw), std::move(e));
  return ref;
}

NameTable::Ref NameTable::intern(const char* raw) {
  if (!raw || !*raw) return Ref{};
  CacheSlot& slot = cache_[(reinterpret_cast<uintptr_t>(raw) >> 3) % kCacheSlots];
  if (slot.ptr == raw && std::strncmp(raw, slot.key->c_str(), slot.key->size() + 1) == 0) {
    Ref ref = slot.ref;
    ref.is_new = false;
    return ref;
  }
  std::string_view sv(raw);
  Ref ref = intern(sv);
  if (ref.id != 0) {
    auto it = by_name_.find(sv);
    slot.ptr = raw;
    slot.key = &it->first;  // node-based map: stable
    slot.ref = ref;
  }
  return ref;
}

Outcome Converter::convert(const CUpti_Activity* a, argus_gpu_rec* out, NameTable::Ref* name) {
  *out = argus_gpu_rec{};
  *name = NameTable::Ref{};
  uint64_t start = 0, end = 0;
  switch (a->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const KernelRecord*>(a);
      start = k->start;
      end = k->end;
      if (start == 0 && end == 0) return Outcome::kUntimed;
      if (k->name) *name = names_.intern(k->name);
      out->kind = ARGUS_GPU_KERNEL;
      out->name_id = name->id;
      out->flags = name->flags;
      out->correlation_id = k->correlationId;
      out->stream_id = k->streamId;
      out->device_id = static_cast<__u16>(k->deviceId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const MemcpyRecord*>(a);
      start = m->start;
      end = m->end;
      if (start == 0 && end == 0) return Outcome::kUntimed;
      out->kind = ARGUS_GPU_MEMCPY;
      out->bytes = m->bytes;
      out->flags = static_cast<uint8_t>(copy_dir(m->copyKind) << ARGUS_GPU_COPY_SHIFT);
      out->correlation_id = m->correlationId;
      out->stream_id = m->streamId;
      out->device_id = static_cast<__u16>(m->deviceId);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const MemsetRecord*>(a);
      start = m->start;
      end = m->end;
      if (start == 0 && end == 0) return Outcome::kUntimed;
      out->kind = ARGUS_GPU_MEMSET;
      out->bytes = m->bytes;
      out->correlation_id = m->correlationId;
      out->stream_id = m->streamId;
      out->device_id = static_cast<__u16>(m->deviceId);
      break;
    }
    default:
      return Outcome::kSkippedKind;
  }
  out->start_ns = clock_.map(start);
  out->end_ns = clock_.map(end);
  if (out->end_ns < out->start_ns) out->end_ns = out->start_ns;
  return Outcome::kConverted;
}

BufferResult process_buffer(Converter& conv, NextRecordFn next, uint8_t* buffer, size_t valid,
                            uint64_t dropped, Sink& sink) {
  BufferResult r;
  argus_gpu_rec batch[ARGUS_GPU_BATCH_MAX];
  uint32_t n = 0;
  auto fire = [&] {
    sink.on_batch(batch, n, dropped);
    dropped = 0;
    n = 0;
    ++r.batches;
  };
  CUpti_Activity* rec = nullptr;
  if (buffer && valid) {
    for (;;) {
      CUptiResult st = next(buffer, valid, &rec);
      if (st != CUPTI_SUCCESS) {
        r.end = st;
        break;
      }
      NameTable::Ref name;
      switch (conv.convert(rec, &batch[n], &name)) {
        case Outcome::kConverted:
          if (name.is_new) {
            sink.on_name(name.id, name.display);
            ++r.names;
          }
          ++r.records;
          if (batch[n].kind == ARGUS_GPU_KERNEL) ++r.kernels;
          if (++n == ARGUS_GPU_BATCH_MAX) fire();
          break;
        case Outcome::kSkippedKind:
          ++r.skipped;
          break;
        case Outcome::kUntimed:
          ++r.untimed;
          break;
      }
    }
  } else {
    r.end = CUPTI_ERROR_MAX_LIMIT_REACHED;
  }
  if (n > 0 || (r.batches == 0 && dropped > 0)) fire();
  return r;
}

size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return (sizeof(KernelRecord) + 7) & ~size_t{7};
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return (sizeof(MemcpyRecord) + 7) & ~size_t{7};
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return (sizeof(MemsetRecord) + 7) & ~size_t{7};
    default:
      return 0;
  }
}

static CUpti_ActivityKind kind_at(const uint8_t* p) {
  CUpti_ActivityKind k;
  std::memcpy(&k, p, sizeof k);
  return k;
}

CUptiResult packed_next_record(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t off = 0;
  if (*record) {
    auto* cur = reinterpret_cast<uint8_t*>(*record);
    if (cur < buffer || cur >= buffer + valid) return CUPTI_ERROR_INVALID_PARAMETER;
    size_t sz = record_size(kind_at(cur));
    if (sz == 0) return CUPTI_ERROR_INVALID_KIND;
    off = static_cast<size_t>(cur - buffer) + sz;
  }
  if (off >= valid || valid - off < sizeof(CUpti_ActivityKind)) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  size_t sz = record_size(kind_at(buffer + off));
  if (sz == 0 || valid - off < sz) return CUPTI_ERROR_INVALID_KIND;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + off);
  return CUPTI_SUCCESS;
}

}  // namespace argus::gpu
