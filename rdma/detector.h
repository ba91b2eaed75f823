// Link health: decides, poll by poll, which of the seven reasons of
// argus_ib_link_degraded{reason} hold on each port. Pure logic on observations (no files),
// time from the injected Clock, so it is tested on scripted counter series.
//
// Every threshold is a field of DetectorOptions; docs/rdma.md says why each default is what
// it is. In short (rates over the last `window_s`, error rates over `error_window_s`):
//   errors      an error counter's rate crosses its threshold (symbol_error: a bit error
//               ratio above 1e-12 of the link's signalling rate) with at least `min_count`
//               errors in the window;
//   flapping    link_error_recovery or link_downed went up (held for flap_hold_s);
//   down        the port is not ACTIVE (only ports that were up or carried traffic, and
//               not administratively Disabled);
//   rate        the lane speed is below the best this port or a sibling (same HCA type and
//               link layer) showed since the agent started;
//   width       the lane count is below that best;
//   congestion  port_xmit_wait ticks x bytes_per_tick over the window is >= 10% of line rate;
//   imbalance   the port moves < 50% of the median of the other busy rails in its group.
// A reason is raised after `raise_polls` consecutive polls that meet it, and cleared only
// after its (lower) hold condition has failed for `clear_after_s` (hysteresis). While a port
// is not ACTIVE nothing but `down` is reported (a link that is down is not also "flapping" or
// "imbalanced"); imbalance is not reported on a port with rate/width.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "rdma/link_model.h"
#include "userspace/common/clock.h"

namespace argus::rdma {

struct ErrorThreshold {
  double per_second = 1.0;  // rate that raises
  uint64_t min_count = 5;   // errors in the window needed as well
};

struct DetectorOptions {
  double window_s = 5;        // throughput, transmit-wait share: rates over this window
  double error_window_s = 60; // error rates over this (longer) window: low BERs need time
  int raise_polls = 2;        // consecutive polls a condition must hold to raise
  double clear_after_s = 30;  // a raised reason clears after its hold condition failed this long

  // errors
  double symbol_error_ber = 1e-12;  // symbol_error/s over link bits/s
  std::map<std::string, ErrorThreshold> error_thresholds = {
      {"symbol_error", {1.0, 5}},  // used only when the link rate is unknown (else the BER rule)
      {"port_rcv_errors", {1.0, 5}},
      {"port_rcv_remote_physical_errors", {1.0, 5}},
      {"local_link_integrity_errors", {0.1, 2}},
      {"excessive_buffer_overrun_errors", {0.1, 2}},
      {"port_xmit_discards", {10.0, 50}},
      {"port_rcv_constraint_errors", {1.0, 5}},
      {"port_xmit_constraint_errors", {1.0, 5}},
  };
  double error_clear_ratio = 0.5;  // stays raised while the rate is >= ratio x threshold

  // flapping
  double flap_hold_s = 300;  // stays raised until no recovery/downed increase for this long

  // down
  bool down_needs_history = true;  // ignore ports never up and without traffic (unused ports)

  // congestion
  double xmit_wait_bytes_per_tick = 8;  // NVIDIA Quantum/ConnectX: one tick per 8 bytes lost
  double congestion_share = 0.10;
  double congestion_clear_share = 0.05;

  // imbalance
  double imbalance_ratio = 0.5;
  double imbalance_clear_ratio = 0.7;
  double imbalance_min_bytes_per_s = 50e6;  // the other rails' median must be at least this
  int imbalance_raise_polls = 3;
};

// One port at one poll, as the detector needs it. Counters are monotonic totals.
struct PortObservation {
  std::string device;
  int port = 0;
  std::string group;  // siblings: same HCA type and link layer ("MT4129/InfiniBand")
  bool state_known = false;
  bool up = false;
  int phys_state_id = -1;
  bool rate_known = false;
  double rate_gbps = 0;
  int width = 0;          // 0 = unknown
  double lane_gbps = 0;
  uint64_t rx_bytes = 0, tx_bytes = 0;
  bool has_xmit_wait = false;
  uint64_t xmit_wait = 0;
  std::map<std::string, uint64_t> errors;  // error counter -> total
  bool expected_busy = true;  // compared for imbalance (the caller knows which rails carry ranks)
  std::string rate_text;      // for events
  std::string link_layer;
};

struct PortHealth {
  std::set<std::string> reasons;  // reported now
  std::map<std::string, std::string> detail;
  double rx_bytes_per_second = 0;
  double tx_bytes_per_second = 0;
  double transmit_wait_share = 0;
  std::map<std::string, double> error_rates;
};

class LinkHealthDetector {
 public:
  LinkHealthDetector(DetectorOptions options, const Clock& clock);

  // One poll: every port present now. Ports missing from `ports` keep their state (call
  // forget() when one is gone for good).
  void observe(const std::vector<PortObservation>& ports);
  void forget(const std::string& device, int port);

  const PortHealth* health(const std::string& device, int port) const;
  std::vector<LinkEvent> take_events();
  const DetectorOptions& options() const { return opts_; }

 private:
  enum Reason { kErrors, kFlapping, kDown, kRate, kWidth, kCongestion, kImbalance, kReasonCount };
  struct Sample {
    uint64_t t_ns = 0;
    uint64_t rx = 0, tx = 0, wait = 0;
    std::vector<uint64_t> errors;  // aligned with PortState::error_names
  };
  struct ReasonState {
    bool active = false;
    int streak = 0;
    uint64_t last_hold_ns = 0;
    std::string detail;
    std::map<std::string, double> evidence;
  };
  struct PortState {
    std::deque<Sample> samples;
    std::vector<std::string> error_names;
    std::vector<uint64_t> spare;  // a popped sample's buffer, reused
    bool seen_up = false;
    bool had_traffic = false;
    int best_width = 0;
    double best_lane_gbps = 0;
    std::string group;
    ReasonState reasons[kReasonCount];
    unsigned reported = 0;  // bit per Reason
    PortHealth health;
  };
  using Key = std::pair<std::string, int>;

  // Advances one reason's state machine; `detail`/`evidence` are kept when raise or hold.
  void update_reason(ReasonState& rs, bool raise, bool hold, int raise_polls, double clear_after_s, uint64_t now,
                     std::string detail, std::map<std::string, double> evidence);

  DetectorOptions opts_;
  const Clock& clock_;
  std::map<Key, PortState> ports_;
  std::vector<LinkEvent> events_;
  uint64_t seq_ = 0;
};

std::string format_rate_text(double gbps, int width, const std::string& speed);

}  // namespace argus::rdma
