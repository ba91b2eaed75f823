// LinkHealthDetector on scripted counter series: each reason fires on its own fault, alone,
// within a few polls; healthy busy links never do; hysteresis keeps alerts from flapping.
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rdma/detector.h"
#include "tests/unit/rdma_test_util.h"

namespace argus::rdma {
namespace {

using testutil::ManualClock;

constexpr double kRail = 5e9;  // bytes/s each way: 10% of a 400G link, a busy training rail

struct Rail {
  std::string dev;
  int port = 1;
  double rx = 0, tx = 0, wait = 0;  // running totals (doubles, rounded when observed)
  std::map<std::string, double> errors = {{"symbol_error", 3},
                                          {"link_error_recovery", 0},
                                          {"link_downed", 1},
                                          {"port_rcv_errors", 0},
                                          {"port_xmit_discards", 0}};
  bool up = true;
  int phys = 5;
  double gbps = 400;
  int width = 4;
  std::string speed = "NDR";
  std::string group = "MT4129/InfiniBand";
  bool busy = true;
  double traffic = 1.0;       // share of kRail moved
  double wait_share = 0.002;  // transmit wait as a share of line rate
};

class Script {
 public:
  explicit Script(DetectorOptions o = {}) : det(o, clock) {
    for (int i = 0; i < 4; i++) {
      Rail r;
      r.dev = "mlx5_" + std::to_string(i);
      rails.push_back(r);
    }
  }

  // One second of traffic, then a poll.
  void step(int poll_index) {
    clock.advance(1);
    std::vector<PortObservation> obs;
    for (auto& r : rails) {
      // +-15% jitter that differs per rail and poll, as real traffic does
      const double jitter = 1.0 + 0.15 * (((poll_index * 7 + static_cast<int>(r.dev.back())) % 5) - 2) / 2.0;
      const double moved = r.up ? kRail * r.traffic * jitter : 0;
      r.rx += moved;
      r.tx += moved;
      if (r.up) r.wait += r.wait_share * r.gbps * 125e6 / 8;
      PortObservation o;
      o.device = r.dev;
      o.port = r.port;
      o.group = r.group;
      o.state_known = true;
      o.up = r.up;
      o.phys_state_id = r.phys;
      o.rate_known = true;
      o.rate_gbps = r.gbps;
      o.width = r.width;
      o.lane_gbps = r.gbps / r.width;
      o.rate_text = std::to_string(static_cast<int>(r.gbps)) + " Gb/sec (" + std::to_string(r.width) + "X " + r.speed + ")";
      o.rx_bytes = static_cast<uint64_t>(r.rx);
      o.tx_bytes = static_cast<uint64_t>(r.tx);
      o.has_xmit_wait = true;
      o.xmit_wait = static_cast<uint64_t>(r.wait);
      for (const auto& [k, v] : r.errors) o.errors[k] = static_cast<uint64_t>(v);
      o.expected_busy = r.busy;
      obs.push_back(o);
    }
    det.observe(obs);
    for (auto& e : det.take_events()) events.push_back(e);
  }

  std::set<std::string> reasons(int rail) const {
    const PortHealth* h = det.health(rails[static_cast<std::size_t>(rail)].dev, 1);
    return h ? h->reasons : std::set<std::string>{};
  }
  // Polls until `rail` shows `reason` (at most `max_polls`); returns how many it took, -1 if never.
  int polls_until(int rail, const std::string& reason, int max_polls, int& t) {
    for (int i = 1; i <= max_polls; i++) {
      step(t++);
      if (reasons(rail).count(reason)) return i;
    }
    return -1;
  }
  void expect_only(int rail, const std::string& reason) {
    for (int i = 0; i < static_cast<int>(rails.size()); i++) {
      if (i == rail) {
        EXPECT_EQ(reasons(i), std::set<std::string>{reason}) << rails[static_cast<std::size_t>(i)].dev;
      } else {
        EXPECT_TRUE(reasons(i).empty()) << rails[static_cast<std::size_t>(i)].dev << " has " << *reasons(i).begin();
      }
    }
  }

  ManualClock clock;
  LinkHealthDetector det;
  std::vector<Rail> rails;
  std::vector<LinkEvent> events;
};

TEST(RdmaDetector, HealthyBusyLinksNeverDegrade) {
  Script s;
  s.rails[1].wait_share = 0.02;  // some credit waits: 2% of line rate
  int t = 0;
  for (; t < 900; t++) {
    if (t % 30 == 0) s.rails[3].errors["symbol_error"] += 1;  // a rare symbol error
    if (t % 50 == 0) s.rails[2].errors["port_xmit_discards"] += 3;
    s.step(t);
  }
  EXPECT_TRUE(s.events.empty()) << s.events.front().device << " " << s.events.front().reason << ": "
                                << s.events.front().detail;
  for (int i = 0; i < 4; i++) EXPECT_TRUE(s.reasons(i).empty());
}

TEST(RdmaDetector, ErrorsFireOnErrorRates) {
  Script s;
  int t = 0;
  for (; t < 20; t++) s.step(t);
  int took = -1;
  for (int i = 1; i <= 10 && took < 0; i++) {
    s.rails[2].errors["symbol_error"] += 50;
    s.rails[2].errors["port_rcv_errors"] += 4;
    s.step(t++);
    if (s.reasons(2).count("errors")) took = i;
  }
  ASSERT_GT(took, 0);
  EXPECT_LE(took, 3);
  s.expect_only(2, "errors");
  ASSERT_FALSE(s.events.empty());
  const LinkEvent& ev = s.events.back();
  EXPECT_EQ(ev.device, "mlx5_2");
  EXPECT_EQ(ev.reason, "errors");
  EXPECT_TRUE(ev.raised);
  EXPECT_NE(ev.detail.find("symbol_error"), std::string::npos) << ev.detail;
  EXPECT_GT(ev.evidence.at("symbol_error_per_second"), 1);  // over the 60 s error window

  // The errors stop: they leave the 60 s error window, then the alert holds 30 s more.
  int cleared = -1;
  for (int i = 1; i <= 150 && cleared < 0; i++) {
    s.step(t++);
    if (s.reasons(2).empty()) cleared = i;
  }
  EXPECT_GE(cleared, 60);
  EXPECT_LE(cleared, 100);
  EXPECT_FALSE(s.events.back().raised);
}

TEST(RdmaDetector, SymbolErrorThresholdFollowsTheLinkRate) {
  // 0.2 symbol errors/s: a BER of 5e-13 at 400G (fine), 8e-12 at 25G (not fine: seen once
  // the 60 s error window holds enough errors).
  for (double gbps : {400.0, 25.0}) {
    Script s;
    for (auto& r : s.rails) {
      r.gbps = gbps;
      r.width = gbps == 25 ? 1 : 4;
      r.speed = gbps == 25 ? "EDR" : "NDR";
    }
    int t = 0;
    for (; t < 60; t++) {
      if (t % 5 == 0) s.rails[0].errors["symbol_error"] += 1;
      s.step(t);
    }
    if (gbps == 400) {
      EXPECT_TRUE(s.reasons(0).empty());
    } else {
      EXPECT_EQ(s.reasons(0), std::set<std::string>{"errors"});
    }
  }
}

TEST(RdmaDetector, FlapOnRecoveryOrDownedIncrease) {
  Script s;
  int t = 0;
  for (; t < 20; t++) s.step(t);
  s.rails[1].errors["link_error_recovery"] += 1;
  s.step(t++);
  s.expect_only(1, "flapping");  // at once: the increase is the evidence
  // Held for flap_hold_s (300 s) after the last increase, then cleared.
  for (int i = 0; i < 295; i++) s.step(t++);
  EXPECT_EQ(s.reasons(1), std::set<std::string>{"flapping"});
  s.rails[1].errors["link_downed"] += 1;  // again: the hold restarts
  s.step(t++);
  for (int i = 0; i < 290; i++) s.step(t++);
  EXPECT_EQ(s.reasons(1), std::set<std::string>{"flapping"});
  for (int i = 0; i < 20; i++) s.step(t++);
  EXPECT_TRUE(s.reasons(1).empty());
}

TEST(RdmaDetector, DownIsReportedAloneAndNeedsHistory) {
  Script s;
  int t = 0;
  for (; t < 20; t++) s.step(t);
  s.rails[3].up = false;
  s.rails[3].phys = 2;  // Polling
  s.rails[3].errors["link_downed"] += 1;
  const int took = s.polls_until(3, "down", 5, t);
  EXPECT_EQ(took, 2);
  for (int i = 0; i < 10; i++) s.step(t++);
  s.expect_only(3, "down");  // not flapping, not imbalance: the link is just down

  // A port never up and without traffic (an unused second port) is not "down"; nor a
  // Disabled one.
  Script u;
  u.rails[0].up = false;
  u.rails[0].phys = 2;
  u.rails[0].rx = u.rails[0].tx = 0;
  u.rails[0].busy = false;
  u.rails[1].phys = 3;
  int t2 = 0;
  for (; t2 < 5; t2++) u.step(t2);
  u.rails[1].up = false;  // administratively disabled after being up
  for (; t2 < 20; t2++) u.step(t2);
  EXPECT_TRUE(u.reasons(0).empty());
  EXPECT_TRUE(u.reasons(1).empty());
}

TEST(RdmaDetector, RateAndWidthBelowTheBestSeen) {
  {
    Script s;
    int t = 0;
    for (; t < 20; t++) s.step(t);
    s.rails[0].gbps = 200;  // retrained at HDR
    s.rails[0].speed = "HDR";
    EXPECT_EQ(s.polls_until(0, "rate", 5, t), 2);
    for (int i = 0; i < 10; i++) s.step(t++);
    s.expect_only(0, "rate");
  }
  {
    Script s;
    int t = 0;
    for (; t < 20; t++) s.step(t);
    s.rails[2].gbps = 200;  // 2X NDR
    s.rails[2].width = 2;
    s.rails[2].traffic = 0.3;  // and it carries less: still "width" alone
    EXPECT_EQ(s.polls_until(2, "width", 5, t), 2);
    for (int i = 0; i < 15; i++) s.step(t++);
    s.expect_only(2, "width");
  }
  {
    // A port that comes up narrow, compared with its siblings' best.
    Script s;
    s.rails[1].gbps = 100;
    s.rails[1].width = 1;
    int t = 0;
    for (; t < 5; t++) s.step(t);
    s.expect_only(1, "width");
  }
  {
    // Different HCA types are not siblings: a 200G HDR storage port next to NDR rails is fine.
    Script s;
    s.rails[3].gbps = 200;
    s.rails[3].speed = "HDR";
    s.rails[3].group = "MT4123/InfiniBand";
    s.rails[3].busy = false;
    int t = 0;
    for (; t < 10; t++) s.step(t);
    EXPECT_TRUE(s.reasons(3).empty());
  }
}

TEST(RdmaDetector, CongestionFromTransmitWaitShare) {
  Script s;
  int t = 0;
  for (; t < 20; t++) s.step(t);
  s.rails[1].wait_share = 0.3;
  const int took = s.polls_until(1, "congestion", 10, t);
  EXPECT_GT(took, 0);
  EXPECT_LE(took, 3);
  s.expect_only(1, "congestion");
  EXPECT_GT(s.det.health("mlx5_1", 1)->transmit_wait_share, 0.1);

  // Hysteresis: the share hovering around the threshold does not make the alert flap.
  const std::size_t events = s.events.size();
  for (int i = 0; i < 60; i++) {
    s.rails[1].wait_share = i % 2 ? 0.02 : 0.12;  // window mean ~7%: above the 5% hold
    s.step(t++);
  }
  EXPECT_EQ(s.events.size(), events);
  EXPECT_EQ(s.reasons(1), std::set<std::string>{"congestion"});
}

TEST(RdmaDetector, ImbalanceAgainstTheOtherBusyRails) {
  Script s;
  int t = 0;
  for (; t < 20; t++) s.step(t);
  s.rails[2].traffic = 0.1;
  const int took = s.polls_until(2, "imbalance", 15, t);
  EXPECT_GT(took, 0);
  EXPECT_LE(took, 8);
  s.expect_only(2, "imbalance");

  // Idle rails are not compared (no load, no imbalance); rails that carry no rank neither.
  Script idle;
  for (auto& r : idle.rails) r.traffic = 0.001;  // 5 MB/s: below imbalance_min_bytes_per_s
  idle.rails[0].traffic = 0;
  Script unused;
  unused.rails[0].traffic = 0;
  unused.rails[0].busy = false;  // the caller knows no rank uses it
  int t2 = 0;
  for (; t2 < 30; t2++) {
    idle.step(t2);
    unused.step(t2);
  }
  for (int i = 0; i < 4; i++) {
    EXPECT_TRUE(idle.reasons(i).empty());
    EXPECT_TRUE(unused.reasons(i).empty());
  }
}

TEST(RdmaDetector, ThresholdsAreConfigurable) {
  DetectorOptions o;
  o.congestion_share = 0.01;
  o.congestion_clear_share = 0.005;
  Script s(o);
  int t = 0;
  for (; t < 10; t++) s.step(t);  // 0.2% of line rate: below 1%
  EXPECT_TRUE(s.reasons(0).empty());
  s.rails[0].wait_share = 0.02;
  EXPECT_GT(s.polls_until(0, "congestion", 5, t), 0);
}

}  // namespace
}  // namespace argus::rdma
