// /proc/PID/maps of any process on the node (its paths are chosen by whoever
// named the mapped files): parse_maps must never crash, and what it keeps must
// satisfy the MapEntry contract.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "userspace/procfs/procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto parsed = argus::procfs::parse_maps(text);
  for (const auto& e : parsed.entries) {
    if (e.start >= e.end || e.perms.size() != 4) std::abort();  // refused lines are counted, not kept
    (void)e.executable();
    (void)e.file_backed();
  }
  return 0;
}
