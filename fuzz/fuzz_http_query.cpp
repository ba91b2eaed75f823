// HTTP query and path values (?last=N, ?since=T, ?seconds=S, {rank}) as any
// client sends them, after percent-decoding: the parsers of
// exporters/query_params.h take the whole text or refuse it. Kept on those
// functions only (no server types), so the target survives a change of HTTP library.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "exporters/query_params.h"

namespace {

bool all_digits(std::string_view s) {
  if (!s.empty() && s.front() == '-') s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The routes' ranges: rank 0..2^24, last 1..600.
  if (auto v = argus::parse_int_param(text, 0, 1 << 24)) {
    if (*v < 0 || *v > (1 << 24) || !all_digits(text)) std::abort();
  }
  if (auto v = argus::parse_int_param(text, 1, 600)) {
    if (*v < 1 || *v > 600 || !all_digits(text)) std::abort();
  }
  if (auto v = argus::parse_number_param(text)) {
    if (!std::isfinite(*v) || text.find('\0') != std::string_view::npos) std::abort();
  }
  return 0;
}
