// Kernel names as the CUPTI producer sees them (any name a training script's
// kernels carry, mangled or not): the base-name scan, the NCCL classification and
// the interning table (which demangles) of gpu/cupti_convert. Built only where
// the CUPTI headers are found, like gpu/ itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpu/cupti_convert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view name(reinterpret_cast<const char*>(data), size);
  const std::string_view base = argus::gpu::kernel_base_name(name);
  if (base.data() < name.data() || base.data() + base.size() > name.data() + name.size()) std::abort();
  const uint8_t flags = argus::gpu::classify_kernel_name(name);
  argus::gpu::NameTable table(4);
  const auto ref = table.intern(name);
  if (!name.empty() && (ref.id != 1 || ref.flags != flags || !ref.is_new)) std::abort();
  if (table.intern(name).id != ref.id) std::abort();  // the same name, the same id
  const std::string c_name(name.substr(0, name.find('\0')));
  (void)table.intern(c_name.c_str());
  return 0;
}
