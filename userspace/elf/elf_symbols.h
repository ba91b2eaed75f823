// Symbol resolution for uprobes: reads the defined symbols of a 64-bit
// little-endian ELF file and maps each one to the file offset where a uprobe
// must be placed. Libraries are found by the symbols they export, not by file
// name, so this runs on every file a training process maps: it must never
// crash or read out of bounds on a malformed, truncated or hostile file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "userspace/common/result.h"

namespace argus::elf {

struct Symbol {
  std::string name;              // without version suffix
  std::string version;           // "" when unversioned
  bool default_version = true;   // "@@" (or unversioned); false for a hidden "@" version
  uint64_t value = 0;            // st_value (virtual address)
  uint64_t size = 0;             // st_size
  uint64_t file_offset = 0;      // value mapped through its PT_LOAD segment; 0 when !mapped
  bool mapped = false;           // value lies inside a PT_LOAD segment (file_offset is valid)
  bool weak = false;             // STB_WEAK
  bool global = false;           // STB_GLOBAL (neither weak nor global: a .symtab local)
  bool is_function = false;      // STT_FUNC or STT_GNU_IFUNC; otherwise STT_OBJECT
  bool ifunc = false;            // STT_GNU_IFUNC: value is the resolver, not the implementation,
                                 // so a uprobe there fires once per process, at binding time
  bool dynamic = false;          // from .dynsym (exported), not only from .symtab
  uint16_t section_index = 0;    // st_shndx as stored (SHN_ABS, SHN_XINDEX kept verbatim)
};

class SymbolTable {
 public:
  SymbolTable() = default;
  SymbolTable(std::vector<Symbol> symbols, uint16_t machine, uint16_t type, bool has_symtab);

  // A function by plain name. Among several candidates (versions, aliases from
  // .symtab) the default ("@@" or unversioned) version wins, then a global over
  // a weak over a local binding, then an exported one. nullptr when absent.
  const Symbol* find(std::string_view name) const;
  // The same for data objects (e.g. Python's _PyRuntime).
  const Symbol* find_object(std::string_view name) const;
  // Every symbol with this plain name, functions and objects, all versions.
  std::vector<const Symbol*> find_all(std::string_view name) const;
  // True when .dynsym exports (global or weak, any version) one of the names:
  // how the probe manager recognises libnccl / libcuda / a shim by its API.
  bool exports_any(std::initializer_list<std::string_view> names) const;

  // Sorted by name, then by preference (the order find() uses).
  const std::vector<Symbol>& symbols() const { return symbols_; }
  uint16_t machine() const { return machine_; }  // EM_X86_64, EM_AARCH64, ...
  uint16_t type() const { return type_; }        // ET_DYN or ET_EXEC
  bool has_symtab() const { return has_symtab_; }  // a .symtab was read (file not stripped)

 private:
  const Symbol* best(std::string_view name, bool want_function) const;

  std::vector<Symbol> symbols_;
  uint16_t machine_ = 0;
  uint16_t type_ = 0;
  bool has_symtab_ = false;
};

// What one parse cost: tests hold a hostile file to these, and a cap is checked
// against them as the parse goes.
struct ParseCost {
  uint64_t bytes_read = 0;       // bytes copied out of the file (or image)
  uint64_t symbols_visited = 0;  // symbol-table entries looked at
  uint64_t segment_steps = 0;    // PT_LOAD comparisons made to map symbols to file offsets
};

// Every count in an ELF header is bounded only by the file size, and a sparse
// file is as large as its owner says. These caps bound one parse in bytes and
// steps whatever the file claims; real libraries sit far below every one
// (libtorch_cpu: ~40 sections, 10 program headers, ~200k dynamic symbols,
// ~30 MiB of symbol and string tables). A file over a cap is refused with an
// error of kind kOverLimit (its message starts "limit: "), so callers count it apart.
struct ReadOptions {
  bool include_symtab = true;             // also read .symtab when present (locals, statics)
  uint64_t max_file_bytes = 4ull << 30;   // larger files are refused
  uint64_t max_symbols = 1ull << 21;      // per table
  uint64_t max_sections = 4096;           // section headers
  uint64_t max_program_headers = 512;     // program headers
  uint64_t max_load_segments = 64;        // PT_LOAD entries
  uint64_t max_read_bytes = 256ull << 20; // bytes copied out of the file, all reads together
  uint64_t max_notes = 4096;              // USDT notes
  ParseCost* cost = nullptr;              // filled in when set
};

// Why a file was not parsed: it is no ELF we read (truncated, malformed, not a
// regular file, ...), or it went over a ReadOptions cap.
enum class ParseFailure { kUnreadable, kOverLimit };
using ParseError = KindError<ParseFailure>;
template <typename T>
using ParseResult = Result<T, ParseError>;

// One USDT probe site (.note.stapsdt), as SystemTap's sdt.h lays it out.
struct UsdtNote {
  std::string provider;
  std::string name;
  std::string args;  // the argument spec, e.g. "8@%rdi -4@%esi"
  uint64_t pc = 0;   // the probe's address (unadjusted for prelink)
};

// Reads only the pieces it needs (headers, symbol/string/version sections)
// with pread, so a 200 MiB libnccl costs a few hundred KiB and a file that
// shrinks underneath yields an error, not SIGBUS. Every failure (not a regular
// file, not ELF, truncated, out-of-bounds offsets, ...) is one line naming the path.
ParseResult<SymbolTable> read_symbols(const std::string& path, ReadOptions opts = {});
// The same on a file the caller opened and checked (a mapped library opened
// safely through /proc); `name` is only for errors. The fd stays the caller's.
ParseResult<SymbolTable> read_symbols_fd(int fd, const std::string& name, ReadOptions opts = {});
// The same on an image already in memory (tests, fuzzing); errors name "<memory>".
ParseResult<SymbolTable> parse_symbols(std::span<const std::byte> image, ReadOptions opts = {});

// The USDT notes of a file (every SHT_NOTE section, owner "stapsdt", type 3),
// bounded by the same caps. A file without notes gives an empty list.
ParseResult<std::vector<UsdtNote>> read_usdt_notes_fd(int fd, const std::string& name, ReadOptions opts = {});
ParseResult<std::vector<UsdtNote>> parse_usdt_notes(std::span<const std::byte> image, ReadOptions opts = {});

}  // namespace argus::elf
