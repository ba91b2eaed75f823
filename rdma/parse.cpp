#include "rdma/parse.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace argus::rdma {

std::string_view trim(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

Result<uint64_t> parse_counter(std::string_view text) {
  std::string_view t = trim(text);
  if (t.empty()) return make_error("empty counter");
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v, 10);
  if (ec != std::errc() || ptr != t.data() + t.size()) {
    return make_error("not an unsigned 64-bit integer: '" + std::string(t.substr(0, 40)) + "'");
  }
  return v;
}

Result<PortState> parse_state(std::string_view text) {
  std::string_view t = trim(text);
  auto colon = t.find(':');
  if (colon == std::string_view::npos) return make_error("expected 'ID: NAME', got '" + std::string(t.substr(0, 40)) + "'");
  std::string_view id_text = trim(t.substr(0, colon));
  std::string_view name = trim(t.substr(colon + 1));
  int id = -1;
  auto [ptr, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id, 10);
  if (ec != std::errc() || ptr != id_text.data() + id_text.size() || id < 0 || name.empty() ||
      name.find(':') != std::string_view::npos) {
    return make_error("expected 'ID: NAME', got '" + std::string(t.substr(0, 40)) + "'");
  }
  return PortState{id, std::string(name)};
}

namespace {

bool known_speed(std::string_view s) {
  for (std::string_view k : {"SDR", "DDR", "QDR", "FDR10", "FDR", "EDR", "HDR", "NDR", "XDR", "GDR"}) {
    if (s == k) return true;
  }
  return false;
}

}  // namespace

Result<LinkRate> parse_rate(std::string_view text) {
  std::string_view t = trim(text);
  auto bad = [&](const char* why) {
    return make_error(std::string("unknown rate '") + std::string(t.substr(0, 60)) + "': " + why);
  };
  // The number: digits with an optional fraction ("2.5", "53.125").
  std::size_t i = 0;
  while (i < t.size() && ((t[i] >= '0' && t[i] <= '9') || t[i] == '.')) i++;
  if (i == 0) return bad("no number");
  std::string num(t.substr(0, i));
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(num.c_str(), &end);
  if (errno != 0 || end != num.c_str() + num.size() || !std::isfinite(value) || value <= 0 || value > 1e6) {
    return bad("bad number");
  }
  std::string_view rest = trim(t.substr(i));
  double scale = 0;
  for (auto [unit, s] : {std::pair<std::string_view, double>{"Gb/sec", 1.0}, {"Gb/s", 1.0}, {"Mb/sec", 1e-3},
                         {"Mb/s", 1e-3}, {"Tb/sec", 1e3}, {"Tb/s", 1e3}}) {
    if (rest.substr(0, unit.size()) == unit) {
      scale = s;
      rest = trim(rest.substr(unit.size()));
      break;
    }
  }
  if (scale == 0) return bad("no Gb/sec unit");
  LinkRate r;
  r.gbps = value * scale;
  r.bytes_per_second = static_cast<uint64_t>(std::llround(r.gbps * 125'000'000.0));
  if (rest.empty()) return r;  // no "(4X NDR)": width unknown
  if (rest.front() != '(' || rest.back() != ')') return bad("expected '(WIDTH SPEED)'");
  std::string_view inner = trim(rest.substr(1, rest.size() - 2));
  auto x = inner.find_first_of("xX");
  if (x == std::string_view::npos || x == 0) return bad("no NX width");
  int width = 0;
  auto [ptr, ec] = std::from_chars(inner.data(), inner.data() + x, width, 10);
  if (ec != std::errc() || ptr != inner.data() + x) return bad("bad width");
  if (width != 1 && width != 2 && width != 4 && width != 8 && width != 12) return bad("unknown width");
  std::string_view speed = trim(inner.substr(x + 1));
  if (!speed.empty() && !known_speed(speed)) return bad("unknown speed name");
  r.width = width;
  r.speed = std::string(speed);
  return r;
}

CounterDelta counter_delta(uint64_t prev, uint64_t cur) {
  CounterDelta d;
  if (cur >= prev) {
    d.delta = cur - prev;
    return d;
  }
  // A wrap only when the value was within 1/16 of the top of its range and is now within
  // 1/16 of the bottom: anything else going backwards is a reset.
  constexpr uint64_t k32 = uint64_t{1} << 32;
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (prev < k32) {
    if (prev >= k32 - k32 / 16 && cur < k32 / 16) {
      d.delta = (k32 - prev) + cur;
      d.wrapped = true;
      return d;
    }
  } else if (prev >= kMax - kMax / 16 && cur < kMax / 16) {
    d.delta = (kMax - prev) + cur + 1;
    d.wrapped = true;
    return d;
  }
  d.delta = cur;
  d.reset = true;
  return d;
}

}  // namespace argus::rdma
