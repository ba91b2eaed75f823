// Stacks read from outside: the thread list, each thread's frames, code objects,
// strings and line tables, all from another process's memory while it runs.
// Everything read is untrusted (the process moves under us): every loop is
// bounded, every pointer validated, a thread that moved is re-read or marked.
#include <dirent.h>

#include <algorithm>
#include <cstring>
#include <list>
#include <mutex>
#include <set>
#include <unordered_map>

#include "userspace/procfs/procfs.h"
#include "userspace/python/py_runtime.h"
#include "userspace/python/py_stacks_detail.h"

namespace argus::python {

namespace detail {

namespace {

// Bounded readers over a location table.
struct Cursor {
  const std::string& t;
  size_t i = 0;
  bool ok = true;
  uint8_t byte() {
    if (i >= t.size()) {
      ok = false;
      return 0;
    }
    return static_cast<uint8_t>(t[i++]);
  }
  uint64_t varint() {
    uint8_t b = byte();
    uint64_t v = b & 63;
    int shift = 0;
    while (ok && (b & 64) && shift < 60) {
      b = byte();
      shift += 6;
      v |= static_cast<uint64_t>(b & 63) << shift;
    }
    return v;
  }
  int64_t svarint() {
    uint64_t u = varint() & ((uint64_t{1} << 40) - 1);  // bounded: the caller sums them
    return (u & 1) ? -static_cast<int64_t>(u >> 1) : static_cast<int64_t>(u >> 1);
  }
};

}  // namespace

// 3.11+: CPython's Objects/locations.md. `index` in code units.
int line_from_location_table(const std::string& table, int firstlineno, int64_t index) {
  if (index < 0) return firstlineno;
  Cursor c{table};
  int64_t line = firstlineno, addr = 0;
  while (c.ok && c.i < table.size()) {
    uint8_t first = c.byte();
    if (!(first & 0x80)) return 0;  // not an entry start: corrupt or misread
    int code = (first >> 3) & 15, len = (first & 7) + 1;
    bool no_line = false;
    switch (code) {
      case 15:
        no_line = true;
        break;
      case 14:
        line += c.svarint();
        c.varint(), c.varint(), c.varint();  // end line, column, end column
        break;
      case 13:
        line += c.svarint();
        break;
      case 10:
      case 11:
      case 12:
        line += code - 10;
        c.byte(), c.byte();
        break;
      default:  // short form: same line, one column byte
        c.byte();
        break;
    }
    // Real deltas are small; a hostile table must not overflow the sum.
    if (!c.ok || line > INT32_MAX || line < -INT32_MAX) return 0;
    if (index < addr + len) return no_line || line <= 0 || line > INT32_MAX ? 0 : static_cast<int>(line);
    addr += len;
  }
  return 0;
}

// 3.10: PEP 626 (byte delta, line delta) pairs; `byte_offset` = f_lasti * 2.
int line_from_pep626_table(const std::string& table, int firstlineno, int64_t byte_offset) {
  if (byte_offset < 0) return firstlineno;
  int64_t line = firstlineno, addr = 0;
  for (size_t i = 0; i + 1 < table.size(); i += 2) {
    auto sdelta = static_cast<uint8_t>(table[i]);
    auto ldelta = static_cast<int8_t>(table[i + 1]);
    int64_t end = addr + sdelta;
    int64_t cur = -1;
    if (ldelta != -128) {
      line += ldelta;
      cur = line;
    }
    if (byte_offset >= addr && byte_offset < end) return cur <= 0 || cur > INT32_MAX ? 0 : static_cast<int>(cur);
    addr = end;
  }
  return 0;
}

std::optional<std::string> read_py_string(RemoteMemory& mem, const PyLayout& l, uint64_t addr, size_t max_len) {
  if (addr == 0) return std::nullopt;
  unsigned char hdr[40];
  if (!mem.read(addr, hdr, sizeof hdr)) return std::nullopt;
  int64_t length = 0;
  uint32_t state = 0;
  std::memcpy(&length, hdr + 16, 8);
  std::memcpy(&state, hdr + 32, 4);
  unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || length < 0 || (kind != 1 && kind != 2 && kind != 4)) return std::nullopt;
  if (ascii && kind != 1) return std::nullopt;
  size_t n = std::min<size_t>({static_cast<size_t>(length), max_len, size_t{1} << 16});
  std::string raw(n * kind, '\0');
  if (!mem.read(addr + (ascii ? l.unicode_ascii_data : l.unicode_compact_data), raw.data(), raw.size())) {
    return std::nullopt;
  }
  std::string out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t cp = 0;
    std::memcpy(&cp, raw.data() + i * kind, kind);  // little-endian
    if (ascii && cp > 0x7f) return std::nullopt;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | cp >> 6);
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd;  // lone surrogate: not valid UTF-8
      out += static_cast<char>(0xe0 | cp >> 12);
      out += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x110000) {
      out += static_cast<char>(0xf0 | cp >> 18);
      out += static_cast<char>(0x80 | (cp >> 12 & 0x3f));
      out += static_cast<char>(0x80 | (cp >> 6 & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      return std::nullopt;
    }
  }
  if (static_cast<size_t>(length) > n) out += "...";
  return out;
}

std::optional<std::string> read_py_bytes(RemoteMemory& mem, const PyLayout& l, uint64_t addr, size_t max_len) {
  if (addr == 0) return std::nullopt;
  int64_t size = 0;
  if (!mem.read(addr + 16, &size, 8) || size < 0 || static_cast<uint64_t>(size) > max_len) return std::nullopt;
  std::string out(static_cast<size_t>(size), '\0');
  if (!mem.read(addr + l.bytes_data, out.data(), out.size())) return std::nullopt;
  return out;
}

std::optional<CodeInfo> read_code(RemoteMemory& mem, const PyLayout& l, uint64_t code, uint64_t code_type_addr) {
  uint64_t type = 0;
  if (code == 0 || !mem.read(code + 8, &type, 8) || type != code_type_addr) return std::nullopt;
  CodeInfo c;
  c.addr = code;
  int32_t first = 0;
  uint64_t name = 0, filename = 0, qualname = 0, linetable = 0;
  if (!mem.read(code + l.code_firstlineno, &first, 4) || !mem.read(code + l.code_name, &name, 8) ||
      !mem.read(code + l.code_filename, &filename, 8) || !mem.read(code + l.code_linetable, &linetable, 8)) {
    return std::nullopt;
  }
  if (l.code_qualname && !mem.read(code + *l.code_qualname, &qualname, 8)) return std::nullopt;
  c.firstlineno = first;
  c.name_ptr = name;
  auto n = read_py_string(mem, l, name, 512);
  auto f = read_py_string(mem, l, filename, 4096);
  if (!n || !f) return std::nullopt;
  c.frame.function = *n;
  c.frame.file = *f;
  c.frame.qualname = *n;
  if (qualname) {
    if (auto q = read_py_string(mem, l, qualname, 1024)) c.frame.qualname = *q;
  }
  // A missing line table costs the line, not the frame.
  c.linetable = read_py_bytes(mem, l, linetable, 1 << 20).value_or("");
  c.tag = ARGUS_PY_CODE_TAG(static_cast<uint32_t>(first), name);
  if (!l.instr_is_lasti && !mem.read(code + 16, &c.code_units, 8)) return std::nullopt;
  return c;
}

bool instr_in_code(const PyLayout& l, const CodeInfo& c, uint64_t instr) {
  if (l.instr_is_lasti || c.code_units < 0) return true;
  uint64_t start = c.addr + l.code_bytecode;
  // One before the first instruction is how 3.11/3.12 start a frame.
  return instr + 2 >= start && instr < start + static_cast<uint64_t>(c.code_units) * 2;
}

int line_for(const PyLayout& l, const CodeInfo& c, uint64_t instr) {
  if (l.instr_is_lasti) {
    auto lasti = static_cast<int32_t>(static_cast<uint32_t>(instr));
    return line_from_pep626_table(c.linetable, c.firstlineno, int64_t{lasti} * 2);
  }
  if (!instr_in_code(l, c, instr)) return 0;
  uint64_t start = c.addr + l.code_bytecode;
  // 3.11/3.12: prev_instr is one before the first instruction at frame start.
  int64_t index = instr < start ? -1 : static_cast<int64_t>((instr - start) / 2);
  return line_from_location_table(c.linetable, c.firstlineno, index);
}

}  // namespace detail

namespace {

using detail::CodeInfo;

// Host tid of every thread, by the tid the process sees (the NSpid: line's last field).
std::map<int, int> task_tids(const std::string& proc_root, int pid) {
  std::map<int, int> out;
  std::string dir = procfs::pid_path(proc_root, pid, "task");
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    int host = std::atoi(e->d_name);
    if (host <= 0) continue;
    auto status = procfs::read_file(dir + "/" + e->d_name + "/status", 1 << 16);
    int ns = host;
    if (status) {
      auto at = status->find("\nNSpid:");
      if (at != std::string::npos) {
        auto end = status->find('\n', at + 1);
        std::string line = status->substr(at + 7, end == std::string::npos ? std::string::npos : end - at - 7);
        size_t last = line.find_last_of(" \t");
        int v = std::atoi(line.c_str() + (last == std::string::npos ? 0 : last + 1));
        if (v > 0) ns = v;
      }
    }
    out[ns] = host;
    if (out.size() > 65536) break;
  }
  ::closedir(d);
  return out;
}

uint64_t top_frame(RemoteMemory& mem, const PyLayout& l, uint64_t tstate) {
  uint64_t p = 0;
  if (!mem.read(tstate + l.tstate_frame, &p, 8)) return 0;
  if (l.cframe_current_frame) {
    if (p == 0) return 0;
    uint64_t f = 0;
    if (!mem.read(p + *l.cframe_current_frame, &f, 8)) return 0;
    return f;
  }
  return p;
}

// 3.10 has no native id: tstate->thread_id is glibc's struct pthread*, whose
// `tid` field sits at a fixed offset per glibc build. Found on the main thread
// (tid == the process's own pid in its namespace) and checked on every thread.
std::optional<uint32_t> pthread_tid_offset(RemoteMemory& mem, uint64_t main_pthread, int ns_pid) {
  if (main_pthread == 0 || ns_pid <= 0) return std::nullopt;
  uint64_t self = 0;  // tcbhead_t.self (x86-64): the pthread points at itself
  if (!mem.read(main_pthread + 16, &self, 8) || self != main_pthread) return std::nullopt;
  constexpr uint32_t kFrom = 0x100, kTo = 0x800;
  std::vector<int32_t> words((kTo - kFrom) / 4);
  if (!mem.read(main_pthread + kFrom, words.data(), words.size() * 4)) return std::nullopt;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == ns_pid) return kFrom + static_cast<uint32_t>(i * 4);
  }
  return std::nullopt;
}

struct Walk {
  std::vector<PyFrame> frames;
  bool truncated = false;
  bool consistent = true;  // every pointer and code object checked out
};

std::vector<std::pair<uint64_t, uint64_t>> read_thread_list(RemoteMemory& mem, const PyLayout& l, uint64_t interp,
                                                            size_t max_threads) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::set<uint64_t> seen;
  for (int n = 0; interp != 0 && n < 64; ++n) {
    uint64_t ts = 0;
    if (!mem.read(interp + l.interp_threads_head, &ts, 8)) break;
    while (ts != 0 && out.size() < max_threads && seen.insert(ts).second) {
      uint64_t pthread = 0, next = 0;
      if (!mem.read(ts + l.tstate_thread_id, &pthread, 8) || !mem.read(ts + l.tstate_next, &next, 8)) break;
      out.emplace_back(ts, pthread);
      ts = next;
    }
    if (!mem.read(interp + l.interp_next, &interp, 8)) break;
  }
  return out;
}

Walk walk_frames(RemoteMemory& mem, const PyProcess& p, uint64_t frame, size_t max_frames,
                 std::unordered_map<uint64_t, std::optional<CodeInfo>>& codes) {
  const auto& l = p.file->layout;
  Walk w;
  size_t steps = 0;
  while (frame != 0) {
    if (w.frames.size() >= max_frames || ++steps > max_frames * 2 + 16) {
      w.truncated = true;
      break;
    }
    uint64_t code = 0, prev = 0, instr = 0;
    if (!mem.read(frame + l.frame_code, &code, 8) || !mem.read(frame + l.frame_previous, &prev, 8)) {
      w.consistent = false;
      break;
    }
    bool skip = false;
    if (l.frame_owner) {
      uint8_t owner = 0;
      if (!mem.read(frame + *l.frame_owner, &owner, 1)) {
        w.consistent = false;
        break;
      }
      skip = l.owner_to_skip && owner == *l.owner_to_skip;
    }
    if (!skip) {
      if (l.instr_is_lasti) {
        int32_t lasti = 0;
        if (!mem.read(frame + l.frame_instr, &lasti, 4)) w.consistent = false;
        instr = static_cast<uint32_t>(lasti);
      } else if (!mem.read(frame + l.frame_instr, &instr, 8)) {
        w.consistent = false;
      }
      auto it = codes.find(code);
      if (it == codes.end()) it = codes.emplace(code, detail::read_code(mem, l, code, p.code_type_addr)).first;
      if (!w.consistent || !it->second || !detail::instr_in_code(l, *it->second, instr)) {
        w.consistent = false;  // not a code object, or not its instruction: the frame moved under us
        break;
      }
      PyFrame f = it->second->frame;
      f.line = detail::line_for(l, *it->second, instr);
      w.frames.push_back(std::move(f));
    }
    frame = prev;
  }
  return w;
}

}  // namespace

Result<PyStackDump> dump_stacks(const PyProcess& p, RemoteMemory& mem, const std::string& proc_root,
                                const DumpOptions& opts) {
  if (!p.file) return make_error("no interpreter");
  const auto& l = p.file->layout;
  PyStackDump dump;
  dump.version = l.version.str();
  uint64_t interp = 0;
  if (!mem.read(p.runtime_addr + l.runtime_interpreters_head, &interp, 8)) {
    return make_error("cannot read pid " + std::to_string(p.pid) + "'s memory (gone, or no permission)");
  }
  if (interp == 0) return make_error("the interpreter of pid " + std::to_string(p.pid) + " is not initialised");

  // A thread that ends while the list is read may cut it short (its `next`
  // freed under us): read until two reads agree.
  std::vector<std::pair<uint64_t, uint64_t>> tstates;  // (tstate, pthread)
  for (int attempt = 0; attempt <= std::max(0, opts.retries) + 1; ++attempt) {
    auto again = read_thread_list(mem, l, interp, opts.max_threads);
    bool stable = again == tstates;
    tstates = std::move(again);
    if (stable && attempt > 0) break;
  }
  auto tids = task_tids(proc_root, p.pid);
  std::optional<uint32_t> tid_off;
  if (!l.tstate_native_thread_id && !tstates.empty()) {
    // The main thread: pid in its own namespace, oldest thread state (last in the list).
    int ns_pid = 0;
    for (const auto& [ns, host] : tids) {
      if (host == p.pid) ns_pid = ns;
    }
    tid_off = pthread_tid_offset(mem, tstates.back().second, ns_pid);
  }

  std::unordered_map<uint64_t, std::optional<CodeInfo>> codes;
  for (const auto& [ts, pthread] : tstates) {
    PyThreadStack t;
    t.thread_id = pthread;
    if (l.tstate_native_thread_id) {
      uint64_t nt = 0;
      if (mem.read(ts + *l.tstate_native_thread_id, &nt, 8)) t.namespace_tid = static_cast<int>(nt & 0x7fffffff);
    } else if (tid_off) {
      int32_t v = 0;
      if (mem.read(pthread + *tid_off, &v, 4)) t.namespace_tid = v;
    }
    if (auto it = tids.find(t.namespace_tid); it != tids.end()) {
      t.native_tid = it->second;
    } else {
      t.namespace_tid = 0;  // not a live thread of this process: never report a guess
    }
    bool done = false;
    for (int attempt = 0; attempt <= std::max(0, opts.retries) && !done; ++attempt) {
      uint64_t top = top_frame(mem, l, ts);
      auto w = walk_frames(mem, p, top, opts.max_frames, codes);
      bool moved = top_frame(mem, l, ts) != top;
      if (w.consistent && !moved) {
        t.frames = std::move(w.frames);
        t.truncated = w.truncated;
        t.torn = false;
        done = true;
      } else {
        t.frames = std::move(w.frames);
        t.truncated = w.truncated;
        t.torn = true;
        codes.clear();  // a code object may have been freed and its address reused
      }
    }
    dump.threads.push_back(std::move(t));
  }
  return dump;
}

// ---- MainThreadLook -----------------------------------------------------------

std::optional<bool> MainThreadLook::wanted_code(const PyProcess& p, RemoteMemory& mem, uint64_t code) {
  const auto& l = p.file->layout;
  uint64_t name = 0;
  if (!mem.read(code + l.code_name, &name, 8)) return std::nullopt;
  if (auto it = cache_.find(code); it != cache_.end() && it->second.name_ptr == name) return it->second.wanted;
  auto c = detail::read_code(mem, l, code, p.code_type_addr);
  if (!c) return std::nullopt;
  if (cache_.size() >= max_cache_) cache_.clear();  // a process that makes code objects without end
  const bool wanted = wanted_(c->frame);
  cache_[code] = {c->name_ptr, wanted};
  return wanted;
}

std::optional<bool> MainThreadLook::inside(const PyProcess& p, RemoteMemory& mem, size_t max_frames) {
  if (!p.file) return std::nullopt;
  const auto& l = p.file->layout;
  uint64_t interp = 0, ts = 0, main = 0;
  if (!mem.read(p.runtime_addr + l.runtime_interpreters_head, &interp, 8) || interp == 0) return std::nullopt;
  if (!mem.read(interp + l.interp_threads_head, &ts, 8)) return std::nullopt;
  for (int n = 0; ts != 0 && n < 4096; ++n) {  // newest first: the main thread's is the last
    main = ts;
    if (!mem.read(ts + l.tstate_next, &ts, 8)) return std::nullopt;
  }
  if (main == 0) return std::nullopt;
  uint64_t frame = top_frame(mem, l, main);
  for (size_t steps = 0; frame != 0 && steps < max_frames; ++steps) {
    uint64_t code = 0, prev = 0;
    if (!mem.read(frame + l.frame_code, &code, 8) || !mem.read(frame + l.frame_previous, &prev, 8)) return std::nullopt;
    uint8_t owner = 0;
    const bool skip = l.frame_owner && mem.read(frame + *l.frame_owner, &owner, 1) && l.owner_to_skip &&
                      owner == *l.owner_to_skip;
    if (!skip) {
      const auto w = wanted_code(p, mem, code);
      if (w && *w) return true;  // (an unreadable frame, moved under the walk, is not the one)
    }
    frame = prev;
  }
  return false;
}

// ---- CodeSymbolizer -----------------------------------------------------------

struct CodeSymbolizer::Impl {
  std::shared_ptr<const PyInterpreterFile> file;
  size_t max_entries;
  mutable std::mutex mu;
  std::unordered_map<uint64_t, CodeInfo> cache;
  uint64_t mismatches = 0;
  uint64_t code_type_addr = 0;  // learned per process: see resolve()
};

CodeSymbolizer::CodeSymbolizer(std::shared_ptr<const PyInterpreterFile> file, size_t max_entries)
    : impl_(std::make_unique<Impl>()) {
  impl_->file = std::move(file);
  impl_->max_entries = std::max<size_t>(max_entries, 1);
}
CodeSymbolizer::~CodeSymbolizer() = default;

std::optional<PyFrame> CodeSymbolizer::resolve(RemoteMemory& mem, uint64_t code_addr, uint64_t tag, uint64_t instr) {
  if (!impl_->file || code_addr == 0) return std::nullopt;
  const auto& l = impl_->file->layout;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->cache.find(code_addr);
  if (it == impl_->cache.end() || it->second.tag != tag) {
    // The type pointer is not checked here (the sampler already matched it
    // against the process's PyCode_Type); the tag guards against reuse.
    uint64_t type = 0;
    if (!mem.read(code_addr + 8, &type, 8)) return std::nullopt;
    auto info = detail::read_code(mem, l, code_addr, type);
    if (!info || info->tag != tag) {
      ++impl_->mismatches;
      return std::nullopt;
    }
    if (impl_->cache.size() >= impl_->max_entries) impl_->cache.clear();
    it = impl_->cache.insert_or_assign(code_addr, std::move(*info)).first;
  }
  PyFrame f = it->second.frame;
  f.line = detail::line_for(l, it->second, instr);
  return f;
}

size_t CodeSymbolizer::size() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->cache.size();
}

uint64_t CodeSymbolizer::mismatches() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->mismatches;
}

}  // namespace argus::python
