// The seam between the agent and BPF: the maps, the ring buffer and the
// attaches the agent uses, and nothing else, in four slices (below). The real
// backend is BpfLoader (the skeleton in the kernel); tests replay recorded
// records and aggregates through fakes, without root.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bpf/argus.h"
#include "bpf/argus_python.h"
#include "bpf/argus_sched.h"
#include "userspace/attach/attach_plan.h"
#include "userspace/common/result.h"
#include "userspace/procfs/socket_owners.h"
#include "userspace/wire/aggregates.h"

struct bpf_link;

namespace argus {

// One attach (a libbpf link, or the fd of a kernel link that libbpf 1.1 cannot
// wrap: a uprobe_multi link holds many probes); detaches on destruction.
class Link {
 public:
  explicit Link(bpf_link* link) : link_(link) {}
  static Link from_fd(int fd) {
    Link l(nullptr);
    l.fd_ = fd;
    return l;
  }
  Link(Link&& other) noexcept : link_(other.link_), fd_(other.fd_) {
    other.link_ = nullptr;
    other.fd_ = -1;
  }
  Link& operator=(Link&& other) noexcept;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;
  ~Link();

 private:
  void reset();
  bpf_link* link_;
  int fd_ = -1;
};

// The uprobes of one file, attached together (BpfBackend::attach_uprobes).
struct AttachedUprobes {
  std::vector<Link> links;          // fewer than the probes where one link holds many
  size_t probes = 0;                // probes attached
  std::vector<std::string> errors;  // one line per probe that failed

  // One attach of `n` probes: its link, or its error.
  void add(Result<Link> link, size_t n = 1) {
    if (link.ok()) {
      links.push_back(std::move(*link));
      probes += n;
    } else {
      errors.push_back(link.error());
    }
  }
};


// A process that held the CPU a rank's thread waited for (bpf/sched_switch.bpf.c).
struct StealerEntry {
  argus_stealer_key key;
  argus_stealer_val value;
};

// A call that has entered and not returned yet: a collective (kind
// ARGUS_STAT_NCCL_WAIT, comm = its communicator), an outermost ncclGroupEnd
// (ARGUS_STAT_NCCL_GROUP_WAIT, comm = its group's first communicator) or a
// CUDA synchronize (ARGUS_STAT_CUDA_SYNC, op = the api id).
struct InflightCall {
  uint32_t tgid = 0;
  uint32_t tid = 0;
  uint64_t start_ns = 0;
  uint64_t comm = 0;
  uint32_t op = 0;
  uint32_t kind = 0;
};

// The backend is cut the way its users need it, so that a fake overrides only
// the slice its test drives: the probe manager attaches (BpfAttach); the host
// collectors and the rank lifecycle read and write per-process map entries
// (BpfRankMaps); the event loop drains records (BpfEventStreams); the agent's
// health reports what loaded (BpfLifecycle). The real one, BpfLoader, is all four.

// What the object loaded and attached at start.
class BpfLifecycle {
 public:
  virtual ~BpfLifecycle() = default;
  // The kernel tracepoint probes and their state: probe -> "tp_btf", "raw_tp",
  // "off" (turned off by a flag) or "failed" (the kernel refused it).
  virtual std::map<std::string, std::string> kernel_probes() const { return {}; }
  // Why the failed ones failed, one line each.
  virtual std::vector<std::string> kernel_probe_errors() const { return {}; }
};

// Probes on library files, for every process.
class BpfAttach {
 public:
  virtual ~BpfAttach() = default;
  // A uprobe (or uretprobe) on `path` at the spec's offset, for every process (pid -1).
  virtual Result<Link> attach_uprobe(const std::string& path, const ProbeSpec& spec) = 0;
  // Every spec on one file. Here one link per probe; the real backend puts the
  // probes of one program and direction on one uprobe_multi link where the
  // kernel has them (one detach grace period per link, not per probe).
  virtual AttachedUprobes attach_uprobes(const std::string& path, const std::vector<ProbeSpec>& specs) {
    AttachedUprobes out;
    for (const auto& spec : specs) out.add(attach_uprobe(path, spec));
    return out;
  }
  // How uprobes are attached: "multi" (uprobe_multi links) or "perf" (one perf
  // event per probe).
  virtual std::string uprobe_link_kind() const { return "perf"; }
  // The GPU-activity USDT probes of a producer (argus:gpu_batch, or argus:gpu_name when `names`).
  virtual Result<Link> attach_gpu_usdt(const std::string& path, bool names) = 0;
  // Slots of libbpf's USDT spec table (each producer attach takes some; a
  // detach gives them back); 0 when there is no such table.
  virtual uint64_t usdt_spec_slots() const { return 0; }
  // A USDT probe provider:name in `path` (every process), running `program`.
  virtual Result<Link> attach_usdt(const std::string& /*path*/, const char* provider, const char* name,
                                   ProbeProgram /*program*/) {
    return make_error(std::string("no USDT support for ") + provider + ":" + name);
  }
};

// What BPF keeps per process: whether it is traced, its Python interpreter, its
// aggregates, who took its CPU, its sockets' retransmits, the calls it is
// blocked in, and BPF's own error counters.
class BpfRankMaps {
 public:
  virtual ~BpfRankMaps() = default;
  // Tracked-tgid map.
  virtual bool set_tgid_state(uint32_t tgid, argus_tgid_state state) = 0;
  virtual void forget_tgid(uint32_t tgid) = 0;
  // Python interpreter config per tgid (py_procs map): the GC probes and the
  // stack sampler act only on tgids that have one.
  virtual bool set_python_proc(uint32_t /*tgid*/, const argus_py_proc& /*config*/) { return false; }
  virtual void forget_python_proc(uint32_t /*tgid*/) {}  // also drops its GC snapshot
  // The newest absolute GC counters the probes saw for a tgid (py_gc_snap map).
  virtual std::optional<argus_py_gc_snap> read_python_gc(uint32_t /*tgid*/) const { return std::nullopt; }

  // Who took a rank's CPU (runqueue waits charged to the task switched out),
  // totals since the rank was first followed; dropped when it ends.
  virtual std::vector<StealerEntry> read_stealers(uint32_t /*victim_tgid*/) const { return {}; }
  // Every victim's stealers at once (a stats pass over all ranks). The map is
  // shared by all ranks: a backend that walks it should walk it once, not once
  // per rank (64 ranks took 30% of a core that way).
  virtual std::map<uint32_t, std::vector<StealerEntry>> read_stealers_of(const std::vector<uint32_t>& victims) const {
    std::map<uint32_t, std::vector<StealerEntry>> out;
    for (uint32_t v : victims) out[v] = read_stealers(v);
    return out;
  }
  virtual void delete_stealers(uint32_t /*victim_tgid*/) {}

  // All aggregates (per CPU summed); only_tgid != 0 restricts to one process.
  virtual std::vector<StatEntry> read_stats(uint32_t only_tgid = 0) const = 0;
  virtual void delete_stats(uint32_t tgid) = 0;
  virtual std::map<uint32_t, uint64_t> read_errors() const = 0;  // BPF error counters by id (enum argus_error)
  // The TCP retransmit counts per (socket inode, remote), and the removal of an
  // idle one, returning its last count (nullopt when it was gone already).
  virtual std::vector<TcpRetransEntry> read_tcp_retransmits() const { return {}; }
  virtual std::optional<uint64_t> take_tcp_retransmit(const argus_tcp_key& /*key*/) { return std::nullopt; }
  // Collectives and synchronize calls still running (a host blocked in them).
  virtual std::vector<InflightCall> read_inflight_waits() const = 0;
  virtual void delete_seqs(uint32_t tgid) = 0;
  // Device memory per process (bpf/cuda_mem.bpf.c's gpu_mem): held, peak, the GPU's total.
  virtual std::map<uint32_t, argus_gpu_mem> read_gpu_memory() const { return {}; }  // the collective numbering of an ended process
};

// The records BPF sends: the ring buffer, and the Python sampler's.
class BpfEventStreams {
 public:
  virtual ~BpfEventStreams() = default;
  // Ring buffer: the handler gets each raw record; poll waits up to timeout_ms.
  using EventHandler = std::function<void(const void* data, size_t size)>;
  virtual void set_event_handler(EventHandler handler) = 0;
  virtual int poll_events(int timeout_ms) = 0;
  // Ends a poll_events() wait now (from another thread): a stop needs no turn.
  virtual void interrupt_poll() {}
  // The Python stack sampler (bpf/py_sample.bpf.c): a CPU-clock perf event at
  // `hz` on every online CPU, for all processes (the program keeps py_procs'
  // tgids). Returns the CPUs sampled. Its records (struct argus_py_sample) come
  // through poll_events to the sample handler, on their own ring buffer.
  virtual Result<int> start_python_sampling(uint32_t /*hz*/) { return make_error("no Python sampler in this backend"); }
  virtual void set_py_sample_handler(EventHandler /*handler*/) {}
};

class BpfBackend : public BpfLifecycle, public BpfAttach, public BpfRankMaps, public BpfEventStreams {};

}  // namespace argus
