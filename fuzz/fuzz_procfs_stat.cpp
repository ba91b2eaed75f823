// /proc/PID/stat: comm is chosen by the process (prctl, exec name) and may hold
// spaces and parentheses. parse_stat returns a clear error or a ProcStat.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "userspace/procfs/procfs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto st = argus::procfs::parse_stat(text);
  if (!st.ok()) {
    if (st.error().empty()) std::abort();
    (void)argus::procfs::error_kind(st);
    return 0;
  }
  if (st->comm.size() > size) std::abort();
  return 0;
}
