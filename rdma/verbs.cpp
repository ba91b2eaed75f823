#include "rdma/verbs.h"

#include <map>

#ifdef ARGUS_HAVE_IBVERBS
#include <infiniband/verbs.h>
#endif

namespace argus::rdma {

std::string port_state_name(int state) {
  switch (state) {
    case 0: return "NOP";
    case 1: return "DOWN";
    case 2: return "INIT";
    case 3: return "ARMED";
    case 4: return "ACTIVE";
    case 5: return "ACTIVE_DEFER";
    default: return "UNKNOWN";
  }
}

std::string phys_state_name(int phys_state) {
  switch (phys_state) {
    case 1: return "Sleep";
    case 2: return "Polling";
    case 3: return "Disabled";
    case 4: return "PortConfigurationTraining";
    case 5: return "LinkUp";
    case 6: return "LinkErrorRecovery";
    case 7: return "Phy Test";
    default: return "<unknown>";
  }
}

#ifdef ARGUS_HAVE_IBVERBS

struct VerbsPorts::Impl {
  ibv_device** list = nullptr;
  std::map<std::string, ibv_context*> contexts;
  ~Impl() {
    for (auto& [name, ctx] : contexts) ibv_close_device(ctx);
    if (list) ibv_free_device_list(list);
  }
};

VerbsPorts::VerbsPorts() : impl_(std::make_unique<Impl>()) {}
VerbsPorts::~VerbsPorts() = default;
bool VerbsPorts::compiled() { return true; }

int VerbsPorts::open() {
  if (impl_->list) return static_cast<int>(impl_->contexts.size());
  int n = 0;
  impl_->list = ibv_get_device_list(&n);
  if (!impl_->list) return 0;
  for (int i = 0; i < n; i++) {
    ibv_context* ctx = ibv_open_device(impl_->list[i]);
    if (ctx) impl_->contexts[ibv_get_device_name(impl_->list[i])] = ctx;
  }
  return static_cast<int>(impl_->contexts.size());
}

std::optional<VerbsPortAttr> VerbsPorts::query(const std::string& device, int port) {
  auto it = impl_->contexts.find(device);
  if (it == impl_->contexts.end() || port < 1 || port > 255) return std::nullopt;
  ibv_port_attr attr{};
  if (ibv_query_port(it->second, static_cast<uint8_t>(port), &attr) != 0) return std::nullopt;
  VerbsPortAttr a;
  a.state = static_cast<int>(attr.state);
  a.state_name = port_state_name(a.state);
  a.phys_state = attr.phys_state;
  a.phys_state_name = phys_state_name(a.phys_state);
  switch (attr.active_width) {
    case 1: a.width = 1; break;
    case 2: a.width = 4; break;
    case 4: a.width = 8; break;
    case 8: a.width = 12; break;
    case 16: a.width = 2; break;
    default: a.width = 0;
  }
  switch (attr.active_speed) {
    case 1: a.lane_gbps = 2.5; a.speed = ""; break;
    case 2: a.lane_gbps = 5; a.speed = "DDR"; break;
    case 4: a.lane_gbps = 10; a.speed = "QDR"; break;
    case 8: a.lane_gbps = 10; a.speed = "FDR10"; break;
    case 16: a.lane_gbps = 14; a.speed = "FDR"; break;
    case 32: a.lane_gbps = 25; a.speed = "EDR"; break;
    case 64: a.lane_gbps = 50; a.speed = "HDR"; break;
    case 128: a.lane_gbps = 100; a.speed = "NDR"; break;
    default: a.lane_gbps = 0;
  }
  a.link_layer = attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand";
  return a;
}

#else  // no libibverbs at build time: always the sysfs fallback

struct VerbsPorts::Impl {};
VerbsPorts::VerbsPorts() : impl_(std::make_unique<Impl>()) {}
VerbsPorts::~VerbsPorts() = default;
bool VerbsPorts::compiled() { return false; }
int VerbsPorts::open() { return 0; }
std::optional<VerbsPortAttr> VerbsPorts::query(const std::string&, int) { return std::nullopt; }

#endif

}  // namespace argus::rdma
