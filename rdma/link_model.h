// Snapshots of the node's InfiniBand / RoCE links, handed from rdma/ (RdmaMonitor) to the
// exporters (exporters/rdma_metrics.h). Plain values: exporters never see files or locks.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace argus::rdma {

// The reasons of argus_ib_link_degraded{reason}, in the contract's order.
inline constexpr std::array<std::string_view, 7> kDegradeReasons = {
    "errors", "flapping", "down", "rate", "width", "congestion", "imbalance"};

// One GPU found in the PCI topology. `index` is the CUDA index (PCI bus order, or the
// fixture's map: see rdma/topology.h).
struct GpuInfo {
  int index = -1;
  std::string pci_address;  // "0000:1b:00.0"
  int numa_node = -1;       // -1 = unknown
};

// A GPU that sits next to a NIC. kind: "pcie_switch" (they share a PCIe switch / bridge
// below the root complex) or "numa" (no NIC shares a switch with that GPU, but this one is
// on the same NUMA node).
struct GpuAffinity {
  int gpu_index = -1;
  std::string gpu_pci;
  std::string kind;
};

struct DeviceSnapshot {
  std::string name;      // "mlx5_0", "mlx5_bond_0"
  std::string fw_ver;    // "28.39.1002"
  std::string board_id;  // "MT_0000000838"
  std::string hca_type;  // "MT4129" ("" when the driver has none)
  std::string pci_address;  // "" when unknown
  int numa_node = -1;
  std::vector<GpuAffinity> gpus;  // GPUs next to this NIC (see topology.h for the rule)
};

struct PortSnapshot {
  std::string device;
  int port = 0;
  std::string link_layer;  // "InfiniBand", "Ethernet" ("" unknown)

  // State. state_id 4 (ACTIVE) or 5 (ACT_DEFER) = up.
  int state_id = -1;  // -1 = unknown (unreadable)
  std::string state;  // "ACTIVE"
  int phys_state_id = -1;
  std::string phys_state;  // "LinkUp"
  bool up = false;
  std::string attr_source;  // "sysfs" or "verbs": where state and rate came from

  // Rate: `rate_text` as read ("400 Gb/sec (4X NDR)"); rate_bytes_per_second = Gb/s x 125e6
  // (0 when unknown); width = lanes (0 unknown); speed = the lane speed name ("NDR", "" if none).
  std::string rate_text;
  double rate_gbps = 0;
  uint64_t rate_bytes_per_second = 0;
  int width = 0;
  std::string speed;

  // Counters as monotonic totals since the agent first saw the port: they start at the first
  // value read and then grow by each poll's delta, a reset (a counter going backwards, e.g. a
  // driver reload) counting its new value from 0. Equal to the raw sysfs value until a reset.
  uint64_t receive_bytes = 0;   // port_rcv_data (or counters_ext/port_rcv_data_64) x 4
  uint64_t transmit_bytes = 0;  // port_xmit_data x 4
  uint64_t transmit_wait = 0;   // port_xmit_wait ticks
  bool has_receive_bytes = false, has_transmit_bytes = false, has_transmit_wait = false;
  std::map<std::string, uint64_t> errors;       // error counter file name -> total
  std::map<std::string, uint64_t> counters;     // every other counters/ + counters_ext/ file
  std::map<std::string, uint64_t> hw_counters;  // hw_counters/ (driver specific), raw values
  uint64_t counter_resets = 0;                  // resets/wraps seen since start

  // Last window's rates (0 until two polls are in).
  double receive_bytes_per_second = 0;
  double transmit_bytes_per_second = 0;
  double transmit_wait_share = 0;  // share of line rate lost to transmit wait (0..1)
  std::map<std::string, double> error_rates;  // per second, error counters that moved

  // Health: the reasons active now (a subset of kDegradeReasons) and, per reason, a line of
  // evidence for people.
  std::set<std::string> degraded;
  std::map<std::string, std::string> degraded_detail;
};

// A reason that started (raised) or ended (cleared) on a port.
struct LinkEvent {
  uint64_t seq = 0;  // increasing, per monitor
  double time_unix = 0;
  std::string device;
  int port = 0;
  std::string reason;  // one of kDegradeReasons
  bool raised = true;  // false: cleared
  std::string detail;  // the evidence line
  std::map<std::string, double> evidence;  // numbers behind it (rates, widths, ...)
  std::string rate_text;
  std::string link_layer;
};

struct LinkSnapshot {
  double time_unix = 0;
  uint64_t polls = 0;
  bool infiniband_class_present = false;
  bool topology_available = false;
  std::vector<GpuInfo> gpus;  // by index
  std::vector<DeviceSnapshot> devices;  // sorted by name
  std::vector<PortSnapshot> ports;      // sorted by (device, port)
  std::map<std::string, uint64_t> skips;  // reason -> counted skips (see rdma_monitor.h)
  std::vector<LinkEvent> recent_events;   // the newest events (bounded), oldest first
};

// A training rank and the GPU it drives: given by the caller (the rank registry), used to
// map ranks to the NICs next to their GPU. gpu_pci wins over gpu_index when both are set.
struct RankGpu {
  std::string job_id;
  int rank = -1;
  int gpu_index = -1;   // CUDA index on this node (the registry's RankSnapshot::gpu_ref)
  std::string gpu_pci;  // "0000:1b:00.0" when known
};

// A rank whose GPU sits next to a NIC port.
struct RankNic {
  std::string job_id;
  int rank = -1;
  std::string device;
  int port = 0;
  std::string kind;  // "pcie_switch" or "numa"
};

// The NIC ports next to each rank's GPU, from the affinity in `snap` (every port of every
// device whose `gpus` lists the rank's GPU). Ranks whose GPU is unknown map to nothing.
// Sorted by (job_id, rank, device, port).
std::vector<RankNic> rank_nics(const LinkSnapshot& snap, const std::vector<RankGpu>& ranks);

}  // namespace argus::rdma

#include "rdma/link_model_inl.h"
