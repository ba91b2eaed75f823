// GPU <-> NIC affinity from <sysfs-root>/bus/pci/devices: a shared PCIe switch, else the same
// NUMA node; GPU indexes by PCI bus id or the fixture's map; the rank's GPU from the env.
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "rdma/rdma_monitor.h"
#include "rdma/topology.h"
#include "tests/unit/rdma_test_util.h"

namespace argus::rdma {
namespace {

using namespace testutil;

// devices/pci0000:RR/<chain...> with files, and bus/pci/devices/<bdf> -> it, for each level.
std::string add_pci(const std::string& root, const std::vector<std::string>& chain, int numa,
                    const std::string& cls, const std::string& vendor) {
  std::string rel = "devices/pci0000:" + chain.front().substr(5, 2);
  for (std::size_t i = 0; i < chain.size(); i++) {
    rel += "/" + chain[i];
    const std::string dir = root + "/" + rel;
    const bool leaf = i + 1 == chain.size();
    write_file(dir + "/class", (leaf ? cls : std::string("0x060400")) + "\n");
    write_file(dir + "/vendor", (leaf ? vendor : std::string("0x1000")) + "\n");
    write_file(dir + "/numa_node", std::to_string(numa) + "\n");
    fs::create_directories(root + "/bus/pci/devices");
    std::error_code ec;
    fs::create_symlink("../../../" + rel, root + "/bus/pci/devices/" + chain[i], ec);
  }
  return root + "/" + rel;
}

void add_nic(const std::string& root, const std::string& dev, const std::string& pci_dir) {
  make_device(root, dev);
  make_port(root, dev, 1);
  fs::create_symlink(pci_dir, root + "/class/infiniband/" + dev + "/device");
}

const DeviceSnapshot* find_dev(const LinkSnapshot& s, const std::string& name) {
  for (const auto& d : s.devices) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

TEST(RdmaAffinity, SharedSwitchElseNumaNode) {
  TempDir t;
  const std::string root = t.path;
  // Switch under root port 10:01.0: GPU 13:00.0 and NIC mlx5_0 15:00.0.
  add_pci(root, {"0000:10:01.0", "0000:11:00.0", "0000:12:00.0", "0000:13:00.0"}, 0, "0x030200", "0x10de");
  const std::string nic0 =
      add_pci(root, {"0000:10:01.0", "0000:11:00.0", "0000:12:02.0", "0000:15:00.0"}, 0, "0x020700", "0x15b3");
  // GPU 41:00.0 alone under its root port (NUMA 1); NIC mlx5_1 alone under another (NUMA 1).
  add_pci(root, {"0000:40:01.0", "0000:41:00.0"}, 1, "0x030000", "0x10de");
  const std::string nic1 = add_pci(root, {"0000:c0:01.0", "0000:c1:00.0"}, 1, "0x020700", "0x15b3");
  // A GPU with an unknown NUMA node and no NIC nearby; and a non-NVIDIA display device.
  add_pci(root, {"0000:80:01.0", "0000:81:00.0"}, -1, "0x030200", "0x10de");
  add_pci(root, {"0000:90:01.0", "0000:91:00.0"}, 0, "0x030000", "0x1a03");
  add_nic(root, "mlx5_0", nic0);
  add_nic(root, "mlx5_1", nic1);

  Topology topo = read_topology(root);
  ASSERT_TRUE(topo.available);
  EXPECT_EQ(topo.gpu_order, "pci-bus-id");
  ASSERT_EQ(topo.gpus.size(), 3u);
  EXPECT_EQ(topo.gpus[0].pci_address, "0000:13:00.0");
  EXPECT_EQ(topo.gpus[1].pci_address, "0000:41:00.0");
  EXPECT_EQ(topo.gpus[2].pci_address, "0000:81:00.0");
  EXPECT_EQ(topo.devices.at("0000:15:00.0").chain,
            (std::vector<std::string>{"0000:10:01.0", "0000:11:00.0", "0000:12:02.0", "0000:15:00.0"}));

  ManualClock clock;
  MonitorOptions o;
  o.use_verbs = false;
  RdmaMonitor m(root, o, clock);
  m.poll();
  LinkSnapshot s = m.snapshot();
  EXPECT_TRUE(s.topology_available);
  ASSERT_EQ(s.gpus.size(), 3u);
  const DeviceSnapshot* d0 = find_dev(s, "mlx5_0");
  const DeviceSnapshot* d1 = find_dev(s, "mlx5_1");
  ASSERT_TRUE(d0 && d1);
  EXPECT_EQ(d0->pci_address, "0000:15:00.0");
  EXPECT_EQ(d0->numa_node, 0);
  ASSERT_EQ(d0->gpus.size(), 1u);
  EXPECT_EQ(d0->gpus[0].gpu_index, 0);
  EXPECT_EQ(d0->gpus[0].kind, "pcie_switch");
  ASSERT_EQ(d1->gpus.size(), 1u);
  EXPECT_EQ(d1->gpus[0].gpu_index, 1);
  EXPECT_EQ(d1->gpus[0].kind, "numa");

  // Ranks -> NIC ports: by GPU index or PCI address; GPU 2 has no NIC next to it.
  std::vector<RankGpu> ranks = {{"job", 0, 0, ""}, {"job", 1, -1, "0000:41:00.0"}, {"job", 2, 2, ""}, {"job", 3, -1, ""}};
  auto rn = rank_nics(s, ranks);
  ASSERT_EQ(rn.size(), 2u);
  EXPECT_EQ(rn[0].rank, 0);
  EXPECT_EQ(rn[0].device, "mlx5_0");
  EXPECT_EQ(rn[0].port, 1);
  EXPECT_EQ(rn[1].rank, 1);
  EXPECT_EQ(rn[1].device, "mlx5_1");
  EXPECT_EQ(rn[1].kind, "numa");
  EXPECT_EQ(s.skips.count("topology_missing"), 0u);
}

TEST(RdmaAffinity, FixtureGpuMapWins) {
  TempDir t;
  add_pci(t.path, {"0000:10:01.0", "0000:13:00.0"}, 0, "0x030200", "0x10de");
  add_pci(t.path, {"0000:20:01.0", "0000:23:00.0"}, 1, "0x030200", "0x10de");
  write_file(t.path + "/" + kGpuMapFile, "# index pci\n0 0000:23:00.0\n1 0000:13:00.0  # swapped\nbogus line\n");
  Topology topo = read_topology(t.path);
  EXPECT_EQ(topo.gpu_order, kGpuMapFile);
  ASSERT_EQ(topo.gpus.size(), 2u);
  EXPECT_EQ(topo.gpus[0].pci_address, "0000:23:00.0");
  EXPECT_EQ(topo.gpus[0].numa_node, 1);
  EXPECT_EQ(topo.gpus[1].pci_address, "0000:13:00.0");
}

TEST(RdmaAffinity, MissingTopologyIsSaidOnceAndPollingGoesOn) {
  TempDir t;
  make_device(t.path, "mlx5_0");
  make_port(t.path, "mlx5_0", 1);
  EXPECT_FALSE(read_topology(t.path).available);
  ManualClock clock;
  MonitorOptions o;
  o.use_verbs = false;
  RdmaMonitor m(t.path, o, clock);
  for (int i = 0; i < 5; i++) {
    m.poll();
    clock.advance(1);
  }
  auto s = m.snapshot();
  EXPECT_FALSE(s.topology_available);
  EXPECT_EQ(s.skips.at("topology_missing"), 1u);
  EXPECT_EQ(s.ports.size(), 1u);
  EXPECT_TRUE(s.devices[0].gpus.empty());
  EXPECT_TRUE(rank_nics(s, {{"job", 0, 0, ""}}).empty());
}

TEST(RdmaAffinity, PciAddresses) {
  EXPECT_TRUE(is_pci_address("0000:1b:00.0"));
  EXPECT_TRUE(is_pci_address("10000:1B:1f.7"));
  EXPECT_FALSE(is_pci_address("pci0000:00"));
  EXPECT_FALSE(is_pci_address("0000:1b:00"));
  EXPECT_FALSE(is_pci_address("0000:1b:00.8"));
  EXPECT_EQ(bdf_chain("/sys/devices/pci0000:10/0000:10:01.0/0000:11:00.0/infiniband/mlx5_0"),
            (std::vector<std::string>{"0000:10:01.0", "0000:11:00.0"}));
}

}  // namespace
}  // namespace argus::rdma
