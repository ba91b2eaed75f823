// sysfs counters and rates of InfiniBand/RoCE ports, and the link model built on
// them. The text of /sys/class/infiniband files comes from drivers (and, on test
// rigs, from fixture trees anyone can write), so every reading is taken as
// hostile: parse_rate/parse_state/parse_counter, the counter arithmetic of
// resets and wraps, and the LinkHealthDetector fed with what they return, poll
// after poll, the way RdmaMonitor glues them.
//
// Input: lines. Each poll takes one line of seconds to advance the clock (a
// counter, taken mod 4000, 0 included), then for each of two ports:
// rate, state, phys_state, port_rcv_data, port_xmit_data, port_xmit_wait,
// symbol_error, link_downed.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "rdma/detector.h"
#include "rdma/parse.h"
#include "tests/support/manual_clock.h"

namespace {

using namespace argus::rdma;

struct Tracker {  // RdmaMonitor's monotonic total of one counter file
  bool has = false;
  uint64_t last = 0, total = 0;
  void update(uint64_t raw) {
    if (has) {
      const CounterDelta d = counter_delta(last, raw);
      if (d.reset && d.wrapped) std::abort();
      if (!d.reset && !d.wrapped && d.delta != raw - last) std::abort();
      total += d.delta;
    } else {
      total = raw;
    }
    has = true;
    last = raw;
  }
};

struct Lines {
  std::string_view rest;
  bool next(std::string_view& line) {
    if (rest.empty()) return false;
    const size_t nl = rest.find('\n');
    line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    return true;
  }
};

constexpr int kPorts = 2;
constexpr int kCounters = 5;  // rcv, xmit, wait, symbol_error, link_downed
const char* const kErrorNames[] = {"symbol_error", "link_downed"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Lines in{std::string_view(reinterpret_cast<const char*>(data), size)};
  argus::testing_support::ManualClock clock;
  LinkHealthDetector detector(DetectorOptions{}, clock);
  Tracker trackers[kPorts][kCounters];
  std::vector<PortObservation> obs(kPorts);
  for (int p = 0; p < kPorts; ++p) {
    obs[p].device = "mlx5_" + std::to_string(p);
    obs[p].port = 1;
    obs[p].group = "MT4129/InfiniBand";
  }
  std::string_view line;
  for (int poll = 0; poll < 64 && in.next(line); ++poll) {
    if (auto adv = parse_counter(line)) clock.advance(static_cast<double>(*adv % 4000));
    for (int p = 0; p < kPorts; ++p) {
      PortObservation& o = obs[p];
      if (!in.next(line)) break;
      if (auto r = parse_rate(line)) {
        if (!(r->gbps > 0) || !std::isfinite(r->gbps)) std::abort();
        o.rate_known = true;
        o.rate_gbps = r->gbps;
        o.width = r->width;
        o.lane_gbps = r->lane_gbps();
        o.rate_text = format_rate_text(r->gbps, r->width, r->speed);
      }
      if (!in.next(line)) break;
      if (auto s = parse_state(line)) {
        o.state_known = true;
        o.up = s->id == 4 || s->id == 5;
      }
      if (!in.next(line)) break;
      if (auto s = parse_state(line)) o.phys_state_id = s->id;
      for (int c = 0; c < kCounters; ++c) {
        if (!in.next(line)) break;
        auto v = parse_counter(line);
        if (!v) continue;
        trackers[p][c].update(*v);
        const uint64_t total = trackers[p][c].total;
        switch (c) {
          case 0: o.rx_bytes = total * 4; break;
          case 1: o.tx_bytes = total * 4; break;
          case 2:
            o.has_xmit_wait = true;
            o.xmit_wait = total;
            break;
          default: o.errors[kErrorNames[c - 3]] = total;
        }
      }
    }
    detector.observe(obs);
    for (const auto& o : obs) {
      const PortHealth* h = detector.health(o.device, o.port);
      if (h == nullptr) std::abort();
      if (std::isnan(h->rx_bytes_per_second) || std::isnan(h->transmit_wait_share)) std::abort();
    }
    (void)detector.take_events();
  }
  return 0;
}
