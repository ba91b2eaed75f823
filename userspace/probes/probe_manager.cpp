#include "userspace/probes/probe_manager.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "bpf/argus_gpu_wire.h"
#include "userspace/common/thread_name.h"

namespace argus {
namespace {

// The USDT spec slots libbpf gives one attach: one per distinct argument spec
// among the probe's sites (it shares a slot between sites with equal specs).
uint64_t usdt_slots_for(const std::vector<elf::UsdtNote>& notes, const char* name,
                        const char* provider = ARGUS_GPU_USDT_PROVIDER) {
  std::set<std::string> specs;
  for (const auto& n : notes)
    if (n.provider == provider && n.name == name) specs.insert(n.args);
  return specs.size();
}

}  // namespace

ProbeManager::ProbeManager(BpfAttach& loader, ProbeManagerOptions opts) : loader_(loader), opts_(std::move(opts)) {
  stats_.usdt_slots_limit = loader_.usdt_spec_slots();
  if (opts_.parse_in_background)
    worker_ = std::thread([this] {
      name_this_thread("argus-parse");
      worker_loop();
    });
}

ProbeManager::~ProbeManager() {
  // Every probe detached in parallel (the reaper drains on destruction), not
  // one grace period after another.
  for (auto& [key, lib] : files_) reaper_.reap(std::move(lib.links), std::move(lib.usdt_links));
  // Here, not in the reaper's destructor: the callbacks of earlier releases touch
  // counters_mu_ and stats_, which are destroyed before reaper_ is.
  reaper_.wait_idle();
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void ProbeManager::skip(SkipReason reason) {
  count_into(opts_.counters, reason);
}

// A loader whose hook did not attach sends no dlopen hints: discovery must keep
// rechecking its processes as if it were any other file.
LibraryKind ProbeManager::told_kind(const Library& lib) {
  return lib.kind == LibraryKind::Loader && lib.uprobes == 0 ? LibraryKind::None : lib.kind;
}

LibraryKind ProbeManager::consider(int pid, const procfs::MapEntry& mapping) {
  const FileKey key{mapping.dev_major, mapping.dev_minor, mapping.inode};
  if (auto it = files_.find(key); it != files_.end()) {
    it->second.users.insert(pid);
    it->second.unused_since = -1;
    return it->second.pending ? LibraryKind::None : told_kind(it->second);
  }
  if (refused_.count({key, pid})) return LibraryKind::None;  // this process's path was refused: said once
  if (pending_ >= opts_.max_pending_parses) {
    skip(SkipReason::kParseQueueFull);  // not remembered: a later recheck tries again
    return LibraryKind::None;
  }
  auto opened = procfs::open_mapped_file(opts_.proc_root, pid, mapping);
  if (!opened.ok()) {
    const SkipReason reason = opened.failure().kind;
    skip(reason);
    spdlog::debug("not probing: {}", opened.error());
    if (reason == SkipReason::kVanished) return LibraryKind::None;  // another mapper may come
    if (reason != SkipReason::kMappedOpenFailed)
      spdlog::warn("refused a mapped file: {}", opened.error());  // someone planted it
    // Refused for this process (its path), not for the file: the same inode
    // mapped by another process under a sound path is still probed (a bind
    // mount or a chroot elsewhere must not blind the agent to /usr/bin/python3).
    refused_.insert({key, pid});
    return LibraryKind::None;
  }
  Library& lib = files_[key];
  lib.name = mapping.path;
  lib.first_seen = std::chrono::steady_clock::now();
  lib.users.insert(pid);
  ++pending_;
  Parsed job{key, std::make_shared<procfs::MappedFile>(std::move(*opened)), mapping.path, {}, {}, {}};
  if (!opts_.parse_in_background) {
    parse(job, opts_.elf, opts_.python_gc);
    finish(job);
    return told_kind(lib);
  }
  {
    std::lock_guard lock(queue_mu_);
    todo_.push_back(std::move(job));
  }
  queue_cv_.notify_one();
  return LibraryKind::None;
}

// Worker thread (or inline): only reads the fd; nothing here touches BPF.
void ProbeManager::parse(Parsed& job, const elf::ReadOptions& ropts, bool python_gc) {
  job.symbols = elf::read_symbols_fd(job.file->fd.get(), job.name, ropts);
  if (!job.symbols->ok()) return;
  if ((*job.symbols)->find(kGpuProducerSymbol) != nullptr)
    job.notes = elf::read_usdt_notes_fd(job.file->fd.get(), job.name, ropts);
  if (python_gc && classify_library(**job.symbols) == LibraryKind::Python) {
    // The collector is a local symbol: this parse needs .symtab.
    elf::ReadOptions with_locals = ropts;
    with_locals.include_symtab = true;
    job.python = python::inspect_interpreter(job.file->fd.get(), job.name, with_locals);
    if (job.python->ok() && (*job.python)->gc_anchor == "usdt")
      job.notes = elf::read_usdt_notes_fd(job.file->fd.get(), job.name, ropts);  // for the slot accounting
  }
}

void ProbeManager::worker_loop() {
  std::unique_lock lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [this] { return stopping_ || !todo_.empty(); });
    if (stopping_) return;
    Parsed job = std::move(todo_.front());
    todo_.pop_front();
    ++in_progress_;
    lock.unlock();
    parse(job, opts_.elf, opts_.python_gc);
    lock.lock();
    --in_progress_;
    done_.push_back(std::move(job));
    queue_cv_.notify_all();
  }
}

void ProbeManager::wait_idle() {
  {
    std::unique_lock lock(queue_mu_);
    queue_cv_.wait(lock, [this] { return stopping_ || (todo_.empty() && in_progress_ == 0); });
  }
  reaper_.wait_idle();
}

std::vector<int> ProbeManager::complete_parses() {
  std::deque<Parsed> done;
  {
    std::lock_guard lock(queue_mu_);
    done.swap(done_);
  }
  std::vector<int> again;
  for (auto& d : done) {
    finish(d);
    auto it = files_.find(d.key);
    // Not the loader's users (every process): mapping it makes nobody a rank.
    if (it != files_.end() && it->second.kind != LibraryKind::None && it->second.kind != LibraryKind::Loader)
      again.insert(again.end(), it->second.users.begin(), it->second.users.end());
  }
  return again;
}

void ProbeManager::finish(Parsed& done) {
  auto it = files_.find(done.key);
  if (it == files_.end()) return;
  Library& lib = it->second;
  lib.pending = false;
  --pending_;
  const elf::ParseResult<elf::SymbolTable>& symbols = *done.symbols;
  if (!symbols.ok()) {
    const bool capped = symbols.failure().kind == elf::ParseFailure::kOverLimit;
    skip(capped ? SkipReason::kElfLimit : SkipReason::kUnreadableElf);
    if (capped)
      spdlog::warn("not probing {}: {}", done.name, symbols.error());
    else
      spdlog::debug("not probing {}: {}", done.name, symbols.error());
    return;
  }
  lib.kind = classify_library(*symbols);
  if (symbols->find(kGpuProducerSymbol) != nullptr) attach_gpu_producer(done, lib);
  if (lib.kind == LibraryKind::None) {
    if (!lib.usdt_links.empty()) lib.kind = LibraryKind::GpuActivity;
  } else if (lib.kind == LibraryKind::Python) {
    if (opts_.python_gc && done.python)  // probed once a rank maps it (attach_python_gc_for)
      lib.pending_gc.reset(new Library::PendingGc{done.file, std::move(*done.python), std::move(done.notes)});
  } else {
    attach_probes(*symbols, done.file->self_path(), lib);
  }
  if (lib.kind != LibraryKind::None) {
    std::lock_guard lock(counters_mu_);
    const std::string label = library_kind_name(lib.kind);
    stats_.files[label] += 1;
    stats_.probes[label] += lib.uprobes + lib.usdt_links.size();
  }
}

void ProbeManager::attach_probes(const elf::SymbolTable& symbols, const std::string& path, Library& lib) {
  const std::vector<ProbeSpec> plan = plan_probes(symbols, lib.kind, opts_.set);
  if (plan.empty() && lib.kind == LibraryKind::Torch) {
    // Its ranks keep everything else (NCCL, CUDA, Python): only the process
    // groups go unseen, said once per file.
    skip(SkipReason::kC10dUnsupported);
    spdlog::warn("PyTorch c10d in {} has none of the Gloo backend methods this agent probes (a build without "
                 "Gloo, or a version whose names differ): its process groups are not followed",
                 lib.name);
    return;
  }
  AttachedUprobes attached = loader_.attach_uprobes(path, plan);
  for (const auto& e : attached.errors) spdlog::warn("probe attach failed: {} ({})", e, lib.name);
  const size_t ok = attached.probes, failed = attached.errors.size();
  lib.links = std::move(attached.links);
  lib.uprobes = ok;
  const auto delay = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - lib.first_seen);
  {
    std::lock_guard lock(counters_mu_);  // the series exists (at 0) once a library of its kind was seen
    stats_.attach_errors[library_kind_name(lib.kind)] += failed;
    if (ok > 0) add_to_log2(stats_.attach_delay[library_kind_name(lib.kind)], static_cast<uint64_t>(delay.count()));
  }
  spdlog::info("attached {} probes ({} failed) to {} library {} ({} {} links)", ok, failed, library_kind_name(lib.kind),
               lib.name, lib.links.size(), loader_.uprobe_link_kind());
}

// Whether libbpf's USDT spec table has room for `slots` more (a full table
// fails every later attach); a refusal is counted against `what`.
bool ProbeManager::reserve_usdt_slots(uint64_t slots, const std::string& what, const std::string& name) {
  std::lock_guard lock(counters_mu_);
  if (stats_.usdt_slots_limit > 0 && stats_.usdt_slots_used + slots > stats_.usdt_slots_limit) {
    stats_.attach_errors[what] += 1;
    spdlog::warn("{} USDT probes not attached to {}: USDT spec table full ({} of {} slots)", what, name,
                 stats_.usdt_slots_used, stats_.usdt_slots_limit);
    skip(SkipReason::kUsdtSpecTableFull);
    return false;
  }
  return true;
}

// A Python interpreter's collector: entry + return, by its symbol or by the
// python:gc__start/gc__done USDT pair. A file with no usable anchor is said
// once and counted; its ranks' GC counts then come from polling alone.
void ProbeManager::attach_python_gc_for(int pid) {
  for (auto& [key, lib] : files_) {
    if (lib.kind != LibraryKind::Python || !lib.pending_gc || !lib.users.count(pid)) continue;
    attach_python_gc(lib);
    lib.pending_gc.reset();  // tried once per file: its fd is closed now
  }
}

void ProbeManager::attach_python_gc(Library& lib) {
  const Library::PendingGc& done = *lib.pending_gc;
  if (!done.py.ok()) {
    spdlog::warn("Python GC not probed in {}: {} (GC counts by polling only)", lib.name, done.py.error());
    skip(SkipReason::kPythonGcUnprobed);
    std::lock_guard lock(counters_mu_);
    stats_.python_gc_unprobed_files += 1;
    return;
  }
  const python::PyInterpreterFile& py = *done.py;
  const std::string path = done.file->self_path();
  size_t failed = 0;
  if (py.gc_anchor == "usdt") {
    uint64_t slots = 2;
    if (done.notes && done.notes->ok())
      slots = usdt_slots_for(**done.notes, "gc__start", "python") + usdt_slots_for(**done.notes, "gc__done", "python");
    if (!reserve_usdt_slots(slots, "python", lib.name)) return;
    std::unique_lock usdt_lock(usdt_mu_);
    auto start = loader_.attach_usdt(path, "python", "gc__start", ProbeProgram::PyGcUsdtStart);
    auto end = loader_.attach_usdt(path, "python", "gc__done", ProbeProgram::PyGcUsdtDone);
    if (!start.ok() || !end.ok()) {  // both or none, detached here under the USDT lock
      spdlog::warn("Python GC USDT probes not attached to {}: {}", lib.name, start.ok() ? end.error() : start.error());
      start = make_error("");
      end = make_error("");
      failed = 1;
    }
    usdt_lock.unlock();
    if (start.ok()) {
      lib.usdt_links.push_back(std::move(*start));
      lib.usdt_links.push_back(std::move(*end));
      lib.usdt_slots = slots;
      std::lock_guard lock(counters_mu_);
      stats_.usdt_slots_used += slots;
    }
  } else {
    AttachedUprobes attached =
        loader_.attach_uprobes(path, plan_python_gc(py.gc_anchor, py.gc_symbol, py.gc_entry_offset));
    for (const auto& e : attached.errors) spdlog::warn("probe attach failed: {} ({})", e, lib.name);
    failed = attached.errors.size();
    if (failed == 0) {  // an entry without its return (or the reverse) times nothing
      lib.links = std::move(attached.links);
      lib.uprobes = attached.probes;
    }
  }
  const bool probed = !lib.links.empty() || !lib.usdt_links.empty();
  std::lock_guard lock(counters_mu_);
  stats_.attach_errors["python"] += failed;
  stats_.probes["python"] += lib.uprobes + lib.usdt_links.size();
  if (probed) {
    lib.gc_anchor = py.gc_anchor;
    stats_.python_gc_files[py.gc_anchor] += 1;
    spdlog::info("attached Python {} GC probes ({} {}) to {}", py.layout.version.str(), py.gc_anchor, py.gc_symbol,
                 lib.name);
  } else if (failed == 0) {
    spdlog::warn("Python {} GC not probed in {}: no usable GC anchor (no gc_collect_main in .symtab, no "
                 "python:gc__start/gc__done USDT probes, no call in PyGC_Collect); GC counts by polling only",
                 py.layout.version.str(), lib.name);
    skip(SkipReason::kPythonGcUnprobed);
    stats_.python_gc_unprobed_files += 1;
  }
}

// The USDT hand-off of a GPU-activity producer: both probes or none, and only
// while libbpf's spec table has room (a full table fails every later attach).
void ProbeManager::attach_gpu_producer(const Parsed& done, Library& lib) {
  uint64_t slots = 2;  // one per probe, unless the notes say otherwise
  if (done.notes && done.notes->ok())
    slots = usdt_slots_for(**done.notes, ARGUS_GPU_USDT_BATCH) + usdt_slots_for(**done.notes, ARGUS_GPU_USDT_NAME);
  if (!reserve_usdt_slots(slots, "gpu", lib.name)) return;
  const std::string path = done.file->self_path();
  std::unique_lock usdt_lock(usdt_mu_);
  auto batch = loader_.attach_gpu_usdt(path, false);
  auto names = loader_.attach_gpu_usdt(path, true);
  if (!batch.ok() || !names.ok()) {  // detached here, under the USDT lock, not later
    batch = make_error(batch.ok() ? names.error() : batch.error());
    names = make_error("");
  }
  usdt_lock.unlock();
  std::lock_guard lock(counters_mu_);
  if (batch.ok() && names.ok()) {
    lib.usdt_links.push_back(std::move(*batch));
    lib.usdt_links.push_back(std::move(*names));
    lib.usdt_slots = slots;
    stats_.usdt_slots_used += slots;
    spdlog::info("attached GPU activity probes to {}", lib.name);
  } else {
    stats_.attach_errors["gpu"] += 1;
    spdlog::warn("GPU activity probes not attached: {}", batch.error());
  }
}

void ProbeManager::sweep(double now_s, const std::set<int>& alive_pids) {
  std::erase_if(refused_, [&](const auto& kp) { return !alive_pids.count(kp.second); });
  for (auto it = files_.begin(); it != files_.end();) {
    Library& lib = it->second;
    std::erase_if(lib.users, [&](int pid) { return !alive_pids.count(pid); });
    if (!lib.users.empty()) {
      lib.unused_since = -1;
    } else if (lib.unused_since < 0) {
      lib.unused_since = now_s;
    } else if (!lib.pending && now_s - lib.unused_since >= opts_.release_grace_seconds) {
      release(lib);
      it = files_.erase(it);
      continue;
    }
    ++it;
  }
  std::lock_guard lock(counters_mu_);
  stats_.files_known = files_.size();
}

void ProbeManager::release(Library& lib) {
  if (lib.kind == LibraryKind::None) return;
  const size_t probes = lib.uprobes + lib.usdt_links.size();
  spdlog::info("detaching {} probes from {} library {}: no process maps it any more", probes,
               library_kind_name(lib.kind), lib.name);
  {
    std::lock_guard lock(counters_mu_);
    const std::string label = library_kind_name(lib.kind);
    stats_.files[label] -= 1;
    stats_.probes[label] -= probes;
    stats_.files_released += 1;
    if (!lib.gc_anchor.empty()) stats_.python_gc_files[lib.gc_anchor] -= 1;
  }
  // libbpf takes the USDT slots back as the USDT links go: only then are they free.
  reaper_.reap(std::move(lib.links), std::move(lib.usdt_links), [this, slots = lib.usdt_slots] {
    std::lock_guard lock(counters_mu_);
    stats_.usdt_slots_used -= slots;
  });
}

ProbeStats ProbeManager::stats() const {
  std::lock_guard lock(counters_mu_);
  ProbeStats out = stats_;
  out.probes_detaching = reaper_.pending();
  return out;
}

}  // namespace argus
