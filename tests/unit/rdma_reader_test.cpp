// RdmaMonitor's readers on hand-made sysfs trees: every device and port, units, counters_ext,
// hw_counters, and malformed or partial trees (each problem a counted skip, never a crash).
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "rdma/rdma_monitor.h"
#include "tests/unit/rdma_test_util.h"

namespace argus::rdma {
namespace {

using namespace testutil;

const PortSnapshot* find_port(const LinkSnapshot& s, const std::string& dev, int port) {
  for (const auto& p : s.ports) {
    if (p.device == dev && p.port == port) return &p;
  }
  return nullptr;
}

uint64_t skip_count(const LinkSnapshot& s, const std::string& reason) {
  auto it = s.skips.find(reason);
  return it == s.skips.end() ? 0 : it->second;
}

MonitorOptions fast_options() {
  MonitorOptions o;
  o.rescan_interval_s = 0;  // list directories on every poll
  o.medium_every = 1;
  o.slow_every = 1;
  o.use_verbs = false;
  return o;
}

TEST(RdmaReader, EveryDeviceAndEveryPortNeverAssumingPort1) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  make_port(t.path, "mlx5_0", 1);
  PortSpec p2;
  p2.counters["port_rcv_data"] = "123456789";
  p2.counters["symbol_error"] = "7";
  make_port(t.path, "mlx5_0", 2, p2);
  make_device(t.path, "mlx5_9", "", "MT_1", "1.2.3");  // no hca_type: optional
  PortSpec eth;
  eth.link_layer = "Ethernet";
  eth.rate = "100 Gb/sec (4X EDR)";
  make_port(t.path, "mlx5_9", 2, eth);  // only port 2

  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  LinkSnapshot s = m.snapshot();
  ASSERT_EQ(s.ports.size(), 3u);
  ASSERT_EQ(s.devices.size(), 2u);
  EXPECT_TRUE(s.infiniband_class_present);
  EXPECT_EQ(s.devices[0].name, "mlx5_0");
  EXPECT_EQ(s.devices[0].hca_type, "MT4129");
  EXPECT_EQ(s.devices[0].board_id, "MT_0000000838");
  EXPECT_EQ(s.devices[0].fw_ver, "28.39.1002");
  EXPECT_EQ(s.devices[1].hca_type, "");

  const PortSnapshot* a = find_port(s, "mlx5_0", 2);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->receive_bytes, 123456789ULL * 4);  // 4-byte words -> bytes
  EXPECT_EQ(a->transmit_bytes, 2000u * 4);
  EXPECT_EQ(a->errors.at("symbol_error"), 7u);
  EXPECT_EQ(a->errors.count("port_rcv_packets"), 0u);
  EXPECT_EQ(a->counters.at("port_rcv_packets"), 10u);
  EXPECT_EQ(a->hw_counters.at("lifespan"), 10u);
  EXPECT_TRUE(a->has_transmit_wait);
  EXPECT_TRUE(a->up);
  EXPECT_EQ(a->state, "ACTIVE");
  EXPECT_EQ(a->phys_state_id, 5);
  EXPECT_EQ(a->rate_bytes_per_second, 50'000'000'000ULL);
  EXPECT_EQ(a->width, 4);
  EXPECT_EQ(a->speed, "NDR");
  EXPECT_EQ(a->attr_source, "sysfs");

  const PortSnapshot* e = find_port(s, "mlx5_9", 2);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(find_port(s, "mlx5_9", 1), nullptr);
  EXPECT_EQ(e->link_layer, "Ethernet");
  EXPECT_EQ(e->rate_bytes_per_second, 12'500'000'000ULL);

  // A healthy tree: no skips but the (absent) PCI topology.
  for (const auto& [reason, n] : s.skips) EXPECT_EQ(reason, "topology_missing") << reason << " " << n;
  EXPECT_FALSE(s.topology_available);
}

TEST(RdmaReader, CountersExtWinsOverSaturated32BitCounters) {
  TempDir t;
  make_device(t.path, "mlx4_0", "MT4099");
  PortSpec p;
  p.counters["port_rcv_data"] = "4294967295";  // 32-bit PortCounters saturate
  p.counters["port_xmit_data"] = "4294967295";
  p.counters_ext = {{"port_rcv_data_64", "9000000000"}, {"port_xmit_data_64", "8000000000"},
                    {"port_rcv_packets_64", "77"}};
  p.hw_counters.clear();
  make_port(t.path, "mlx4_0", 1, p);
  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  auto s = m.snapshot();
  const PortSnapshot* port = find_port(s, "mlx4_0", 1);
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->receive_bytes, 9'000'000'000ULL * 4);
  EXPECT_EQ(port->transmit_bytes, 8'000'000'000ULL * 4);
  EXPECT_EQ(port->counters.at("counters_ext/port_rcv_packets_64"), 77u);
  EXPECT_TRUE(port->hw_counters.empty());
}

TEST(RdmaReader, MissingFilesAreCountedSkips) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  make_port(t.path, "mlx5_0", 1);
  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  fs::remove(port_dir(t.path, "mlx5_0", 1) + "/rate");
  fs::remove(port_dir(t.path, "mlx5_0", 1) + "/counters/symbol_error");
  clock.advance(1);
  m.poll();
  clock.advance(1);
  m.poll();
  auto s = m.snapshot();
  EXPECT_GE(skip_count(s, "missing_file"), 2u);
  const PortSnapshot* p = find_port(s, "mlx5_0", 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->rate_bytes_per_second, 0u);  // unknown now
  EXPECT_EQ(p->errors.at("symbol_error"), 0u);  // the last value read is kept
  EXPECT_TRUE(p->up);

  // A device without a ports/ directory, one without fw_ver.
  TempDir t2;
  make_device(t2.path, "mlx5_1");
  fs::remove_all(t2.path + "/class/infiniband/mlx5_1/ports");
  make_device(t2.path, "mlx5_2");
  make_port(t2.path, "mlx5_2", 1);
  fs::remove(t2.path + "/class/infiniband/mlx5_2/fw_ver");
  RdmaMonitor m2(t2.path, fast_options(), clock);
  m2.poll();
  EXPECT_EQ(skip_count(m2.snapshot(), "missing_file"), 2u);
  ASSERT_EQ(m2.snapshot().ports.size(), 1u);
  EXPECT_EQ(m2.snapshot().devices[0].fw_ver, "");
}

TEST(RdmaReader, GarbageInACounterIsACountedSkip) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  PortSpec p;
  p.counters["symbol_error"] = "garbage";
  p.counters["port_rcv_errors"] = "N/A (no PMA)";
  make_port(t.path, "mlx5_0", 1, p);
  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  auto s = m.snapshot();
  EXPECT_EQ(skip_count(s, "bad_counter"), 2u);
  const PortSnapshot* port = find_port(s, "mlx5_0", 1);
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->errors.count("symbol_error"), 0u);  // never had a value
  EXPECT_EQ(port->receive_bytes, 4000u);               // the others are read
  // It comes good: counted from there.
  set_counter(t.path, "mlx5_0", 1, "symbol_error", 3);
  clock.advance(1);
  m.poll();
  EXPECT_EQ(find_port(m.snapshot(), "mlx5_0", 1)->errors.at("symbol_error"), 3u);
  EXPECT_EQ(skip_count(m.snapshot(), "bad_counter"), 3u);  // port_rcv_errors again
}

TEST(RdmaReader, UnknownRateAndBadStateAreCountedSkips) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  PortSpec p;
  p.rate = "fast (4X XYZ)";
  p.state = "ACTIVE";
  make_port(t.path, "mlx5_0", 1, p);
  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  auto s = m.snapshot();
  EXPECT_EQ(skip_count(s, "bad_rate"), 1u);
  EXPECT_EQ(skip_count(s, "bad_state"), 1u);
  const PortSnapshot* port = find_port(s, "mlx5_0", 1);
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->rate_bytes_per_second, 0u);
  EXPECT_EQ(port->rate_text, "fast (4X XYZ)");
  EXPECT_EQ(port->state_id, -1);
  EXPECT_FALSE(port->up);
  EXPECT_TRUE(port->degraded.empty());  // unknown state is not "down"
}

TEST(RdmaReader, PortsThatAppearAndDisappear) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  make_port(t.path, "mlx5_0", 1);
  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  EXPECT_EQ(m.snapshot().ports.size(), 1u);

  make_port(t.path, "mlx5_0", 2);
  make_device(t.path, "mlx5_1");
  make_port(t.path, "mlx5_1", 1);
  clock.advance(1);
  m.poll();
  auto s = m.snapshot();
  EXPECT_EQ(s.ports.size(), 3u);
  EXPECT_EQ(skip_count(s, "port_appeared"), 2u);

  fs::remove_all(port_dir(t.path, "mlx5_0", 2));
  fs::remove_all(t.path + "/class/infiniband/mlx5_1");
  clock.advance(1);
  m.poll();
  s = m.snapshot();
  EXPECT_EQ(s.ports.size(), 1u);
  EXPECT_EQ(skip_count(s, "port_disappeared"), 2u);

  // It comes back (a driver reload) with counters from 0: totals keep growing.
  PortSpec back;
  back.counters["port_rcv_data"] = "5";
  make_device(t.path, "mlx5_1");
  make_port(t.path, "mlx5_1", 1, back);
  clock.advance(1);
  m.poll();
  s = m.snapshot();
  const PortSnapshot* p = find_port(s, "mlx5_1", 1);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->receive_bytes, (1000u + 5u) * 4);
  EXPECT_GE(p->counter_resets, 1u);
}

TEST(RdmaReader, NoInfinibandClassAtAll) {
  TempDir t;
  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  m.poll();
  auto s = m.snapshot();
  EXPECT_FALSE(s.infiniband_class_present);
  EXPECT_TRUE(s.ports.empty());
  EXPECT_EQ(skip_count(s, "no_infiniband_class"), 2u);
  EXPECT_EQ(skip_count(s, "topology_missing"), 1u);  // said once

  // A bad ports/ entry.
  make_device(t.path, "mlx5_0");
  make_port(t.path, "mlx5_0", 1);
  fs::create_directories(t.path + "/class/infiniband/mlx5_0/ports/uplink");
  clock.advance(1);
  m.poll();
  s = m.snapshot();
  EXPECT_TRUE(s.infiniband_class_present);
  EXPECT_EQ(s.ports.size(), 1u);
  EXPECT_GE(skip_count(s, "bad_port_dir"), 1u);
  EXPECT_EQ(skip_count(s, "port_appeared"), 0u);  // the first listing that worked
}

TEST(RdmaReader, CounterResetCountsFromZeroAndWrapsAcross) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  PortSpec p;
  p.counters["port_xmit_wait"] = std::to_string(0xFFFFFFF0ULL);
  make_port(t.path, "mlx5_0", 1, p);
  ManualClock clock;
  RdmaMonitor m(t.path, fast_options(), clock);
  m.poll();
  set_counter(t.path, "mlx5_0", 1, "port_rcv_data", 10);   // 1000 -> 10: a reset
  set_counter(t.path, "mlx5_0", 1, "port_xmit_wait", 0x10);  // a 32-bit wrap
  clock.advance(1);
  m.poll();
  auto s = m.snapshot();
  const PortSnapshot* port = find_port(s, "mlx5_0", 1);
  ASSERT_NE(port, nullptr);
  EXPECT_EQ(port->receive_bytes, (1000u + 10u) * 4);
  EXPECT_EQ(port->transmit_wait, 0xFFFFFFF0ULL + 0x20);
  EXPECT_EQ(port->counter_resets, 3u);  // port_rcv_data (file and bytes) + the wrap
  set_counter(t.path, "mlx5_0", 1, "port_rcv_data", 30);
  clock.advance(1);
  m.poll();
  EXPECT_EQ(find_port(m.snapshot(), "mlx5_0", 1)->receive_bytes, (1000u + 30u) * 4);
}

TEST(RdmaReader, HeldFilesSeeNewValues) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  make_port(t.path, "mlx5_0", 1);
  ManualClock clock;
  MonitorOptions o = fast_options();
  o.file_mode = FileMode::kHold;
  RdmaMonitor m(t.path, o, clock);
  EXPECT_EQ(m.file_mode(), FileMode::kHold);
  m.poll();
  set_counter(t.path, "mlx5_0", 1, "port_rcv_data", 5000);  // rewritten in place (same inode)
  clock.advance(1);
  m.poll();
  EXPECT_EQ(find_port(m.snapshot(), "mlx5_0", 1)->receive_bytes, 5000u * 4);
  // kAuto on a tree that is not sysfs re-opens each time.
  RdmaMonitor a(t.path, fast_options(), clock);
  EXPECT_EQ(a.file_mode(), FileMode::kReopen);
}

TEST(RdmaReader, SlowCountersAreReadEveryNthPoll) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  make_port(t.path, "mlx5_0", 1);
  ManualClock clock;
  MonitorOptions o = fast_options();
  o.medium_every = 2;
  o.slow_every = 3;
  RdmaMonitor m(t.path, o, clock);
  set_counter(t.path, "mlx5_0", 1, "local_link_integrity_errors", 0);
  m.poll();  // poll 1: everything
  set_counter(t.path, "mlx5_0", 1, "port_rcv_packets", 99);
  set_counter(t.path, "mlx5_0", 1, "out_of_buffer", 4, "hw_counters");
  set_counter(t.path, "mlx5_0", 1, "symbol_error", 1);
  set_counter(t.path, "mlx5_0", 1, "local_link_integrity_errors", 2);
  clock.advance(1);
  m.poll();  // poll 2: every-poll counters only
  auto p = *find_port(m.snapshot(), "mlx5_0", 1);
  EXPECT_EQ(p.counters.at("port_rcv_packets"), 10u);
  EXPECT_EQ(p.hw_counters.at("out_of_buffer"), 0u);
  EXPECT_EQ(p.errors.at("local_link_integrity_errors"), 0u);
  EXPECT_EQ(p.errors.at("symbol_error"), 1u);  // read every poll
  EXPECT_EQ(p.receive_bytes, 4000u);
  clock.advance(1);
  m.poll();  // poll 3: medium
  p = *find_port(m.snapshot(), "mlx5_0", 1);
  EXPECT_EQ(p.errors.at("local_link_integrity_errors"), 2u);
  EXPECT_EQ(p.counters.at("port_rcv_packets"), 10u);
  clock.advance(1);
  m.poll();  // poll 4: slow
  p = *find_port(m.snapshot(), "mlx5_0", 1);
  EXPECT_EQ(p.counters.at("port_rcv_packets"), 99u);
  EXPECT_EQ(p.hw_counters.at("out_of_buffer"), 4u);
}

}  // namespace
}  // namespace argus::rdma
