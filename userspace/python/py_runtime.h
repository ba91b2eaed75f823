// The Python layer's foundation: what an interpreter file is (version, layout,
// anchors) and where a live process has it. Shared by the GC probes, the
// on-demand stack dump and the sampled profiles.
//
// Facts come from ../shared/PYTHON-INTERNALS.md, checked against each binary
// here: offsets for 3.10-3.12 from tables, 3.13+ from _Py_DebugOffsets (the
// runtime's first bytes). Nothing here writes to, or stops, a process.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "userspace/common/defaults.h"
#include "bpf/argus_python.h"
#include "userspace/common/result.h"
#include "userspace/elf/elf_symbols.h"
#include "userspace/model/python_stacks.h"
#include "userspace/model/vocab.h"
#include "userspace/procfs/procfs.h"

namespace argus::python {

struct PyVersion {
  int major = 0, minor = 0, micro = 0;
  uint32_t hex() const { return static_cast<uint32_t>(major << 8 | minor); }  // 0x030b for 3.11
  std::string str() const;  // "3.11.7"
};

// Byte offsets into the interpreter's structures (x86-64 release builds).
struct PyLayout {
  PyVersion version;
  // _PyRuntime -> interpreters.head (the newest interpreter; the main one is last in the list)
  uint32_t runtime_interpreters_head = 0;
  uint32_t interp_next = 0;          // interp -> next interpreter
  uint32_t interp_threads_head = 0;  // interp -> first thread state
  uint32_t interp_gc = 0;            // interp -> GC state (struct _gc_runtime_state)
  uint32_t gc_generation_stats = 128;  // GC state -> generation_stats[3] {collections, collected, uncollectable}
  uint32_t tstate_next = 0, tstate_thread_id = 0;
  std::optional<uint32_t> tstate_native_thread_id;  // absent on 3.10
  // tstate -> top frame. With cframe_current_frame set (3.11, 3.12) the word at
  // tstate_frame is a _PyCFrame*, and the frame is at that + cframe_current_frame.
  uint32_t tstate_frame = 0;
  std::optional<uint32_t> cframe_current_frame;
  uint32_t frame_code = 0, frame_previous = 0;
  uint32_t frame_instr = 0;       // 3.10: f_lasti (int, code units); 3.11+: instruction pointer
  bool instr_is_lasti = false;    // 3.10
  std::optional<uint32_t> frame_owner;  // 3.11+: one byte
  std::optional<uint8_t> owner_to_skip;  // 3.12+: 3 (FRAME_OWNED_BY_CSTACK)
  uint32_t code_firstlineno = 0, code_filename = 0, code_name = 0;
  std::optional<uint32_t> code_qualname;  // absent on 3.10
  uint32_t code_linetable = 0;
  uint32_t code_bytecode = 0;       // 3.11+: code -> first code unit (co_code_adaptive); 0 on 3.10
  uint32_t unicode_ascii_data = 0;  // compact ASCII string -> its characters
  uint32_t unicode_compact_data = 0;  // compact non-ASCII string -> its characters
  uint32_t bytes_data = 32;          // PyBytesObject -> ob_sval (3.10 co_linetable/co_code are bytes)
};

// What an interpreter file (libpython, or an executable with Python linked in)
// offers. File offsets are for uprobes; vaddrs are ELF virtual addresses.
struct PyInterpreterFile {
  PyLayout layout;
  uint64_t runtime_vaddr = 0;      // _PyRuntime (or the .PyRuntime section)
  uint64_t code_type_vaddr = 0;    // PyCode_Type: a frame's code object must point to it
  bool free_threaded = false;      // 3.13t: refused (layout differs)
  // GC anchors, best first. gc_collect_main (a local, suffixed clones accepted,
  // never .cold); else the USDT probes python:gc__start/gc__done; else the first
  // local call inside the exported PyGC_Collect; else none (counts by polling).
  std::string gc_anchor;           // "gc_collect_main", "usdt", "pygc_collect_call", "none"
  std::string gc_symbol;           // the symbol probed, e.g. "gc_collect_main.lto_priv.0"
  uint64_t gc_entry_offset = 0;    // file offset for the entry uprobe + uretprobe (symbol anchors)
  struct Load { uint64_t vaddr = 0, offset = 0, filesz = 0; };
  std::vector<Load> loads;         // PT_LOAD segments: vaddr <-> file offset <-> mapping
};

// Recognises an interpreter by the symbols it exports (_PyRuntime; never by
// its name). Cheap: used on every mapped file.
bool looks_like_python(const elf::SymbolTable& dynamic_symbols);

// Reads what is needed from the open file (symbols with .symtab, the runtime's
// initial bytes for 3.13's debug offsets, notes, PyGC_Collect's code). A
// version it has no layout for, a debug build or a free-threaded build is an
// error that says so, once per file.
Result<PyInterpreterFile> inspect_interpreter(int fd, const std::string& name, elf::ReadOptions ropts = {});

// Reads another process's memory without stopping it (process_vm_readv, else
// /proc/PID/mem). Behind an interface so walkers are tested on images.
class RemoteMemory {
 public:
  virtual ~RemoteMemory() = default;
  // All `len` bytes or false.
  virtual bool read(uint64_t addr, void* out, size_t len) = 0;
};
std::unique_ptr<RemoteMemory> process_memory(int pid, const std::string& proc_root = kDefaultProcRoot);

// An interpreter where a live process has it.
struct PyProcess {
  int pid = 0;
  std::shared_ptr<const PyInterpreterFile> file;
  std::string mapped_path;  // as /proc/PID/maps names it
  uint64_t load_bias = 0;   // runtime address = vaddr + load_bias (0 for non-PIE)
  uint64_t runtime_addr = 0;
  uint64_t code_type_addr = 0;
};

// Where `pid` has `file` loaded: the load bias from the process's mappings of
// that file (same device and inode), checked against the PT_LOAD segments.
Result<PyProcess> locate_in_process(int pid, std::shared_ptr<const PyInterpreterFile> file,
                                    const std::vector<procfs::MapEntry>& mappings_of_file);

// Finds the interpreter a live process runs (a libpython, or an executable with
// Python linked in, under any file name: recognised by looks_like_python), its
// files opened safely (procfs/mapped_file.h) and inspected once per (device,
// inode). Thread-safe. The error's kind says why not: kNotPython (none mapped),
// kUnsupportedPython (one it refuses), kUnreadable (maps or memory unreadable).
class PythonLocator {
 public:
  explicit PythonLocator(std::string proc_root = kDefaultProcRoot, size_t max_files = 256);
  ~PythonLocator();
  Result<PyProcess, LocateFailure> locate(int pid);
  // Files it refused (debug build, free-threaded, unknown version), for logs and skips.
  std::map<std::string, uint64_t> refusals() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The BPF programs' view of a located interpreter (py_procs map).
argus_py_proc bpf_config(const PyProcess& p, uint64_t gc_stats_addr);

// The main interpreter's state, or 0 while the runtime is not initialised yet.
uint64_t main_interpreter(const PyProcess& p, RemoteMemory& mem);
// &generation_stats[0] of the main interpreter, or 0 while not initialised.
uint64_t gc_stats_address(const PyProcess& p, RemoteMemory& mem);
// The three generations' `collections` counters, read now.
std::optional<std::array<int64_t, 3>> read_gc_collections(const PyProcess& p, RemoteMemory& mem);

// ---- Stacks (read from outside, never stopping the process) ----
struct DumpOptions {
  size_t max_frames = 512;
  size_t max_threads = 256;
  int retries = 3;  // re-reads of a thread whose top frame changed under the walk
};
Result<PyStackDump> dump_stacks(const PyProcess& p, RemoteMemory& mem, const std::string& proc_root,
                                const DumpOptions& opts = {});

// Whether a process's main thread is inside a function now, looked at often
// and cheaply: only the main thread (the oldest thread state of the main
// interpreter), only its frames' code pointers, each code object named once
// (cached by address, the cache entry trusted while the code's name pointer
// is unchanged). Reads never stop the process. Not thread-safe.
class MainThreadLook {
 public:
  using Wanted = bool (*)(const PyFrame&);
  explicit MainThreadLook(Wanted wanted, size_t max_cache = 4096) : wanted_(wanted), max_cache_(max_cache) {}
  // nullopt when the main thread could not be read now (gone, not initialised).
  std::optional<bool> inside(const PyProcess& p, RemoteMemory& mem, size_t max_frames = 128);

 private:
  struct Entry {
    uint64_t name_ptr = 0;
    bool wanted = false;
  };
  std::optional<bool> wanted_code(const PyProcess& p, RemoteMemory& mem, uint64_t code);
  Wanted wanted_;
  size_t max_cache_;
  std::unordered_map<uint64_t, Entry> cache_;  // code object address -> what it is
};

// Symbolises the code objects the sampler reports, with a bounded cache keyed
// by address and validated by ARGUS_PY_CODE_TAG (a freed code object's address
// reused by another is re-read, never mislabelled).
class CodeSymbolizer {
 public:
  CodeSymbolizer(std::shared_ptr<const PyInterpreterFile> file, size_t max_entries = 65536);
  ~CodeSymbolizer();
  // `instr` is what BPF read at layout.frame_instr (f_lasti on 3.10, else the
  // instruction pointer). nullopt: unreadable, or the tag no longer matches.
  std::optional<PyFrame> resolve(RemoteMemory& mem, uint64_t code_addr, uint64_t tag, uint64_t instr);
  size_t size() const;
  uint64_t mismatches() const;  // tags that did not match what memory holds now

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace argus::python
