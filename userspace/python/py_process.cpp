// Live processes: their memory read from outside, where each has its
// interpreter (PythonLocator, with its cache of inspected files), and the
// runtime state read there: the BPF programs' view, the main interpreter, its
// GC counters.
#include "userspace/python/py_runtime.h"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <set>

#include "userspace/common/unique_fd.h"
#include "userspace/procfs/mapped_file.h"

namespace argus::python {

// ---- Remote memory ----------------------------------------------------------

namespace {

class ProcessMemory : public RemoteMemory {
 public:
  // process_vm_readv takes a pid of the agent's own namespace: with a node's
  // /proc from another namespace (a pod without hostPID), /proc/PID/mem is the
  // only way to reach the very process that proc_root names.
  ProcessMemory(int pid, std::string proc_root)
      : pid_(pid), proc_root_(std::move(proc_root)), use_vm_(procfs::proc_root_shares_pid_namespace(proc_root_)) {}

  bool read(uint64_t addr, void* out, size_t len) override {
    if (len == 0) return true;
    if (addr == 0 || addr + len < addr) return false;
    if (use_vm_) {
      iovec local{out, len}, remote{reinterpret_cast<void*>(addr), len};
      ssize_t n = ::process_vm_readv(pid_, &local, 1, &remote, 1, 0);
      if (n == static_cast<ssize_t>(len)) return true;
      if (n >= 0 || errno == EFAULT || errno == ESRCH) return false;
      use_vm_ = false;  // EPERM/ENOSYS (seccomp, old kernel): /proc/PID/mem instead
    }
    if (!mem_.valid()) {
      mem_.reset(::open(procfs::pid_path(proc_root_, pid_, "mem").c_str(), O_RDONLY | O_CLOEXEC));
      if (!mem_.valid()) return false;
    }
    size_t got = 0;
    while (got < len) {
      ssize_t n = ::pread(mem_.get(), static_cast<char*>(out) + got, len - got, static_cast<off_t>(addr + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  int pid_;
  std::string proc_root_;
  bool use_vm_;
  UniqueFd mem_;
};

}  // namespace

std::unique_ptr<RemoteMemory> process_memory(int pid, const std::string& proc_root) {
  return std::make_unique<ProcessMemory>(pid, proc_root);
}

// ---- Locating ----------------------------------------------------------------

Result<PyProcess> locate_in_process(int pid, std::shared_ptr<const PyInterpreterFile> file,
                                    const std::vector<procfs::MapEntry>& mappings_of_file) {
  if (!file) return make_error("no interpreter file");
  if (mappings_of_file.empty()) return make_error("interpreter not mapped by pid " + std::to_string(pid));
  constexpr uint64_t kPage = 4096;
  std::optional<uint64_t> bias;
  for (const auto& m : mappings_of_file) {
    for (const auto& l : file->loads) {
      if ((l.offset & ~(kPage - 1)) == m.offset && l.vaddr % kPage == l.offset % kPage) {
        uint64_t b = m.start - (l.vaddr & ~(kPage - 1));
        if (!bias) bias = b;
        if (*bias != b) return make_error("inconsistent load bias for pid " + std::to_string(pid));
      }
    }
  }
  if (!bias) return make_error("no mapping of pid " + std::to_string(pid) + " matches a PT_LOAD segment");
  PyProcess p;
  p.pid = pid;
  p.file = file;
  p.mapped_path = mappings_of_file.front().path;
  p.load_bias = *bias;
  p.runtime_addr = file->runtime_vaddr + *bias;
  p.code_type_addr = file->code_type_vaddr + *bias;
  bool runtime_mapped = false;
  for (const auto& m : mappings_of_file) {
    if (p.runtime_addr >= m.start && p.runtime_addr < m.end) runtime_mapped = true;
  }
  if (!runtime_mapped) return make_error("_PyRuntime is not inside a mapping of the interpreter");
  return p;
}

struct PythonLocator::Impl {
  std::string proc_root;
  size_t max_files;
  mutable std::mutex mu;
  struct Entry {
    std::shared_ptr<const PyInterpreterFile> file;  // null: not python, or refused
    std::string refusal;
  };
  std::map<std::pair<uint64_t, uint64_t>, Entry> cache;
  std::map<std::string, uint64_t> refusals;

  Entry examine(int pid, const procfs::MapEntry& m) {
    auto mf = procfs::open_mapped_file(proc_root, pid, m);
    if (!mf) return {};
    elf::ReadOptions dyn;
    dyn.include_symtab = false;
    auto syms = elf::read_symbols_fd(mf->fd.get(), m.path, dyn);
    if (!syms || !looks_like_python(*syms)) return {};
    auto file = inspect_interpreter(mf->fd.get(), m.path);
    if (!file) return {nullptr, file.error()};
    return {std::make_shared<const PyInterpreterFile>(std::move(*file)), ""};
  }
};

PythonLocator::PythonLocator(std::string proc_root, size_t max_files) : impl_(std::make_unique<Impl>()) {
  impl_->proc_root = std::move(proc_root);
  impl_->max_files = std::max<size_t>(max_files, 1);
}
PythonLocator::~PythonLocator() = default;

Result<PyProcess, LocateFailure> PythonLocator::locate(int pid) {
  auto maps = procfs::read_maps(impl_->proc_root, pid);
  if (!maps) return make_error(LocateError::kUnreadable, maps.error());
  // One candidate per file; the likely ones first (the executable, then any
  // name with "python"), though every file is recognised by its symbols only.
  std::vector<const procfs::MapEntry*> files;
  std::set<std::pair<uint64_t, uint64_t>> seen;
  for (const auto& m : maps->entries) {
    if (!m.file_backed() || m.inode == 0) continue;
    auto key = std::make_pair((uint64_t{m.dev_major} << 32) | m.dev_minor, m.inode);
    if (seen.insert(key).second) files.push_back(&m);
  }
  std::stable_partition(files.begin() + (files.empty() ? 0 : 1), files.end(),
                        [](const procfs::MapEntry* m) { return m->path.find("python") != std::string::npos; });
  std::string refusal;
  for (const auto* m : files) {
    auto key = std::make_pair((uint64_t{m->dev_major} << 32) | m->dev_minor, m->inode);
    Impl::Entry entry;
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      auto it = impl_->cache.find(key);
      if (it != impl_->cache.end()) {
        entry = it->second;
      } else {
        entry = impl_->examine(pid, *m);
        if (impl_->cache.size() >= impl_->max_files) impl_->cache.clear();
        impl_->cache[key] = entry;
        if (!entry.refusal.empty()) ++impl_->refusals[entry.refusal];
      }
    }
    if (!entry.refusal.empty()) refusal = entry.refusal;
    if (!entry.file) continue;
    std::vector<procfs::MapEntry> of_file;
    for (const auto& e : maps->entries) {
      if (e.inode == m->inode && e.dev_major == m->dev_major && e.dev_minor == m->dev_minor) of_file.push_back(e);
    }
    auto located = locate_in_process(pid, entry.file, of_file);
    if (!located) return make_error(LocateError::kUnreadable, located.error());
    return std::move(*located);
  }
  if (!refusal.empty()) return make_error(LocateError::kUnsupportedPython, "unsupported python: " + refusal);
  return make_error(LocateError::kNotPython, "not python: pid " + std::to_string(pid) + " maps no Python interpreter");
}

std::map<std::string, uint64_t> PythonLocator::refusals() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->refusals;
}

// ---- Runtime state -----------------------------------------------------------

argus_py_proc bpf_config(const PyProcess& p, uint64_t gc_stats_addr) {
  argus_py_proc c{};
  const auto& l = p.file->layout;
  auto opt16 = [](const std::optional<uint32_t>& v) { return static_cast<__u16>(v ? *v : ARGUS_PY_NO_OFFSET); };
  c.runtime_addr = p.runtime_addr;
  c.gc_stats_addr = gc_stats_addr;
  c.code_type_addr = p.code_type_addr;
  c.version = l.version.hex();
  c.flags = p.file->gc_anchor == "usdt" ? ARGUS_PY_F_GC_BY_USDT : 0;
  c.runtime_interpreters_head = static_cast<__u16>(l.runtime_interpreters_head);
  c.interp_threads_head = static_cast<__u16>(l.interp_threads_head);
  c.tstate_next = static_cast<__u16>(l.tstate_next);
  c.tstate_thread_id = static_cast<__u16>(l.tstate_thread_id);
  c.tstate_frame = static_cast<__u16>(l.tstate_frame);
  c.cframe_current_frame = opt16(l.cframe_current_frame);
  c.frame_code = static_cast<__u16>(l.frame_code);
  c.frame_previous = static_cast<__u16>(l.frame_previous);
  c.frame_instr = static_cast<__u16>(l.frame_instr);
  c.frame_owner = opt16(l.frame_owner);
  c.code_firstlineno = static_cast<__u16>(l.code_firstlineno);
  c.code_name = static_cast<__u16>(l.code_name);
  c.code_bytecode = static_cast<__u16>(l.code_bytecode);
  c.owner_to_skip = l.owner_to_skip ? *l.owner_to_skip : 0xff;
  c.instr_is_lasti = l.instr_is_lasti ? 1 : 0;
  return c;
}

uint64_t main_interpreter(const PyProcess& p, RemoteMemory& mem) {
  const auto& l = p.file->layout;
  uint64_t interp = 0;
  if (!mem.read(p.runtime_addr + l.runtime_interpreters_head, &interp, 8) || interp == 0) return 0;
  // The main interpreter is the oldest: last in the list.
  for (int i = 0; i < 64; ++i) {
    uint64_t next = 0;
    if (!mem.read(interp + l.interp_next, &next, 8)) return 0;
    if (next == 0) return interp;
    interp = next;
  }
  return 0;
}

uint64_t gc_stats_address(const PyProcess& p, RemoteMemory& mem) {
  uint64_t interp = main_interpreter(p, mem);
  return interp ? interp + p.file->layout.interp_gc + p.file->layout.gc_generation_stats : 0;
}

std::optional<std::array<int64_t, 3>> read_gc_collections(const PyProcess& p, RemoteMemory& mem) {
  uint64_t at = gc_stats_address(p, mem);
  if (!at) return std::nullopt;
  int64_t raw[9];
  if (!mem.read(at, raw, sizeof raw)) return std::nullopt;
  std::array<int64_t, 3> out{raw[0], raw[3], raw[6]};
  for (auto v : out) {
    if (v < 0) return std::nullopt;
  }
  return out;
}

}  // namespace argus::python
