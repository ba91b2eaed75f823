// Parsers for the text of /sys/class/infiniband attribute files, and the counter arithmetic
// (resets, wraps) every reader of a hardware counter needs.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "userspace/common/result.h"

namespace argus::rdma {

// `rate`: "400 Gb/sec (4X NDR)", "100 Gb/sec (4X EDR)", "25 Gb/sec (1X EDR)",
// "10 Gb/sec (4X)" (SDR has no speed name), "2.5 Gb/sec (1X)", "56 Gb/sec (4X FDR)",
// "53.125 Gb/sec (1X HDR)". Also accepted: "Gb/s", "Mb/sec", a missing "(...)" part (width
// then 0 = unknown), "NX" widths 1, 2, 4, 8, 12.
struct LinkRate {
  double gbps = 0;                 // total signalling rate, Gb/s
  uint64_t bytes_per_second = 0;   // gbps x 125,000,000 (what node_exporter exports)
  int width = 0;                   // lanes; 0 = not given
  std::string speed;               // "NDR", "HDR", "EDR", "FDR", "FDR10", "QDR", "DDR", "" (SDR/none)
  double lane_gbps() const { return width > 0 ? gbps / width : gbps; }
};
Result<LinkRate> parse_rate(std::string_view text);

// `state` / `phys_state`: "4: ACTIVE", "5: LinkUp" -> (4, "ACTIVE").
struct PortState {
  int id = -1;
  std::string name;
};
Result<PortState> parse_state(std::string_view text);

// A counter file: a decimal unsigned 64-bit integer, surrounding whitespace allowed.
// Anything else ("", "N/A (no PMA)", "12abc", a negative or too large number) is an error.
Result<uint64_t> parse_counter(std::string_view text);

// Trims ASCII whitespace at both ends.
std::string_view trim(std::string_view s);

// The increase of a counter from `prev` to `cur`:
//  - cur >= prev: cur - prev;
//  - a wrap: prev was within 1/16 of the top of the 32-bit (or 64-bit) range and cur is
//    within 1/16 of its bottom: the distance across the top (legacy 32-bit counters; the
//    64-bit ones practically never wrap);
//  - otherwise a reset (driver reload, counters cleared): the new value counted from 0.
struct CounterDelta {
  uint64_t delta = 0;
  bool reset = false;
  bool wrapped = false;
};
CounterDelta counter_delta(uint64_t prev, uint64_t cur);

}  // namespace argus::rdma
