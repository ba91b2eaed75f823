#include "rdma/topology.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include "rdma/parse.h"

namespace argus::rdma {

namespace fs = std::filesystem;

namespace {

std::optional<std::string> read_small(const fs::path& p) {
  std::ifstream in(p);
  if (!in) return std::nullopt;
  std::string s;
  std::getline(in, s, '\0');
  return std::string(trim(s));
}

uint32_t parse_hex(const std::optional<std::string>& s) {
  if (!s) return 0;
  std::string_view t = *s;
  if (t.substr(0, 2) == "0x" || t.substr(0, 2) == "0X") t.remove_prefix(2);
  uint32_t v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v, 16);
  return (ec == std::errc() && ptr == t.data() + t.size()) ? v : 0;
}

int parse_int(const std::optional<std::string>& s, int fallback) {
  if (!s) return fallback;
  int v = 0;
  auto [ptr, ec] = std::from_chars(s->data(), s->data() + s->size(), v, 10);
  return (ec == std::errc() && ptr == s->data() + s->size()) ? v : fallback;
}

bool hexdig(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

std::string lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

// Number of bridges (not the devices themselves) two chains share from the root down.
std::size_t shared_bridges(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::size_t n = 0;
  while (n + 1 < a.size() && n + 1 < b.size() && a[n] == b[n]) n++;
  return n;
}

}  // namespace

bool is_pci_address(const std::string& s) {
  // DDDD:BB:DD.F (domain may be longer than 4 digits on some platforms)
  auto c1 = s.find(':');
  if (c1 == std::string::npos || c1 < 4) return false;
  if (s.size() != c1 + 8) return false;
  for (std::size_t i = 0; i < c1; i++) {
    if (!hexdig(s[i])) return false;
  }
  return hexdig(s[c1 + 1]) && hexdig(s[c1 + 2]) && s[c1 + 3] == ':' && hexdig(s[c1 + 4]) && hexdig(s[c1 + 5]) &&
         s[c1 + 6] == '.' && s[c1 + 7] >= '0' && s[c1 + 7] <= '7';
}

std::vector<std::string> bdf_chain(const std::string& path) {
  std::vector<std::string> out;
  for (const auto& part : fs::path(path)) {
    std::string s = part.string();
    if (is_pci_address(s)) out.push_back(lower(s));
  }
  return out;
}

Topology read_topology(const std::string& sysfs_root) {
  Topology t;
  const fs::path dir = fs::path(sysfs_root) / "bus" / "pci" / "devices";
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    t.problem = "cannot list " + dir.string() + ": " + ec.message();
    return t;
  }
  t.available = true;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    std::string name = it->path().filename().string();
    if (!is_pci_address(name)) continue;
    PciDevice d;
    d.address = lower(name);
    fs::path real = fs::canonical(it->path(), ec);
    if (ec) {
      ec.clear();
      real = it->path();
    }
    d.chain = bdf_chain(real.string());
    if (d.chain.empty() || d.chain.back() != d.address) d.chain = {d.address};
    d.numa_node = parse_int(read_small(it->path() / "numa_node"), -1);
    d.class_code = parse_hex(read_small(it->path() / "class"));
    d.vendor = parse_hex(read_small(it->path() / "vendor"));
    t.devices[d.address] = d;
  }

  // GPUs: the fixture's explicit map, else NVIDIA display/3D controllers in bus order.
  std::ifstream map_in(fs::path(sysfs_root) / kGpuMapFile);
  if (map_in) {
    t.gpu_order = kGpuMapFile;
    std::string line;
    while (std::getline(map_in, line)) {
      if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
      std::istringstream ls(line);
      int index = -1;
      std::string pci;
      if (!(ls >> index >> pci) || index < 0 || !is_pci_address(pci)) continue;
      GpuInfo g{index, lower(pci), -1};
      if (auto d = t.devices.find(g.pci_address); d != t.devices.end()) g.numa_node = d->second.numa_node;
      t.gpus.push_back(g);
    }
  } else {
    t.gpu_order = "pci-bus-id";
    for (const auto& [addr, d] : t.devices) {  // std::map: sorted by address
      const uint32_t base = d.class_code >> 8;  // 0x0300 VGA, 0x0302 3D controller
      if (d.vendor == 0x10de && (base == 0x0300 || base == 0x0302)) {
        t.gpus.push_back({static_cast<int>(t.gpus.size()), addr, d.numa_node});
      }
    }
  }
  std::sort(t.gpus.begin(), t.gpus.end(), [](const GpuInfo& a, const GpuInfo& b) { return a.index < b.index; });
  return t;
}

NicLocation locate_ib_device(const std::string& sysfs_root, const std::string& device, const Topology& topo) {
  NicLocation loc;
  const fs::path cls = fs::path(sysfs_root) / "class" / "infiniband" / device;
  std::error_code ec;
  std::vector<std::string> chain;
  fs::path real = fs::canonical(cls / "device", ec);
  if (!ec) chain = bdf_chain(real.string());
  if (chain.empty()) {
    ec.clear();
    real = fs::canonical(cls, ec);
    if (!ec) chain = bdf_chain(real.string());
  }
  if (!chain.empty()) {
    loc.pci_address = chain.back();
    loc.chain = chain;
  }
  if (auto d = topo.devices.find(loc.pci_address); !loc.pci_address.empty() && d != topo.devices.end()) {
    // bus/pci/devices knows it: its chain there is authoritative.
    if (d->second.chain.size() > loc.chain.size()) loc.chain = d->second.chain;
    loc.numa_node = d->second.numa_node;
  } else {
    loc.numa_node = parse_int(read_small(cls / "device" / "numa_node"), -1);
  }
  return loc;
}

std::map<std::string, std::vector<GpuAffinity>> gpu_nic_affinity(const Topology& topo,
                                                                  const std::map<std::string, NicLocation>& nics) {
  std::map<std::string, std::vector<GpuAffinity>> out;
  for (const auto& g : topo.gpus) {
    std::vector<std::string> gchain = {g.pci_address};
    if (auto d = topo.devices.find(g.pci_address); d != topo.devices.end()) gchain = d->second.chain;
    std::vector<std::string> near;
    for (const auto& [nic, loc] : nics) {
      if (!loc.chain.empty() && shared_bridges(gchain, loc.chain) >= 1) near.push_back(nic);
    }
    const char* kind = "pcie_switch";
    if (near.empty() && g.numa_node >= 0) {
      kind = "numa";
      for (const auto& [nic, loc] : nics) {
        if (loc.numa_node == g.numa_node) near.push_back(nic);
      }
    }
    for (const auto& nic : near) out[nic].push_back({g.index, g.pci_address, kind});
  }
  return out;
}


}  // namespace argus::rdma
