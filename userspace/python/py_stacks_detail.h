// Pure pieces of the stack reader, exposed for tests (and the sampler's
// symbolizer): line tables, strings, code objects.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "userspace/python/py_runtime.h"

namespace argus::python::detail {

// 3.11+: the location table (CPython's Objects/locations.md); `index` in code
// units from the first instruction. 0 when the table says nothing or is corrupt.
int line_from_location_table(const std::string& table, int firstlineno, int64_t index);
// 3.10: PEP 626 (byte delta, line delta) pairs; `byte_offset` = f_lasti * 2.
int line_from_pep626_table(const std::string& table, int firstlineno, int64_t byte_offset);

// A compact str (ASCII, or UCS1/2/4) as UTF-8, at most `max_len` characters
// (longer ones end in "..."). nullopt for anything else or an unreadable one.
std::optional<std::string> read_py_string(RemoteMemory& mem, const PyLayout& l, uint64_t addr, size_t max_len);
std::optional<std::string> read_py_bytes(RemoteMemory& mem, const PyLayout& l, uint64_t addr, size_t max_len);

struct CodeInfo {
  uint64_t addr = 0;
  PyFrame frame;  // line 0
  int firstlineno = 0;
  uint64_t name_ptr = 0;
  std::string linetable;
  uint64_t tag = 0;  // ARGUS_PY_CODE_TAG(firstlineno, name_ptr)
  int64_t code_units = -1;  // 3.11+: Py_SIZE(code), the bytecode's length; -1 unknown (3.10)
};
// The code object at `code`, when its type is `code_type_addr`.
std::optional<CodeInfo> read_code(RemoteMemory& mem, const PyLayout& l, uint64_t code, uint64_t code_type_addr);
// The line of an instruction as the frame holds it (f_lasti or an instruction pointer).
int line_for(const PyLayout& l, const CodeInfo& c, uint64_t instr);
// False when the instruction cannot belong to this code object: the frame's
// slot was reused while it was read (3.11+ frames live in a per-thread stack).
bool instr_in_code(const PyLayout& l, const CodeInfo& c, uint64_t instr);

}  // namespace argus::python::detail
