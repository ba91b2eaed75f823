// PCI topology under <sysfs-root>/bus/pci/devices: where the GPUs and the NICs sit, and which
// NIC is "next to" which GPU.
//
// Affinity rule (per GPU): the NICs that share a PCIe bridge with it below the root complex
// (a PCIe switch, as on HGX/DGX boards: kind "pcie_switch"); if there is none, the NICs on
// the GPU's NUMA node (kind "numa"); if the NUMA node is unknown, none.
//
// GPU indexes: CUDA numbers GPUs by PCI bus id when CUDA_DEVICE_ORDER=PCI_BUS_ID (and
// nvidia-smi always does); we do the same: NVIDIA (vendor 0x10de) display/3D controllers
// (class 0x0300xx / 0x0302xx) sorted by PCI address. A fixture (argus-sim --ib-fixture) may
// say it explicitly in <sysfs-root>/argus-sim-gpu-map: one "INDEX PCI_ADDRESS" per line, '#'
// starts a comment. That file never exists on a real /sys.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rdma/link_model.h"

namespace argus::rdma {

inline constexpr const char* kGpuMapFile = "argus-sim-gpu-map";

struct PciDevice {
  std::string address;             // "0000:1b:00.0"
  std::vector<std::string> chain;  // BDFs from the root port down to this device (inclusive)
  int numa_node = -1;
  uint32_t class_code = 0;  // 0x030200
  uint32_t vendor = 0;      // 0x10de
};

struct Topology {
  bool available = false;  // bus/pci/devices could be listed
  std::string problem;     // why not (one line)
  std::string gpu_order;   // "argus-sim-gpu-map" or "pci-bus-id"
  std::vector<GpuInfo> gpus;                 // sorted by index
  std::map<std::string, PciDevice> devices;  // address -> device
};

Topology read_topology(const std::string& sysfs_root);

// Where an InfiniBand device sits: the PCI function behind class/infiniband/<dev>/device (or
// the class entry's own resolved path).
struct NicLocation {
  std::string pci_address;  // "" unknown
  std::vector<std::string> chain;
  int numa_node = -1;
};
NicLocation locate_ib_device(const std::string& sysfs_root, const std::string& device, const Topology& topo);

// NIC name -> the GPUs next to it (see the rule above), each list sorted by GPU index.
std::map<std::string, std::vector<GpuAffinity>> gpu_nic_affinity(const Topology& topo,
                                                                  const std::map<std::string, NicLocation>& nics);

// The BDF components of a resolved sysfs path, in order.
std::vector<std::string> bdf_chain(const std::string& path);
bool is_pci_address(const std::string& s);

}  // namespace argus::rdma
