// The BPF object's lifecycle (open, size, load, attach) behind RAII: no naked
// fds or links escape. Maps and the ring buffer are reached only through here.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "argus.h"
#include "attach/attach_plan.h"
#include "common/result.h"

struct argus_bpf;     // the bpftool skeleton
struct bpf_link;
struct ring_buffer;

namespace argus {

// One attached probe; detaches on destruction.
class Link {
 public:
  explicit Link(bpf_link* link) : link_(link) {}
  Link(Link&& other) noexcept : link_(other.link_) { other.link_ = nullptr; }
  Link& operator=(Link&& other) noexcept;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  ~Link();

 private:
  bpf_link* link_;
};

struct LoaderOptions {
  std::string btf_path = "/sys/kernel/btf/vmlinux";
  uint32_t ringbuf_bytes = 4u << 20;
};

struct StatEntry {
  argus_stat_key key;
  argus_stat_val value;  // summed over CPUs
};

// A collective call still running (its entry seen, its return not yet).
// A call that has entered and not returned yet: a collective (kind
// ARGUS_STAT_NCCL_WAIT, comm = its communicator) or a CUDA synchronize
// (ARGUS_STAT_CUDA_SYNC, op = the api id).
struct InflightCall {
  uint32_t tgid = 0;
  uint32_t tid = 0;
  uint64_t start_ns = 0;
  uint64_t comm = 0;
  uint32_t op = 0;
  uint32_t kind = 0;
};

class BpfLoader {
 public:
  // Opens, sizes and loads the object, and attaches the process tracepoints
  // (tp_btf, else raw_tp). The error names what failed in one line.
  static Result<std::unique_ptr<BpfLoader>> create(const LoaderOptions& opts);
  ~BpfLoader();
  BpfLoader(const BpfLoader&) = delete;
  BpfLoader& operator=(const BpfLoader&) = delete;

  // A uprobe (or uretprobe) on `path` at `file_offset`, for every process (pid -1).
  Result<Link> attach_uprobe(const std::string& path, const ProbeSpec& spec);

  // The GPU-activity USDT probes of a producer (argus:gpu_batch, or argus:gpu_name
  // when `names`), for every process (pid -1).
  Result<Link> attach_gpu_usdt(const std::string& path, bool names);

  // Tracked-tgid map.
  bool set_tgid_state(uint32_t tgid, argus_tgid_state state);
  void forget_tgid(uint32_t tgid);

  // All aggregates (per CPU summed); only_tgid != 0 restricts to one process.
  std::vector<StatEntry> read_stats(uint32_t only_tgid = 0) const;
  void delete_stats(uint32_t tgid);
  std::map<std::string, uint64_t> read_errors() const;  // BPF error counters by name
  // Collectives and synchronize calls still running (a host blocked in them).
  std::vector<InflightCall> read_inflight_waits() const;
  void delete_seqs(uint32_t tgid);  // the collective numbering of an ended process

  // Ring buffer: the callback gets each raw record; poll waits up to timeout_ms.
  using EventHandler = std::function<void(const void* data, size_t size)>;
  void set_event_handler(EventHandler handler) { handler_ = std::move(handler); }
  int poll_events(int timeout_ms);

  const std::string& tracepoint_flavour() const { return tp_flavour_; }  // "tp_btf" or "raw_tp"

 private:
  BpfLoader() = default;
  static int on_ringbuf_record(void* ctx, void* data, size_t size);

  argus_bpf* skel_ = nullptr;
  ring_buffer* ringbuf_ = nullptr;
  std::vector<Link> proc_links_;
  EventHandler handler_;
  std::string tp_flavour_;
  int ncpus_ = 1;
};

const char* bpf_error_name(uint32_t err);

}  // namespace argus
