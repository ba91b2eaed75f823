// Helpers shared by the rdma/ tests: a manual clock, temp dirs and hand-made sysfs trees.
#pragma once
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/support/manual_clock.h"
#include "tests/support/temp_dir.h"
#include "userspace/common/clock.h"

namespace argus::rdma::testutil {

namespace fs = std::filesystem;

using ManualClock = argus::testing_support::ManualClock;

// The rdma tests build their paths as strings: the shared temp dir, by name.
struct TempDir {
  testing_support::TempDir dir{"rdma-test"};
  std::string path = dir.str();
};

inline void write_file(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::trunc) << content;
}

struct PortSpec {
  std::string state = "4: ACTIVE";
  std::string phys_state = "5: LinkUp";
  std::string rate = "400 Gb/sec (4X NDR)";
  std::string link_layer = "InfiniBand";
  std::map<std::string, std::string> counters = {
      {"port_rcv_data", "1000"},     {"port_xmit_data", "2000"}, {"port_xmit_wait", "0"},
      {"symbol_error", "0"},         {"link_downed", "0"},       {"link_error_recovery", "0"},
      {"port_rcv_errors", "0"},      {"port_xmit_discards", "0"}, {"port_rcv_packets", "10"},
      {"port_xmit_packets", "20"},   {"VL15_dropped", "0"}};
  std::map<std::string, std::string> counters_ext;
  std::map<std::string, std::string> hw_counters = {{"out_of_buffer", "0"}, {"lifespan", "10"}};
};

inline std::string port_dir(const std::string& root, const std::string& dev, int port) {
  return root + "/class/infiniband/" + dev + "/ports/" + std::to_string(port);
}

inline void make_device(const std::string& root, const std::string& dev, const std::string& hca = "MT4129",
                        const std::string& board = "MT_0000000838", const std::string& fw = "28.39.1002") {
  const std::string d = root + "/class/infiniband/" + dev;
  write_file(d + "/board_id", board + "\n");
  write_file(d + "/fw_ver", fw + "\n");
  if (!hca.empty()) write_file(d + "/hca_type", hca + "\n");
  fs::create_directories(d + "/ports");
}

inline void make_port(const std::string& root, const std::string& dev, int port, const PortSpec& s = {}) {
  const std::string p = port_dir(root, dev, port);
  write_file(p + "/state", s.state + "\n");
  write_file(p + "/phys_state", s.phys_state + "\n");
  write_file(p + "/rate", s.rate + "\n");
  write_file(p + "/link_layer", s.link_layer + "\n");
  fs::create_directories(p + "/counters");
  for (const auto& [k, v] : s.counters) write_file(p + "/counters/" + k, v + "\n");
  for (const auto& [k, v] : s.counters_ext) write_file(p + "/counters_ext/" + k, v + "\n");
  for (const auto& [k, v] : s.hw_counters) write_file(p + "/hw_counters/" + k, v + "\n");
}

inline void set_counter(const std::string& root, const std::string& dev, int port, const std::string& name,
                        uint64_t value, const std::string& sub = "counters") {
  write_file(port_dir(root, dev, port) + "/" + sub + "/" + name, std::to_string(value) + "\n");
}

}  // namespace argus::rdma::testutil
