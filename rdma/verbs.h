// Port attributes from libibverbs (ibv_get_device_list / ibv_query_port), where the build
// found libibverbs and the node has RDMA devices. RdmaMonitor uses it only when its sysfs root
// is the real /sys; everything else (and every counter) comes from sysfs.
#pragma once
#include <memory>
#include <optional>
#include <string>

namespace argus::rdma {

struct VerbsPortAttr {
  int state = -1;       // enum ibv_port_state: 4 = ACTIVE
  std::string state_name;
  int phys_state = -1;  // 5 = LinkUp
  std::string phys_state_name;
  int width = 0;         // lanes
  double lane_gbps = 0;  // nominal, as the kernel's sysfs `rate` counts it
  std::string speed;     // "NDR", ... ("" for SDR)
  std::string link_layer;  // "InfiniBand" / "Ethernet"
};

class VerbsPorts {
 public:
  VerbsPorts();
  ~VerbsPorts();
  VerbsPorts(const VerbsPorts&) = delete;
  VerbsPorts& operator=(const VerbsPorts&) = delete;

  static bool compiled();  // built with libibverbs
  // Opens every device libibverbs lists. Returns how many opened (0: none, or not compiled).
  int open();
  std::optional<VerbsPortAttr> query(const std::string& device, int port);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Kernel names of the ibv/IB port states (as sysfs prints them).
std::string port_state_name(int state);
std::string phys_state_name(int phys_state);

}  // namespace argus::rdma
