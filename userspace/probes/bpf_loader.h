// The BPF object's lifecycle (open, size, load, attach) behind RAII: no naked
// fds or links escape. Maps and the ring buffer are reached only through here.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bpf/argus.h"
#include "userspace/attach/attach_plan.h"
#include "userspace/common/defaults.h"
#include "userspace/common/result.h"
#include "userspace/common/unique_fd.h"
#include "userspace/probes/bpf_backend.h"

struct argus_bpf;     // the bpftool skeleton
struct bpf_link;
struct ring_buffer;

namespace argus {

struct LoaderOptions {
  std::string btf_path = kDefaultBtfPath;
  uint32_t ringbuf_kib = kDefaultRingbufKiB;  // the event ring buffer (rounded up to a power of two)
  uint32_t usdt_spec_slots = kUsdtSpecSlots;
  // Optional kernel probes not to attach (their layer is off): names as in
  // kernel_probes(), e.g. "sched_switch".
  std::set<std::string> kernel_probes_off;
  // Load every tracepoint program as raw_tp, as on a kernel that refuses
  // tp_btf (--tp-flavour raw_tp: tests and old kernels).
  bool force_raw_tp = false;
  // How uprobes attach: kAuto takes uprobe_multi links where the kernel has
  // them (6.6+) and perf-event uprobes otherwise; kMulti requires them; kPerf
  // forces the per-probe fallback (--uprobe-links).
  enum class UprobeLinks { kAuto, kMulti, kPerf };
  UprobeLinks uprobe_links = UprobeLinks::kAuto;
  // Thresholds the programs read as rodata, set before load (bpf/argus.h):
  // a timed call's span is sent only when it failed or took this long, and a
  // hot record wakes the agent once the ring holds more than 1/divisor of it.
  uint64_t span_min_us = ARGUS_SPAN_MIN_NS / 1000;
  uint32_t ring_wake_divisor = ARGUS_RING_WAKE_DIVISOR;
};

// The real backend: the loaded skeleton in the kernel.
class BpfLoader : public BpfBackend {
 public:
  // Opens, sizes and loads the object, and attaches the process tracepoints
  // (tp_btf, else raw_tp). The error names what failed in one line.
  static Result<std::unique_ptr<BpfLoader>> create(const LoaderOptions& opts);
  ~BpfLoader() override;
  BpfLoader(const BpfLoader&) = delete;
  BpfLoader& operator=(const BpfLoader&) = delete;

  // BpfBackend, on the kernel's maps, ring buffer and uprobe PMU.
  Result<Link> attach_uprobe(const std::string& path, const ProbeSpec& spec) override;
  AttachedUprobes attach_uprobes(const std::string& path, const std::vector<ProbeSpec>& specs) override;
  std::string uprobe_link_kind() const override { return multi_ ? "multi" : "perf"; }
  Result<Link> attach_gpu_usdt(const std::string& path, bool names) override;
  Result<Link> attach_usdt(const std::string& path, const char* provider, const char* name,
                           ProbeProgram program) override;
  uint64_t usdt_spec_slots() const override { return usdt_spec_slots_; }
  bool set_tgid_state(uint32_t tgid, argus_tgid_state state) override;
  void forget_tgid(uint32_t tgid) override;
  bool set_python_proc(uint32_t tgid, const argus_py_proc& config) override;
  void forget_python_proc(uint32_t tgid) override;
  std::optional<argus_py_gc_snap> read_python_gc(uint32_t tgid) const override;
  Result<int> start_python_sampling(uint32_t hz) override;
  void set_py_sample_handler(std::function<void(const void* data, size_t size)> handler) override {
    py_sample_handler_ = std::move(handler);
  }
  std::vector<StatEntry> read_stats(uint32_t only_tgid = 0) const override;
  void delete_stats(uint32_t tgid) override;
  std::vector<TcpRetransEntry> read_tcp_retransmits() const override;
  std::optional<uint64_t> take_tcp_retransmit(const argus_tcp_key& key) override;
  std::map<uint32_t, uint64_t> read_errors() const override;
  std::vector<InflightCall> read_inflight_waits() const override;
  void delete_seqs(uint32_t tgid) override;
  std::map<uint32_t, argus_gpu_mem> read_gpu_memory() const override;
  void set_event_handler(EventHandler handler) override { handler_ = std::move(handler); }
  int poll_events(int timeout_ms) override;
  void interrupt_poll() override;

  std::vector<StealerEntry> read_stealers(uint32_t victim_tgid) const override;
  std::map<uint32_t, std::vector<StealerEntry>> read_stealers_of(const std::vector<uint32_t>& victims) const override;
  void delete_stealers(uint32_t victim_tgid) override;

  const std::string& tracepoint_flavour() const { return tp_flavour_; }  // "tp_btf" or "raw_tp"
  std::map<std::string, std::string> kernel_probes() const override { return kernel_probes_; }
  // Why optional kernel probes failed to attach (said once by the agent, after the listen line).
  std::vector<std::string> kernel_probe_errors() const override { return kernel_probe_errors_; }

 private:
  BpfLoader() = default;
  Result<bool> attach_kernel_programs(const LoaderOptions& opts);
  Result<Link> attach_multi(const std::string& path, const std::vector<const ProbeSpec*>& specs);
  void open_wakeable_poll();
  static int on_ringbuf_record(void* ctx, void* data, size_t size);
  static int on_py_sample(void* ctx, void* data, size_t size);

  argus_bpf* skel_ = nullptr;
  ring_buffer* ringbuf_ = nullptr;
  UniqueFd wake_fd_;  // interrupt_poll() ends poll_events() early
  UniqueFd poll_fd_;  // epoll over the ring buffers' own epoll and wake_fd_
  std::vector<Link> proc_links_;
  EventHandler handler_;
  std::function<void(const void*, size_t)> py_sample_handler_;
  std::vector<Link> py_sample_links_;  // one perf event per online CPU
  std::string tp_flavour_;
  std::map<std::string, std::string> kernel_probes_;  // probe -> "tp_btf", "raw_tp", "off" or "failed"
  std::vector<std::string> kernel_probe_errors_;
  int ncpus_ = 1;
  uint64_t usdt_spec_slots_ = 0;
  bool multi_ = false;  // uprobe programs loaded for uprobe_multi links
};


// The CPUs a cpulist names ("0-3,8,10-11", as /sys/devices/system/cpu/online
// has it); empty on malformed text.
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace argus
