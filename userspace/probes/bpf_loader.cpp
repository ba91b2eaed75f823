#include "userspace/probes/bpf_loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <linux/perf_event.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include "bpf/argus_py_sample.h"
#include "userspace/probes/map_dump.h"
#include "userspace/probes/uprobe_multi.h"

#include "argus.skel.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

bpf_program* program_for(argus_bpf* skel, ProbeProgram p) {
  switch (p) {
    case ProbeProgram::NcclCollEnter: return skel->progs.argus_nccl_coll_enter;
    case ProbeProgram::NcclInitEnter: return skel->progs.argus_nccl_init_enter;
    case ProbeProgram::NcclInitExit: return skel->progs.argus_nccl_init_exit;
    case ProbeProgram::CudaSyncEnter: return skel->progs.argus_cuda_sync_enter;
    case ProbeProgram::CudaCount: return skel->progs.argus_cuda_count;
    case ProbeProgram::CudaRet: return skel->progs.argus_cuda_ret;
    case ProbeProgram::CudaMemcpy: return skel->progs.argus_cuda_memcpy;
    case ProbeProgram::CudaLaunchExit: return skel->progs.argus_cuda_launch_exit;
    case ProbeProgram::TimedExit: return skel->progs.argus_timed_exit;
    case ProbeProgram::PyGcEnter: return skel->progs.argus_py_gc_enter;
    case ProbeProgram::PyGcExit: return skel->progs.argus_py_gc_exit;
    case ProbeProgram::PyGcUsdtStart: return skel->progs.argus_py_gc_usdt_start;
    case ProbeProgram::PyGcUsdtDone: return skel->progs.argus_py_gc_usdt_done;
    case ProbeProgram::LinkMapChange: return skel->progs.argus_dl_debug_state;
  }
  return nullptr;
}

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

  // The ring buffer must be a power-of-two multiple of the page size.
  uint32_t rb = 4096;
  while (rb < opts.ringbuf_bytes && rb < (1u << 30)) rb <<= 1;
  bpf_map__set_max_entries(self->skel_->maps.events, rb);

  size_usdt_tables(self->skel_, opts.usdt_spec_slots);
  prepare_uprobe_programs(self->skel_, self->multi_);
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
    bpf_map__set_max_entries(s->maps.events, rb);
    size_usdt_tables(s, opts.usdt_spec_slots);
    prepare_uprobe_programs(s, self->multi_);
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

// The loop's wait covers the ring buffers and an eventfd, so that stop() ends
// a long idle wait at once. Without it (no eventfd or epoll: never seen) the
// poll falls back to the ring buffers alone, and a stop waits out the turn.
void BpfLoader::open_wakeable_poll() {
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!wake.valid() || !ep.valid()) {
    spdlog::debug("no wakeable poll ({}): a stop waits for the loop's turn", errno_text(errno));
    return;
  }
  epoll_event rings{};
  rings.events = EPOLLIN;
  rings.data.fd = ring_buffer__epoll_fd(ringbuf_);
  epoll_event woken{};
  woken.events = EPOLLIN;
  woken.data.fd = wake.get();
  if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, rings.data.fd, &rings) != 0 ||
      epoll_ctl(ep.get(), EPOLL_CTL_ADD, wake.get(), &woken) != 0) {
    spdlog::debug("no wakeable poll ({}): a stop waits for the loop's turn", errno_text(errno));
    return;
  }
  wake_fd_ = std::move(wake);
  poll_fd_ = std::move(ep);
}

void BpfLoader::interrupt_poll() {
  if (!wake_fd_.valid()) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(wake_fd_.get(), &one, sizeof(one));  // full (2^64-2 wakes pending): already woken
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

namespace {

std::string probe_name(const ProbeSpec& spec, const std::string& path) {
  return std::string(spec.retprobe ? "uretprobe" : "uprobe") + " on " + spec.symbol + " in " + path;
}

}  // namespace

Result<Link> BpfLoader::attach_uprobe(const std::string& path, const ProbeSpec& spec) {
  if (multi_) return attach_multi(path, {&spec});
  bpf_program* prog = program_for(skel_, spec.program);
  if (prog == nullptr) return make_error("no BPF program for " + spec.symbol);
  LIBBPF_OPTS(bpf_uprobe_opts, uopts);
  uopts.retprobe = spec.retprobe;
  uopts.bpf_cookie = spec.cookie;
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), spec.file_offset, &uopts);
  if (link == nullptr) return make_error(probe_name(spec, path) + ": " + errno_text(errno));
  return Link(link);
}

// One uprobe_multi link for specs of one program and direction.
Result<Link> BpfLoader::attach_multi(const std::string& path, const std::vector<const ProbeSpec*>& specs) {
  const ProbeSpec& first = *specs.front();
  bpf_program* prog = program_for(skel_, first.program);
  if (prog == nullptr) return make_error("no BPF program for " + first.symbol);
  std::vector<uint64_t> offsets, cookies;
  for (const ProbeSpec* s : specs) {
    offsets.push_back(s->file_offset);
    cookies.push_back(s->cookie);
  }
  auto fd = uprobe_multi::attach(bpf_program__fd(prog), path, offsets, cookies, first.retprobe);
  if (!fd.ok()) {
    const std::string what = specs.size() == 1 ? probe_name(first, path)
                                               : std::to_string(specs.size()) + " probes in " + path;
    return make_error(what + ": " + fd.error());
  }
  return Link::from_fd(*fd);
}

// Probes of one program and direction share a link. A link the kernel refuses
// (one bad offset fails all of its probes) is retried probe by probe, so that
// only the bad ones are lost and each is named.
AttachedUprobes BpfLoader::attach_uprobes(const std::string& path, const std::vector<ProbeSpec>& specs) {
  if (!multi_) return BpfBackend::attach_uprobes(path, specs);
  std::map<std::pair<ProbeProgram, bool>, std::vector<const ProbeSpec*>> groups;
  for (const auto& spec : specs) groups[{spec.program, spec.retprobe}].push_back(&spec);
  AttachedUprobes out;
  for (const auto& [key, group] : groups) {
    auto link = attach_multi(path, group);
    if (link.ok() || group.size() == 1) {
      out.add(std::move(link), group.size());
      continue;
    }
    for (const ProbeSpec* spec : group) out.add(attach_multi(path, {spec}));
  }
  return out;
}

Result<Link> BpfLoader::attach_gpu_usdt(const std::string& path, bool names) {
  bpf_program* prog = names ? skel_->progs.argus_gpu_name : skel_->progs.argus_gpu_batch;
  const char* probe = names ? ARGUS_GPU_USDT_NAME : ARGUS_GPU_USDT_BATCH;
  bpf_link* link = bpf_program__attach_usdt(prog, -1, path.c_str(), ARGUS_GPU_USDT_PROVIDER, probe, nullptr);
  if (link == nullptr)
    return make_error(std::string("usdt ") + ARGUS_GPU_USDT_PROVIDER + ":" + probe + " in " + path + ": " +
                      errno_text(errno));
  return Link(link);
}

Result<Link> BpfLoader::attach_usdt(const std::string& path, const char* provider, const char* name,
                                    ProbeProgram program) {
  bpf_program* prog = program_for(skel_, program);
  if (prog == nullptr) return make_error(std::string("no BPF program for usdt ") + provider + ":" + name);
  bpf_link* link = bpf_program__attach_usdt(prog, -1, path.c_str(), provider, name, nullptr);
  if (link == nullptr)
    return make_error(std::string("usdt ") + provider + ":" + name + " in " + path + ": " + errno_text(errno));
  return Link(link);
}

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

void BpfLoader::delete_stats(uint32_t tgid) {
  for (const auto& e : read_stats(tgid)) bpf_map__delete_elem(skel_->maps.stats, &e.key, sizeof(e.key), 0);
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
    if (value.kind != ARGUS_STAT_NCCL_WAIT && value.kind != ARGUS_STAT_CUDA_SYNC) continue;
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

int BpfLoader::on_ringbuf_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfLoader*>(ctx);
  if (self->handler_) self->handler_(data, size);
  return 0;
}

int BpfLoader::on_py_sample(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfLoader*>(ctx);
  if (self->py_sample_handler_) self->py_sample_handler_(data, size);
  return 0;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  auto number = [](std::string_view t, int& out) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return !t.empty() && ec == std::errc() && p == t.data() + t.size() && out >= 0 && out < (1 << 16);
  };
  while (std::getline(in, part, ',')) {
    while (!part.empty() && (part.back() == '\n' || part.back() == ' ')) part.pop_back();
    if (part.empty()) continue;
    const auto dash = part.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!number(part, lo)) return {};
      hi = lo;
    } else if (!number(std::string_view(part).substr(0, dash), lo) ||
               !number(std::string_view(part).substr(dash + 1), hi) || hi < lo) {
      return {};
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  return cpus;
}

Result<int> BpfLoader::start_python_sampling(uint32_t hz) {
  py_sample_links_.clear();
  if (hz == 0) return 0;
  std::ifstream f("/sys/devices/system/cpu/online");
  std::string text;
  std::getline(f, text);
  std::vector<int> cpus = parse_cpu_list(text);
  if (cpus.empty()) return make_error("cannot read the online CPUs from /sys/devices/system/cpu/online");
  for (int cpu : cpus) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = hz;
    const int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno == ENODEV) continue;  // went offline meanwhile
      const std::string why = errno_text(errno);
      py_sample_links_.clear();
      return make_error("perf_event_open (CPU clock, " + std::to_string(hz) + " Hz) on CPU " + std::to_string(cpu) +
                        ": " + why);
    }
    // The link owns the perf event's fd from here (libbpf closes it on destroy).
    bpf_link* link = bpf_program__attach_perf_event(skel_->progs.argus_py_sample, fd);
    if (link == nullptr) {
      const std::string why = errno_text(errno);
      close(fd);
      py_sample_links_.clear();
      return make_error("cannot attach the Python sampler on CPU " + std::to_string(cpu) + ": " + why);
    }
    py_sample_links_.emplace_back(link);
  }
  return static_cast<int>(py_sample_links_.size());
}

int BpfLoader::poll_events(int timeout_ms) {
  int woken = 0;
  if (poll_fd_.valid()) {
    epoll_event ready[2];
    if (epoll_wait(poll_fd_.get(), ready, 2, timeout_ms) < 0) return -errno;
    uint64_t wakes = 0;
    while (read(wake_fd_.get(), &wakes, sizeof(wakes)) > 0) {
    }
  } else {
    woken = ring_buffer__poll(ringbuf_, timeout_ms);
    if (woken < 0) return woken;
  }
  // Hot events come without a wakeup (argus_submit_hot in bpf/helpers.bpf.h):
  // the poll may time out with records waiting. Drain them every time.
  const int waiting = ring_buffer__consume(ringbuf_);
  return waiting < 0 ? waiting : woken + waiting;
}

}  // namespace argus
