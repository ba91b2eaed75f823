// The few ELF pieces the Python layer needs beyond symbols: PT_LOAD segments,
// a section by name, and bytes at a virtual address. pread only, every count
// bounded: the file is a process's to choose.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "userspace/common/result.h"
#include "userspace/python/py_runtime.h"

namespace argus::python::detail {

struct ElfSegment {
  uint64_t vaddr = 0, offset = 0, filesz = 0, memsz = 0;
  bool executable = false;
};
struct ElfSection {
  std::string name;
  uint64_t addr = 0, offset = 0, size = 0;
  uint32_t type = 0;
};
struct ElfLayout {
  uint16_t type = 0;  // ET_DYN / ET_EXEC
  uint64_t file_size = 0;
  std::vector<ElfSegment> loads;
  std::vector<ElfSection> sections;  // empty when the section headers are unreadable
  const ElfSection* section(const std::string& name) const;
  // File offset of [vaddr, vaddr+len) when it lies wholly in a segment's file bytes.
  std::optional<uint64_t> file_offset(uint64_t vaddr, uint64_t len) const;
};

Result<ElfLayout> read_elf_layout(int fd, const std::string& name);
// Exactly `len` bytes at `offset`, or an error.
Result<std::string> pread_exact(int fd, uint64_t offset, size_t len);

// Pure pieces of py_runtime.cpp, exposed for tests.
// gc_collect_main or a compiler clone of it (.lto_priv.N, .constprop.N, ...), never .cold.
bool is_gc_collect_main(const std::string& symbol_name);
// A 3.13+ layout from the first bytes of _PyRuntime (_Py_DebugOffsets).
// Errors name what is wrong (no cookie, version mismatch, free-threaded build).
Result<PyLayout> layout_from_debug_offsets(const std::string& runtime_bytes, const PyVersion& want,
                                           bool* free_threaded);

}  // namespace argus::python::detail
