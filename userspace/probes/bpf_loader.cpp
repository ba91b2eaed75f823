#include "userspace/probes/bpf_loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "userspace/probes/bpf_loader_detail.h"
#include "userspace/probes/uprobe_multi.h"

namespace argus {

using bpf_detail::errno_text;

namespace {

// Every SEC("uprobe")/SEC("uretprobe") program is loaded for uprobe_multi links.
// Not the SEC("usdt") ones: libbpf 1.1 attaches USDT probes as perf events,
// which a program loaded for uprobe_multi refuses.
void prepare_uprobe_programs(argus_bpf* skel, bool multi) {
  if (!multi) return;
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, skel->obj) {
    const std::string_view sec = bpf_program__section_name(prog);
    if (sec == "uprobe" || sec == "uretprobe")
      bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(uprobe_multi::kAttachType));
  }
}

// Whether to load the uprobe programs for uprobe_multi links; an error when
// they are required and the kernel has none.
Result<bool> choose_uprobe_links(LoaderOptions::UprobeLinks mode) {
  if (mode == LoaderOptions::UprobeLinks::kPerf) return false;
  std::string why;
  if (uprobe_multi::supported(&why)) return true;
  if (mode == LoaderOptions::UprobeLinks::kMulti)
    return make_error("--uprobe-links multi: this kernel creates no uprobe_multi links (" + why + ")");
  spdlog::info("uprobes attach one perf event each: no uprobe_multi links on this kernel ({})", why);
  return false;
}

// A kernel tracepoint program in both flavours. The required ones (process
// exec and exit: discovery and final counts) fail the start; the others turn
// their layer off with one warning, and argus_agent_kernel_probe_up says so.
struct KernelProgram {
  const char* name;  // the probe's name in logs, metrics and LoaderOptions::kernel_probes_off
  bpf_program* btf;
  bpf_program* raw;
  bool required;
};

std::vector<KernelProgram> kernel_programs(argus_bpf* skel) {
  return {
      {"sched_process_exec", skel->progs.argus_exec_btf, skel->progs.argus_exec_raw, true},
      {"sched_process_exit", skel->progs.argus_exit_btf, skel->progs.argus_exit_raw, true},
      {"tcp_retransmit_skb", skel->progs.argus_tcp_retrans_btf, skel->progs.argus_tcp_retrans_raw, false},
      {"block_rq_issue", skel->progs.argus_block_issue_btf, skel->progs.argus_block_issue_raw, false},
      {"block_rq_complete", skel->progs.argus_block_complete_btf, skel->progs.argus_block_complete_raw, false},
      // Why a rank died: the fatal signal and its sender, the OOM killer's choice.
      {"signal_generate", skel->progs.argus_signal_btf, skel->progs.argus_signal_raw, false},
      {"mark_victim", skel->progs.argus_oom_victim_btf, skel->progs.argus_oom_victim_raw, false},
      {"sched_switch", skel->progs.argus_sched_switch_btf, skel->progs.argus_sched_switch_raw, false},
      {"sched_wakeup", skel->progs.argus_sched_wakeup_btf, skel->progs.argus_sched_wakeup_raw, false},
      {"sched_wakeup_new", skel->progs.argus_sched_wakeup_new_btf, skel->progs.argus_sched_wakeup_new_raw, false},
  };
}

// libbpf prints through this; route it to our log at debug level, warnings up.
int libbpf_print(enum libbpf_print_level level, const char* fmt, va_list args) {
  char buf[1024];
  int n = vsnprintf(buf, sizeof(buf), fmt, args);
  if (n > 0 && buf[std::min<int>(n, sizeof(buf) - 1) - 1] == '\n') buf[std::min<int>(n, sizeof(buf) - 1) - 1] = 0;
  if (level == LIBBPF_WARN)
    spdlog::debug("libbpf: {}", buf);  // the caller reports failures in one line itself
  else
    spdlog::trace("libbpf: {}", buf);
  return 0;
}

// libbpf's USDT tables default to 256 specs (~128 producer files node-wide);
// the IP table keeps libbpf's 4:1 ratio (used only without BPF cookies).
void size_usdt_tables(argus_bpf* skel, uint32_t slots) {
  bpf_map__set_max_entries(skel->maps.__bpf_usdt_specs, slots);
  bpf_map__set_max_entries(skel->maps.__bpf_usdt_ip_to_spec_id, 4 * slots);
}

// Everything set between open and load: map sizes, the programs' attach types
// and their rodata thresholds.
void configure_before_load(argus_bpf* skel, const LoaderOptions& opts, bool multi) {
  // The ring buffer must be a power-of-two multiple of the page size.
  uint32_t rb = 4096;
  const uint64_t wanted = uint64_t{opts.ringbuf_kib} * 1024;
  while (rb < wanted && rb < (1u << 30)) rb <<= 1;
  bpf_map__set_max_entries(skel->maps.events, rb);
  size_usdt_tables(skel, opts.usdt_spec_slots);
  prepare_uprobe_programs(skel, multi);
  skel->rodata->argus_span_min_ns = opts.span_min_us * 1000;
  skel->rodata->argus_ring_wake_divisor = std::max<uint32_t>(1, opts.ring_wake_divisor);
}

}  // namespace

void Link::reset() {
  if (link_ != nullptr) bpf_link__destroy(link_);
  if (fd_ >= 0) close(fd_);  // the kernel detaches the link's probes on the last close
  link_ = nullptr;
  fd_ = -1;
}

Link& Link::operator=(Link&& other) noexcept {
  if (this != &other) {
    reset();
    link_ = other.link_;
    fd_ = other.fd_;
    other.link_ = nullptr;
    other.fd_ = -1;
  }
  return *this;
}

Link::~Link() { reset(); }


Result<std::unique_ptr<BpfLoader>> BpfLoader::create(const LoaderOptions& opts) {
  libbpf_set_print(libbpf_print);
  std::unique_ptr<BpfLoader> self(new BpfLoader());
  self->ncpus_ = libbpf_num_possible_cpus();
  if (self->ncpus_ <= 0) return make_error("cannot count possible CPUs: " + errno_text(self->ncpus_));

  auto multi = choose_uprobe_links(opts.uprobe_links);
  if (!multi.ok()) return make_error(multi.error());
  self->multi_ = *multi;

  LIBBPF_OPTS(bpf_object_open_opts, open_opts);
  open_opts.btf_custom_path = opts.btf_path.c_str();
  self->skel_ = argus_bpf__open_opts(&open_opts);
  if (self->skel_ == nullptr) return make_error("cannot open the BPF object: " + errno_text(errno));

  configure_before_load(self->skel_, opts, self->multi_);
  self->usdt_spec_slots_ = bpf_map__max_entries(self->skel_->maps.__bpf_usdt_specs);
  // Kernel tracepoints: tp_btf needs no tracefs; raw_tp is the fallback.
  auto* s = self->skel_;
  for (const auto& kp : kernel_programs(s)) bpf_program__set_autoload(kp.raw, false);
  self->tp_flavour_ = "tp_btf";
  int err = opts.force_raw_tp ? -EINVAL : argus_bpf__load(s);
  if (err != 0) {
    if (!opts.force_raw_tp) spdlog::warn("tp_btf programs did not load ({}); retrying with raw_tp", errno_text(err));
    argus_bpf__destroy(s);
    self->skel_ = s = argus_bpf__open_opts(&open_opts);
    if (s == nullptr) return make_error("cannot reopen the BPF object: " + errno_text(errno));
    configure_before_load(s, opts, self->multi_);
    for (const auto& kp : kernel_programs(s)) bpf_program__set_autoload(kp.btf, false);
    self->tp_flavour_ = "raw_tp";
    err = argus_bpf__load(s);
    if (err != 0) return make_error("cannot load the BPF programs into the kernel: " + errno_text(err));
  }
  if (auto attached = self->attach_kernel_programs(opts); !attached.ok()) return make_error(attached.error());

  self->ringbuf_ = ring_buffer__new(bpf_map__fd(s->maps.events), &BpfLoader::on_ringbuf_record, self.get(), nullptr);
  if (self->ringbuf_ == nullptr) return make_error("cannot map the ring buffer: " + errno_text(errno));
  // The Python samples' own ring buffer, drained by the same poll.
  if (int rc = ring_buffer__add(self->ringbuf_, bpf_map__fd(s->maps.py_samples), &BpfLoader::on_py_sample,
                                self.get());
      rc != 0)
    return make_error("cannot map the Python sample ring buffer: " + errno_text(rc));
  self->open_wakeable_poll();
  return self;
}

Result<bool> BpfLoader::attach_kernel_programs(const LoaderOptions& opts) {
  const bool btf = tp_flavour_ == "tp_btf";
  for (const auto& kp : kernel_programs(skel_)) {
    if (!kp.required && opts.kernel_probes_off.count(kp.name)) {
      kernel_probes_[kp.name] = "off";
      continue;
    }
    bpf_program* prog = btf ? kp.btf : kp.raw;
    bpf_link* link = bpf_program__attach(prog);
    if (link == nullptr) {
      const std::string why = std::string("cannot attach ") + bpf_program__name(prog) + ": " + errno_text(errno);
      if (kp.required) return make_error(why);
      kernel_probes_[kp.name] = "failed";
      kernel_probe_errors_.push_back(why);
      continue;
    }
    proc_links_.emplace_back(link);
    kernel_probes_[kp.name] = tp_flavour_;
  }
  return true;
}

BpfLoader::~BpfLoader() {
  if (ringbuf_ != nullptr) ring_buffer__free(ringbuf_);
  proc_links_.clear();
  py_sample_links_.clear();
  if (skel_ != nullptr) argus_bpf__destroy(skel_);
}

}  // namespace argus
