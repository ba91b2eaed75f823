// Values of the API's query and path parameters (?last=N, ?since=T, ?seconds=S,
// /ranks/{job}/{rank}). They come from any client, percent-decoded (so they may
// hold NUL or any byte): a value is accepted only when its whole text is the
// number, never a prefix of it. No server types here, so the HTTP library can
// change under it and the fuzz target (fuzz/fuzz_http_query.cpp) needs nothing else.
#pragma once
#include <optional>
#include <string_view>

namespace argus {

// A decimal integer in [lo, hi]: optional '-', digits, nothing else.
std::optional<long> parse_int_param(std::string_view text, long lo, long hi);

// A finite decimal number (strtod's syntax without leading spaces): ?since=.
std::optional<double> parse_number_param(std::string_view text);

}  // namespace argus
