#include "userspace/probes/bpf_loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <vector>

#include "userspace/probes/bpf_loader_detail.h"
#include "userspace/probes/map_dump.h"

// Per-process map entries: tracked tgids, Python configs, aggregates, CPU
// stealers, TCP retransmits, in-flight calls, BPF's error counters.
namespace argus {

bool BpfLoader::set_tgid_state(uint32_t tgid, argus_tgid_state state) {
  uint32_t value = state;
  return bpf_map__update_elem(skel_->maps.tracked, &tgid, sizeof(tgid), &value, sizeof(value), BPF_ANY) == 0;
}

// Deletes every key of `map` that belongs to `tgid` (keys read first: deleting
// while walking would restart the walk).
template <typename Key, typename TgidOf>
static void delete_keys_of(bpf_map* map, uint32_t tgid, TgidOf tgid_of) {
  std::vector<Key> doomed;
  Key key{}, next{};
  const Key* prev = nullptr;
  while (bpf_map__get_next_key(map, prev, &next, sizeof(next)) == 0) {
    key = next;
    prev = &key;
    if (tgid_of(key) == tgid) doomed.push_back(key);
  }
  for (const auto& k : doomed) bpf_map__delete_elem(map, &k, sizeof(k), 0);
}

void BpfLoader::forget_tgid(uint32_t tgid) {
  bpf_map__delete_elem(skel_->maps.tracked, &tgid, sizeof(tgid), 0);
  bpf_map__delete_elem(skel_->maps.exit_info, &tgid, sizeof(tgid), 0);  // a cause no exit event took
  // Its threads' in-flight slots: they live as long as their thread (freed by a
  // flag between calls), and an LRU map full of dead slots would evict the
  // oldest live one first, which is the slot of a call that hangs.
  delete_keys_of<argus_inflight_key>(skel_->maps.inflight, tgid,
                                     [](const argus_inflight_key& k) { return static_cast<uint32_t>(k.pid_tgid >> 32); });
}

bool BpfLoader::set_python_proc(uint32_t tgid, const argus_py_proc& config) {
  return bpf_map__update_elem(skel_->maps.py_procs, &tgid, sizeof(tgid), &config, sizeof(config), BPF_ANY) == 0;
}

void BpfLoader::forget_python_proc(uint32_t tgid) {
  bpf_map__delete_elem(skel_->maps.py_procs, &tgid, sizeof(tgid), 0);
  bpf_map__delete_elem(skel_->maps.py_gc_snap, &tgid, sizeof(tgid), 0);
}

std::optional<argus_py_gc_snap> BpfLoader::read_python_gc(uint32_t tgid) const {
  argus_py_gc_snap snap{};
  if (bpf_map__lookup_elem(skel_->maps.py_gc_snap, &tgid, sizeof(tgid), &snap, sizeof(snap), 0) != 0)
    return std::nullopt;
  return snap;
}

std::vector<StatEntry> BpfLoader::read_stats(uint32_t only_tgid) const {
  std::vector<StatEntry> out;
  const size_t value_size = static_cast<size_t>(ncpus_) * sizeof(argus_stat_val);  // per CPU, 8-byte aligned
  const MapDump d = dump_hash_map(bpf_map__fd(skel_->maps.stats), sizeof(argus_stat_key), value_size);
  std::vector<argus_stat_val> per_cpu(static_cast<size_t>(ncpus_));
  for (size_t i = 0; i < d.n; ++i) {
    const auto key = d.key<argus_stat_key>(i);
    if (only_tgid != 0 && key.tgid != only_tgid) continue;
    std::memcpy(per_cpu.data(), d.value(i), value_size);
    StatEntry e{key, {0, 0}};
    for (const auto& v : per_cpu) {
      e.value.count += v.count;
      e.value.sum += v.sum;
    }
    out.push_back(e);
  }
  return out;
}

// Its counts, and its device memory with them (held, and the allocations kept
// for pairing): every path that drops a process's counts (it ended, it is not a
// rank, it is a rank's worker) drops those too, or they would stay for good.
void BpfLoader::delete_stats(uint32_t tgid) {
  for (const auto& e : read_stats(tgid)) bpf_map__delete_elem(skel_->maps.stats, &e.key, sizeof(e.key), 0);
  bpf_map__delete_elem(skel_->maps.gpu_mem, &tgid, sizeof(tgid), 0);
  delete_keys_of<argus_gpu_alloc_key>(skel_->maps.gpu_allocs, tgid, [](const argus_gpu_alloc_key& k) { return k.tgid; });
}

std::vector<TcpRetransEntry> BpfLoader::read_tcp_retransmits() const {
  std::vector<TcpRetransEntry> out;
  const MapDump d = dump_hash_map(bpf_map__fd(skel_->maps.tcp_retrans), sizeof(argus_tcp_key), sizeof(uint64_t));
  for (size_t i = 0; i < d.n; ++i) {
    uint64_t segs = 0;
    std::memcpy(&segs, d.value(i), sizeof segs);
    out.push_back({d.key<argus_tcp_key>(i), segs});
  }
  return out;
}

std::optional<uint64_t> BpfLoader::take_tcp_retransmit(const argus_tcp_key& key) {
  uint64_t segs = 0;
  const int fd = bpf_map__fd(skel_->maps.tcp_retrans);
  if (bpf_map_lookup_and_delete_elem(fd, &key, &segs) == 0) return segs;
  // Kernels before 5.14 cannot do both at once on a hash: read, then delete.
  if (bpf_map_lookup_elem(fd, &key, &segs) != 0) return std::nullopt;
  bpf_map_delete_elem(fd, &key);
  return segs;
}

std::map<uint32_t, uint64_t> BpfLoader::read_errors() const {
  std::map<uint32_t, uint64_t> out;
  std::vector<uint64_t> per_cpu(static_cast<size_t>(ncpus_));
  for (uint32_t i = 0; i < ARGUS_ERR_MAX; ++i) {
    uint64_t total = 0;
    if (bpf_map__lookup_elem(skel_->maps.bpf_errors, &i, sizeof(i), per_cpu.data(),
                             per_cpu.size() * sizeof(uint64_t), 0) == 0) {
      for (uint64_t v : per_cpu) total += v;
    }
    out[i] = total;
  }
  return out;
}

std::vector<InflightCall> BpfLoader::read_inflight_waits() const {
  std::vector<InflightCall> out;
  const MapDump d = dump_hash_map(bpf_map__fd(skel_->maps.inflight), sizeof(argus_inflight_key), sizeof(argus_inflight));
  for (size_t i = 0; i < d.n; ++i) {
    const auto key = d.key<argus_inflight_key>(i);
    argus_inflight value{};
    std::memcpy(&value, d.value(i), sizeof value);
    if (value.start_ns == 0) continue;  // the thread's slot, free between calls
    if (value.kind != ARGUS_STAT_NCCL_WAIT && value.kind != ARGUS_STAT_NCCL_GROUP_WAIT &&
        value.kind != ARGUS_STAT_CUDA_SYNC && value.kind != ARGUS_STAT_C10D_WAIT)
      continue;
    out.push_back({static_cast<uint32_t>(key.pid_tgid >> 32), static_cast<uint32_t>(key.pid_tgid), value.start_ns,
                   value.ptr, value.id, value.kind});
  }
  return out;
}

void BpfLoader::delete_seqs(uint32_t tgid) {
  delete_keys_of<argus_seq_key>(skel_->maps.coll_seq, tgid, [](const argus_seq_key& k) { return k.tgid; });
}

std::vector<StealerEntry> BpfLoader::read_stealers(uint32_t victim_tgid) const {
  auto all = read_stealers_of({victim_tgid});
  return std::move(all[victim_tgid]);
}

// One read of the map for every victim asked for.
std::map<uint32_t, std::vector<StealerEntry>> BpfLoader::read_stealers_of(const std::vector<uint32_t>& victims) const {
  std::map<uint32_t, std::vector<StealerEntry>> out;
  for (uint32_t v : victims) out[v];
  if (victims.empty()) return out;  // no rank to read for: the map is not touched
  const MapDump d =
      dump_hash_map(bpf_map__fd(skel_->maps.cpu_stealers), sizeof(argus_stealer_key), sizeof(argus_stealer_val));
  for (size_t i = 0; i < d.n; ++i) {
    const auto key = d.key<argus_stealer_key>(i);
    auto it = out.find(key.victim_tgid);
    if (it == out.end()) continue;
    argus_stealer_val value{};
    std::memcpy(&value, d.value(i), sizeof value);
    it->second.push_back({key, value});
  }
  return out;
}

void BpfLoader::delete_stealers(uint32_t victim_tgid) {
  for (const auto& e : read_stealers(victim_tgid))
    bpf_map__delete_elem(skel_->maps.cpu_stealers, &e.key, sizeof(e.key), 0);
}

std::map<uint32_t, argus_gpu_mem> BpfLoader::read_gpu_memory() const {
  std::map<uint32_t, argus_gpu_mem> out;
  const MapDump d = dump_hash_map(bpf_map__fd(skel_->maps.gpu_mem), sizeof(uint32_t), sizeof(argus_gpu_mem));
  for (size_t i = 0; i < d.n; ++i) {
    argus_gpu_mem m{};
    std::memcpy(&m, d.value(i), sizeof m);
    out[d.key<uint32_t>(i)] = m;
  }
  return out;
}

}  // namespace argus
