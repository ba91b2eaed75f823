// ELF symbol tables and USDT notes: every file a training process maps is
// parsed, and any process can map a file it crafted. parse_symbols (the
// in-memory twin of read_symbols) returns a table or a one-line error; lookups
// on the table are exercised too, as the probe manager does them. The same
// image goes through parse_usdt_notes (every SHT_NOTE section is walked, so the
// build-id notes of the seeds exercise it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "userspace/elf/elf_symbols.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
  argus::elf::ReadOptions opts;
  opts.include_symtab = size % 2 == 0;  // both paths, without spending input bytes
  const auto notes = argus::elf::parse_usdt_notes(image, opts);
  if (!notes.ok() && (notes.error().empty() || notes.error().find('\n') != std::string::npos)) std::abort();
  const auto table = argus::elf::parse_symbols(image, opts);
  if (!table.ok()) {
    if (table.error().empty() || table.error().find('\n') != std::string::npos) std::abort();
    return 0;
  }
  (void)table->exports_any({"ncclAllReduce", "cuLaunchKernel", "argus_gpu_wire_version"});
  (void)table->find("ncclAllReduce");
  (void)table->find_object("_PyRuntime");
  size_t looked = 0;
  for (const auto& s : table->symbols()) {
    if (++looked > 64) break;
    (void)table->find_all(s.name);
  }
  return 0;
}
