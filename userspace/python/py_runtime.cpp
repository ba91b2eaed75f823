// Interpreter files: version, layout and anchors. Offsets for 3.10-3.12 were
// checked with gdb against the DWARF of pyenv's 3.10.13, 3.11.7 and 3.12.1 and
// against Debian's 3.11.2; 3.13 reads them from the file's own _Py_DebugOffsets.
#include "userspace/python/py_runtime.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

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

}  // namespace argus::python
