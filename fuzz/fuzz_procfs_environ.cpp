// /proc/PID/environ: bytes a training process chose. parse_environ keeps the
// first KEY=VALUE of each key and never an empty key.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "userspace/procfs/procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto env = argus::procfs::parse_environ(text);
  size_t bytes = 0;
  for (const auto& [k, v] : env) {
    if (k.empty() || k.find('=') != std::string_view::npos || k.find('\0') != std::string_view::npos) std::abort();
    bytes += k.size() + v.size();
  }
  if (bytes > size) std::abort();  // nothing made up
  return 0;
}
