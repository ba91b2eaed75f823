#include "exporters/query_params.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>

namespace argus {

std::optional<long> parse_int_param(std::string_view text, long lo, long hi) {
  long v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v, 10);
  if (text.empty() || ec != std::errc() || ptr != end || v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<double> parse_number_param(std::string_view text) {
  // strtod needs a NUL-terminated copy; the end it reports must be the copy's end,
  // so an embedded NUL ("5%00junk") or trailing bytes are refused.
  if (text.empty() || text.front() == ' ' || (text.front() >= '\t' && text.front() <= '\r')) return std::nullopt;
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

}  // namespace argus
