// Interpreter files: version, layout and anchors; live processes: where the
// interpreter is and its GC counters. Offsets for 3.10-3.12 were checked with
// gdb against the DWARF of pyenv's 3.10.13, 3.11.7 and 3.12.1 and against
// Debian's 3.11.2; 3.13 reads them from the file's own _Py_DebugOffsets.
#include "userspace/python/py_runtime.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <unordered_map>

#include "userspace/common/unique_fd.h"
#include "userspace/procfs/mapped_file.h"
#include "userspace/python/py_elf.h"

namespace argus::python {

std::string PyVersion::str() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(micro);
}

namespace {

using detail::ElfLayout;

PyLayout layout_310() {
  PyLayout l;
  l.runtime_interpreters_head = 32;
  l.interp_next = 0;
  l.interp_threads_head = 8;
  l.interp_gc = 616;
  l.tstate_next = 8;
  l.tstate_thread_id = 176;
  l.tstate_frame = 24;  // PyFrameObject*
  l.frame_code = 32;
  l.frame_previous = 24;  // f_back
  l.frame_instr = 96;     // f_lasti
  l.instr_is_lasti = true;
  l.code_firstlineno = 40;
  l.code_filename = 104;
  l.code_name = 112;
  l.code_linetable = 120;
  l.code_bytecode = 0;
  l.unicode_ascii_data = 48;
  l.unicode_compact_data = 72;
  return l;
}

PyLayout layout_311() {
  PyLayout l;
  l.runtime_interpreters_head = 40;
  l.interp_next = 0;
  l.interp_threads_head = 16;
  l.interp_gc = 648;
  l.tstate_next = 8;
  l.tstate_thread_id = 152;
  l.tstate_native_thread_id = 160;
  l.tstate_frame = 56;  // cframe
  l.cframe_current_frame = 8;
  l.frame_code = 32;
  l.frame_previous = 48;
  l.frame_instr = 56;  // prev_instr
  l.frame_owner = 69;
  l.code_firstlineno = 72;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_bytecode = 184;
  l.unicode_ascii_data = 48;
  l.unicode_compact_data = 72;
  return l;
}

PyLayout layout_312() {
  PyLayout l;
  l.runtime_interpreters_head = 40;
  l.interp_next = 0;
  l.interp_threads_head = 72;
  l.interp_gc = 112;
  l.tstate_next = 8;
  l.tstate_thread_id = 136;
  l.tstate_native_thread_id = 144;
  l.tstate_frame = 56;  // cframe
  l.cframe_current_frame = 0;
  l.frame_code = 0;
  l.frame_previous = 8;
  l.frame_instr = 56;  // prev_instr
  l.frame_owner = 70;
  l.owner_to_skip = 3;
  l.code_firstlineno = 68;
  l.code_filename = 112;
  l.code_name = 120;
  l.code_qualname = 128;
  l.code_linetable = 136;
  l.code_bytecode = 192;
  l.unicode_ascii_data = 40;
  l.unicode_compact_data = 56;
  return l;
}

// _Py_DebugOffsets as 3.13.0 lays it out (checked with gdb's ptype /o); every
// field a uint64_t at these offsets from the start of _PyRuntime.
namespace dbg {
constexpr size_t kCookie = 0, kVersion = 8, kFreeThreaded = 16;
constexpr size_t kRuntimeInterpretersHead = 40;
constexpr size_t kInterpSize = 48, kInterpNext = 64, kInterpThreadsHead = 72, kInterpGc = 80;
constexpr size_t kTstateSize = 152, kTstateNext = 168, kTstateCurrentFrame = 184, kTstateThreadId = 192,
                 kTstateNativeThreadId = 200;
constexpr size_t kFrameSize = 224, kFramePrevious = 232, kFrameExecutable = 240, kFrameInstrPtr = 248,
                 kFrameOwner = 264;
constexpr size_t kCodeSize = 272, kCodeFilename = 280, kCodeName = 288, kCodeQualname = 296,
                 kCodeLinetable = 304, kCodeFirstlineno = 312, kCodeAdaptive = 344;
constexpr size_t kBytesSval = 528;
constexpr size_t kUnicodeAsciiSize = 560;
constexpr size_t kTotal = 584;
}  // namespace dbg

}  // namespace

namespace detail {
namespace {
uint64_t u64_at(const std::string& b, size_t off) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + off, 8);
  return v;
}

}  // namespace

// 3.13 from the debug offsets in the file's initialised _PyRuntime.
Result<PyLayout> layout_from_debug_offsets(const std::string& b, const PyVersion& want, bool* free_threaded) {
  if (b.size() < dbg::kTotal || std::memcmp(b.data() + dbg::kCookie, "xdebugpy", 8) != 0) {
    return make_error("no _Py_DebugOffsets cookie at the start of _PyRuntime");
  }
  uint64_t hex = u64_at(b, dbg::kVersion);
  int major = static_cast<int>(hex >> 24 & 0xff), minor = static_cast<int>(hex >> 16 & 0xff);
  if (major != want.major || minor != want.minor) {
    return make_error("_Py_DebugOffsets version " + std::to_string(major) + "." + std::to_string(minor) +
                      " disagrees with Py_Version " + want.str());
  }
  *free_threaded = u64_at(b, dbg::kFreeThreaded) != 0;
  if (*free_threaded) return make_error("free-threaded build (3.13t) is not supported");
  auto get = [&](size_t off, uint64_t limit, uint32_t* out) -> bool {
    uint64_t v = u64_at(b, off);
    if (v >= limit || v > 0xfffe) return false;
    *out = static_cast<uint32_t>(v);
    return true;
  };
  PyLayout l;
  l.version = want;
  uint64_t isz = u64_at(b, dbg::kInterpSize), tsz = u64_at(b, dbg::kTstateSize);
  uint64_t fsz = u64_at(b, dbg::kFrameSize), csz = u64_at(b, dbg::kCodeSize);
  // Interpreter offsets exceed the BPF config's u16 only if the struct grows
  // past 64 KiB; refuse rather than truncate.
  bool ok = get(dbg::kRuntimeInterpretersHead, UINT64_MAX, &l.runtime_interpreters_head) &&
            get(dbg::kInterpNext, isz, &l.interp_next) && get(dbg::kInterpThreadsHead, isz, &l.interp_threads_head) &&
            get(dbg::kInterpGc, isz, &l.interp_gc) && get(dbg::kTstateNext, tsz, &l.tstate_next) &&
            get(dbg::kTstateThreadId, tsz, &l.tstate_thread_id) && get(dbg::kTstateCurrentFrame, tsz, &l.tstate_frame) &&
            get(dbg::kFramePrevious, fsz, &l.frame_previous) && get(dbg::kFrameExecutable, fsz, &l.frame_code) &&
            get(dbg::kFrameInstrPtr, fsz, &l.frame_instr) && get(dbg::kCodeFilename, csz, &l.code_filename) &&
            get(dbg::kCodeName, csz, &l.code_name) && get(dbg::kCodeLinetable, csz, &l.code_linetable) &&
            get(dbg::kCodeFirstlineno, csz, &l.code_firstlineno) && get(dbg::kCodeAdaptive, csz, &l.code_bytecode);
  uint32_t native = 0, owner = 0, qual = 0, sval = 0, ascii = 0;
  ok = ok && get(dbg::kTstateNativeThreadId, tsz, &native) && get(dbg::kFrameOwner, fsz, &owner) &&
       get(dbg::kCodeQualname, csz, &qual) && get(dbg::kBytesSval, 4096, &sval) &&
       get(dbg::kUnicodeAsciiSize, 4096, &ascii);
  if (!ok) return make_error("implausible _Py_DebugOffsets (an offset beyond its struct)");
  l.tstate_native_thread_id = native;
  l.frame_owner = owner;
  l.owner_to_skip = 3;
  l.code_qualname = qual;
  l.bytes_data = sval;
  l.unicode_ascii_data = ascii;
  l.unicode_compact_data = ascii + 16;  // + utf8_length, utf8
  l.gc_generation_stats = 128;
  return l;
}

}  // namespace detail

namespace {

// "3.10.13" in the file's read-only data: 3.10 has no Py_Version, and the
// PY_VERSION string is what Py_GetVersion prints.
std::optional<int> micro_from_rodata(int fd, const ElfLayout& elf, int major, int minor) {
  const auto* ro = elf.section(".rodata");
  if (!ro || ro->size == 0 || ro->size > (64u << 20) || ro->offset > elf.file_size ||
      ro->size > elf.file_size - ro->offset) {
    return std::nullopt;
  }
  // Not necessarily NUL-led: the linker merges "3.10.13" into the tail of a
  // longer string such as the install prefix ".../versions/3.10.13".
  std::string needle = std::to_string(major) + "." + std::to_string(minor) + ".";
  constexpr size_t kChunk = 1 << 20;
  for (uint64_t pos = 0; pos < ro->size; pos += kChunk - 64) {
    size_t len = static_cast<size_t>(std::min<uint64_t>(kChunk, ro->size - pos));
    auto buf = detail::pread_exact(fd, ro->offset + pos, len);
    if (!buf) return std::nullopt;
    for (size_t at = buf->find(needle); at != std::string::npos; at = buf->find(needle, at + 1)) {
      size_t i = at + needle.size();
      int micro = 0, digits = 0;
      while (i < buf->size() && digits < 3 && (*buf)[i] >= '0' && (*buf)[i] <= '9') {
        micro = micro * 10 + ((*buf)[i] - '0');
        ++i, ++digits;
      }
      char before = at > 0 ? (*buf)[at - 1] : '\0';
      bool starts = !(before >= '0' && before <= '9') && before != '.';
      if (starts && digits > 0 && i < buf->size() && (*buf)[i] == '\0') return micro;
    }
    if (len < kChunk) break;
  }
  return std::nullopt;
}

Result<PyVersion> detect_version(int fd, const ElfLayout& elf, const elf::SymbolTable& syms) {
  if (const auto* v = syms.find_object("Py_Version"); v && v->dynamic) {
    auto off = elf.file_offset(v->value, 4);
    if (!off) return make_error("Py_Version lies outside the file's data");
    auto b = detail::pread_exact(fd, *off, 4);
    if (!b) return make_error("cannot read Py_Version");
    uint32_t hex = 0;
    std::memcpy(&hex, b->data(), 4);
    PyVersion pv{static_cast<int>(hex >> 24 & 0xff), static_cast<int>(hex >> 16 & 0xff),
                 static_cast<int>(hex >> 8 & 0xff)};
    if (pv.major != 3 || pv.minor < 11) return make_error("implausible Py_Version " + pv.str());
    return pv;
  }
  // No Py_Version: 3.10 or older. PyAIter_Check is new in 3.10.
  if (!syms.exports_any({"PyAIter_Check"})) return make_error("Python older than 3.10 (unsupported)");
  PyVersion pv{3, 10, 0};
  auto micro = micro_from_rodata(fd, elf, 3, 10);
  if (!micro) return make_error("no Py_Version and no \"3.10.N\" version string: unknown Python");
  pv.micro = *micro;
  return pv;
}

}  // namespace

bool detail::is_gc_collect_main(const std::string& name) {
  static const std::string kBase = "gc_collect_main";
  if (name == kBase) return true;
  if (name.rfind(kBase + ".", 0) != 0) return false;
  if (name.find("cold") != std::string::npos) return false;
  // Every suffix piece: a known clone kind or a number.
  static const std::set<std::string> kKinds = {"lto_priv", "constprop", "isra", "part", "llvm"};
  size_t i = kBase.size();
  bool saw_kind = false;
  while (i < name.size()) {
    if (name[i] != '.') return false;
    size_t j = name.find('.', i + 1);
    std::string piece = name.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
    if (piece.empty()) return false;
    bool numeric = std::all_of(piece.begin(), piece.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (kKinds.count(piece)) {
      saw_kind = true;
    } else if (!numeric) {
      return false;
    }
    i = j == std::string::npos ? name.size() : j;
  }
  return saw_kind;
}

namespace {

// First `call rel32` in PyGC_Collect to a function that is neither exported
// nor in the PLT: the static collector (or the static wrapper that calls it).
std::optional<uint64_t> first_local_call(int fd, const ElfLayout& elf, const elf::SymbolTable& syms,
                                         const elf::Symbol& fn) {
  if (fn.size == 0 || fn.size > 4096) return std::nullopt;
  auto off = elf.file_offset(fn.value, fn.size);
  if (!off) return std::nullopt;
  auto code = detail::pread_exact(fd, *off, fn.size);
  if (!code) return std::nullopt;
  std::set<uint64_t> exported;
  for (const auto& s : syms.symbols()) {
    if (s.dynamic && s.is_function) exported.insert(s.value);
  }
  auto in_plt = [&](uint64_t a) {
    for (const auto& s : elf.sections) {
      if (s.name.rfind(".plt", 0) == 0 && a >= s.addr && a < s.addr + s.size) return true;
    }
    return false;
  };
  for (size_t i = 0; i + 5 <= code->size(); ++i) {
    if (static_cast<uint8_t>((*code)[i]) != 0xe8) continue;
    int32_t rel = 0;
    std::memcpy(&rel, code->data() + i + 1, 4);
    uint64_t target = fn.value + i + 5 + static_cast<int64_t>(rel);
    bool in_text = false;
    for (const auto& l : elf.loads) {
      if (l.executable && target >= l.vaddr && target < l.vaddr + l.filesz) in_text = true;
    }
    if (!in_text || in_plt(target) || exported.count(target)) continue;
    if (target >= fn.value && target < fn.value + fn.size) continue;
    return target;
  }
  return std::nullopt;
}

void choose_gc_anchor(int fd, const std::string& name, const ElfLayout& elf, const elf::SymbolTable& syms,
                      const elf::ReadOptions& ropts, PyInterpreterFile* out) {
  const elf::Symbol* best = nullptr;
  for (const auto& s : syms.symbols()) {
    if (!s.is_function || !s.mapped || !detail::is_gc_collect_main(s.name)) continue;
    if (!best || (s.name == "gc_collect_main" && best->name != "gc_collect_main")) best = &s;
  }
  if (best) {
    out->gc_anchor = "gc_collect_main";
    out->gc_symbol = best->name;
    out->gc_entry_offset = best->file_offset;
    return;
  }
  if (auto notes = elf::read_usdt_notes_fd(fd, name, ropts)) {
    bool start = false, done = false;
    for (const auto& n : *notes) {
      if (n.provider != "python") continue;
      start |= n.name == "gc__start";
      done |= n.name == "gc__done";
    }
    if (start && done) {
      out->gc_anchor = "usdt";
      out->gc_symbol = "python:gc__start";
      return;
    }
  }
  if (const auto* fn = syms.find("PyGC_Collect"); fn && fn->dynamic) {
    if (auto target = first_local_call(fd, elf, syms, *fn)) {
      if (auto off = elf.file_offset(*target, 1)) {
        char hexbuf[32];
        std::snprintf(hexbuf, sizeof hexbuf, "0x%llx", static_cast<unsigned long long>(*target));
        out->gc_anchor = "pygc_collect_call";
        out->gc_symbol = std::string("PyGC_Collect->") + hexbuf;
        out->gc_entry_offset = *off;
        return;
      }
    }
  }
  out->gc_anchor = "none";
}

}  // namespace

bool looks_like_python(const elf::SymbolTable& dynamic_symbols) {
  const auto* rt = dynamic_symbols.find_object("_PyRuntime");
  return rt && rt->dynamic && rt->value != 0 && dynamic_symbols.exports_any({"PyCode_Type"});
}

Result<PyInterpreterFile> inspect_interpreter(int fd, const std::string& name, elf::ReadOptions ropts) {
  auto fail = [&](const std::string& why) { return make_error(name + ": " + why); };
  ropts.include_symtab = true;
  auto syms = elf::read_symbols_fd(fd, name, ropts);
  if (!syms) return make_error(syms.error());
  if (!looks_like_python(*syms)) return fail("not a Python interpreter (no exported _PyRuntime)");
  if (syms->machine() != 62 /* EM_X86_64 */) return fail("only x86-64 interpreters are supported");
  if (syms->exports_any({"_Py_NegativeRefcount", "_Py_RefTotal"})) {
    return fail("debug build (Py_DEBUG) is not supported: its object header shifts every offset");
  }
  auto elf = detail::read_elf_layout(fd, name);
  if (!elf) return make_error(elf.error());
  auto version = detect_version(fd, *elf, *syms);
  if (!version) return fail(version.error());

  PyInterpreterFile out;
  const auto* rt = syms->find_object("_PyRuntime");
  out.runtime_vaddr = rt->value;
  if (const auto* sec = elf->section(".PyRuntime"); sec && sec->addr != out.runtime_vaddr && rt->value == 0) {
    out.runtime_vaddr = sec->addr;
  }
  const auto* ct = syms->find_object("PyCode_Type");
  if (!ct) return fail("no PyCode_Type");
  out.code_type_vaddr = ct->value;

  const auto& v = *version;
  if (v.minor == 10) {
    out.layout = layout_310();
  } else if (v.minor == 11) {
    out.layout = layout_311();
  } else if (v.minor == 12) {
    out.layout = layout_312();
  } else if (v.minor == 13) {
    auto off = elf->file_offset(out.runtime_vaddr, dbg::kTotal);
    if (!off) return fail("_PyRuntime's debug offsets are not in the file");
    auto bytes = detail::pread_exact(fd, *off, dbg::kTotal);
    if (!bytes) return fail("cannot read _PyRuntime's debug offsets");
    auto l = detail::layout_from_debug_offsets(*bytes, v, &out.free_threaded);
    if (!l) return fail(l.error());
    out.layout = *l;
  } else {
    return fail("Python " + v.str() + " has no layout here (supported: 3.10-3.13)");
  }
  out.layout.version = v;
  choose_gc_anchor(fd, name, *elf, *syms, ropts, &out);
  for (const auto& l : elf->loads) out.loads.push_back({l.vaddr, l.offset, l.filesz});
  return out;
}

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
