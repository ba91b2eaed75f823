// The real FrameResolver, apart from py_profile.cpp so that the profile's
// logic links without the interpreter readers.
#include "userspace/python/py_profile.h"

namespace argus::python {
namespace {

class SymbolizerResolver : public FrameResolver {
 public:
  SymbolizerResolver(const PyProcess& p, size_t max_entries)
      : mem_(process_memory(p.pid)), symbolizer_(p.file, max_entries) {}
  std::optional<PyFrame> resolve(uint64_t code, uint64_t tag, uint64_t instr) override {
    if (!mem_) return std::nullopt;
    return symbolizer_.resolve(*mem_, code, tag, instr);
  }

 private:
  std::unique_ptr<RemoteMemory> mem_;
  CodeSymbolizer symbolizer_;
};

}  // namespace

std::unique_ptr<FrameResolver> make_frame_resolver(const PyProcess& p, size_t max_entries) {
  return std::make_unique<SymbolizerResolver>(p, max_entries);
}

}  // namespace argus::python
