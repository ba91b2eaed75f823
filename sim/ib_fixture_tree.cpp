// The InfiniBand fixture's sysfs tree (ib_fixture.h): laid out once (PCI functions, the
// class and bus links, the GPU map), then written file by file as values change, each file
// replaced atomically.
#include "ib_fixture.h"
#include "ib_fixture_detail.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace argus::sim {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kU32Max = 0xffffffffULL;

// counters_ext/ name -> the 64-bit value it shows.
const std::vector<std::pair<std::string, std::string>> kExtCounters = {
	{"port_rcv_data_64", "port_rcv_data"},
	{"port_xmit_data_64", "port_xmit_data"},
	{"port_rcv_packets_64", "port_rcv_packets"},
	{"port_xmit_packets_64", "port_xmit_packets"},
	{"port_unicast_rcv_packets", "unicast_rcv_packets"},
	{"port_unicast_xmit_packets", "unicast_xmit_packets"},
	{"port_multicast_rcv_packets", "multicast_rcv_packets"},
	{"port_multicast_xmit_packets", "multicast_xmit_packets"}};

} // namespace

using ib_detail::pci_addr;
using ib_detail::seed_of;

void IbFixture::put(const std::string &rel, const std::string &content, std::map<std::string, std::string> *cache)
{
	if (cache) {
		auto it = cache->find(rel);
		if (it != cache->end() && it->second == content)
			return;
	}
	const std::string tmp = dir_ + "/.argus-sim-tmp/" + std::to_string(++seq_);
	int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
	std::size_t off = 0;
	while (off < content.size()) {
		ssize_t n = ::write(fd, content.data() + off, content.size() - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int e = errno;
			::close(fd);
			::unlink(tmp.c_str());
			throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(e));
		}
		off += static_cast<std::size_t>(n);
	}
	::close(fd);
	const std::string path = dir_ + "/" + rel;
	if (::rename(tmp.c_str(), path.c_str()) != 0) {
		int e = errno;
		::unlink(tmp.c_str());
		throw std::runtime_error("cannot rename into " + path + ": " + std::strerror(e));
	}
	if (cache)
		(*cache)[rel] = content;
}

void IbFixture::lay_out()
{
	std::error_code ec;
	const fs::path root(dir_);
	if (dir_.empty() || fs::equivalent(root, "/", ec) || fs::equivalent(root, "/sys", ec))
		throw std::runtime_error("--ib-fixture: refusing to use " + dir_);
	ec.clear();
	if (fs::exists(root, ec)) {
		if (!fs::is_directory(root, ec))
			throw std::runtime_error("--ib-fixture: " + dir_ + " is not a directory");
		const bool earlier = fs::exists(root / kIbTruthFile, ec);
		if (!earlier && !fs::is_empty(root, ec))
			throw std::runtime_error("--ib-fixture: " + dir_ +
						 " is neither empty nor an earlier fixture: refusing to write there");
		for (const char *sub : {"class", "devices", "bus", ".argus-sim-tmp", kIbGpuMapFile, kIbTruthFile})
			fs::remove_all(root / sub, ec);
	}
	fs::create_directories(root / ".argus-sim-tmp", ec);
	fs::create_directories(root / "class" / "infiniband", ec);
	fs::create_directories(root / "bus" / "pci" / "devices", ec);
	if (ec)
		throw std::runtime_error("--ib-fixture: cannot create " + dir_ + ": " + ec.message());

	auto mkdir = [&](const std::string &rel) {
		std::error_code e;
		fs::create_directories(root / rel, e);
		if (e)
			throw std::runtime_error("cannot create " + (root / rel).string() + ": " + e.message());
	};
	auto link = [&](const std::string &target, const std::string &rel) {
		std::error_code e;
		fs::create_symlink(target, root / rel, e);
		if (e)
			throw std::runtime_error("cannot link " + (root / rel).string() + ": " + e.message());
	};
	auto cpus = [](int numa) { return numa == 0 ? std::string("0-55,112-167") : std::string("56-111,168-223"); };
	auto pci_files = [&](const std::string &rel, const std::string &vendor, const std::string &device,
			     const std::string &cls, int numa) {
		mkdir(rel);
		put(rel + "/vendor", vendor + "\n", nullptr);
		put(rel + "/device", device + "\n", nullptr);
		put(rel + "/class", cls + "\n", nullptr);
		put(rel + "/numa_node", std::to_string(numa) + "\n", nullptr);
		put(rel + "/local_cpulist", cpus(numa) + "\n", nullptr);
	};
	auto bus_link = [&](const std::string &rel, const std::string &bdf) {
		link("../../../" + rel, "bus/pci/devices/" + bdf);
	};

	// PCI tree. switch k: root port R:01.0 -> upstream (R+1):00.0 -> downstream (R+2):0j.0
	// -> endpoint (R+3+j):00.f.
	std::map<std::string, std::string> endpoint_dir; // bdf -> rel dir
	for (int k = 0; k < layout_.switches; k++) {
		const unsigned r = 0x10u + 0x30u * static_cast<unsigned>(k);
		const int numa = k < (layout_.switches + 1) / 2 ? 0 : 1;
		char rc[32];
		std::snprintf(rc, sizeof rc, "pci0000:%02x", r);
		const std::string rp = pci_addr(r, 1, 0), up = pci_addr(r + 1, 0, 0);
		const std::string rp_dir = std::string("devices/") + rc + "/" + rp;
		const std::string up_dir = rp_dir + "/" + up;
		pci_files(rp_dir, "0x8086", "0x352a", "0x060400", numa);
		bus_link(rp_dir, rp);
		pci_files(up_dir, "0x1000", "0xc030", "0x060400", numa);
		bus_link(up_dir, up);
		// Endpoints under this switch: its GPUs, then its NICs (their functions).
		std::vector<std::pair<std::string, int>> eps; // (bdf, kind 0 gpu / 1 nic)
		for (const auto &g : gpus_)
			if (g.pcie_switch == k)
				eps.push_back({g.pci, 0});
		for (const auto &d : devices_)
			if (d.spec.pcie_switch == k)
				for (const auto &f : d.pci)
					eps.push_back({f, 1});
		for (const auto &[bdf, kind] : eps) {
			const unsigned ep_bus = static_cast<unsigned>(std::stoul(bdf.substr(5, 2), nullptr, 16));
			const std::string dn = pci_addr(r + 2, ep_bus - r - 3, 0);
			const std::string dn_dir = up_dir + "/" + dn;
			if (!fs::exists(root / dn_dir)) {
				pci_files(dn_dir, "0x1000", "0xc030", "0x060400", numa);
				bus_link(dn_dir, dn);
			}
			const std::string ep_dir = dn_dir + "/" + bdf;
			if (kind == 0)
				pci_files(ep_dir, "0x10de", "0x2330", "0x030200", numa);
			endpoint_dir[bdf] = ep_dir;
			if (kind == 0)
				bus_link(ep_dir, bdf);
		}
	}
	// NICs (own root port or under a switch).
	for (auto &d : devices_) {
		const IbDeviceSpec &s = d.spec;
		const std::string cls = s.link_layer == "Ethernet" ? "0x020000" : "0x020700";
		std::string parent;
		if (s.pcie_switch < 0 || s.pcie_switch >= layout_.switches) {
			const unsigned bus = static_cast<unsigned>(std::stoul(d.pci[0].substr(5, 2), nullptr, 16));
			const unsigned r = bus - 1;
			char rc[32];
			std::snprintf(rc, sizeof rc, "pci0000:%02x", r);
			const std::string rp = pci_addr(r, 1, 0);
			parent = std::string("devices/") + rc + "/" + rp;
			pci_files(parent, "0x8086", "0x352b", "0x060400", s.numa_node);
			bus_link(parent, rp);
		}
		for (const auto &f : d.pci) {
			std::string fdir = parent.empty() ? endpoint_dir[f] : parent + "/" + f;
			pci_files(fdir, "0x15b3", s.pci_device_id, cls, s.numa_node);
			bus_link(fdir, f);
		}
		d.pci_dir = parent.empty() ? endpoint_dir[d.pci[0]] : parent + "/" + d.pci[0];
		const std::string ib = d.pci_dir + "/infiniband/" + s.name;
		mkdir(ib);
		link("../../../" + d.pci[0], ib + "/device");
		link("../../" + d.pci_dir + "/infiniband/" + s.name, "class/infiniband/" + s.name);
		put(ib + "/board_id", s.board_id + "\n", nullptr);
		put(ib + "/fw_ver", s.fw_ver + "\n", nullptr);
		put(ib + "/hca_type", s.hca_type + "\n", nullptr);
		const std::uint64_t g = seed_of(s.name, 0);
		char guid[40];
		std::snprintf(guid, sizeof guid, "%04llx:%04llx:%04llx:%04llx", 0xb8ceULL, 0xf603ULL,
			      static_cast<unsigned long long>((g >> 16) & 0xffff),
			      static_cast<unsigned long long>(g & 0xffff));
		put(ib + "/node_guid", std::string(guid) + "\n", nullptr);
		put(ib + "/sys_image_guid", std::string(guid) + "\n", nullptr);
		put(ib + "/node_type", "1: CA\n", nullptr);
		for (auto &p : d.ports) {
			p.dir = ib + "/ports/" + std::to_string(p.num);
			mkdir(p.dir + "/counters");
			if (s.counters_ext)
				mkdir(p.dir + "/counters_ext");
			if (s.hw_counters)
				mkdir(p.dir + "/hw_counters");
			put(p.dir + "/link_layer", s.link_layer + "\n", nullptr);
			const bool eth = s.link_layer == "Ethernet";
			char lid[16];
			std::snprintf(lid, sizeof lid, "0x%x", eth ? 0u : static_cast<unsigned>(0x10 + (g % 200) + p.num));
			put(p.dir + "/lid", std::string(lid) + "\n", nullptr);
			put(p.dir + "/sm_lid", eth ? "0x0\n" : "0x1\n", nullptr);
			put(p.dir + "/sm_sl", "0\n", nullptr);
			put(p.dir + "/lid_mask_count", "0\n", nullptr);
			put(p.dir + "/cap_mask", eth ? "0x04010000\n" : "0xa751e84a\n", nullptr);
		}
	}
	// The GPU map.
	std::string map = "# argus-sim: CUDA index -> PCI address (PCI bus order)\n";
	for (const auto &g : gpus_)
		map += std::to_string(g.index) + " " + g.pci + "\n";
	put(kIbGpuMapFile, map, nullptr);
	laid_out_ = true;
	write();
}

void IbFixture::write()
{
	if (!laid_out_)
		return;
	for (auto &d : devices_) {
		for (auto &p : d.ports) {
			put(p.dir + "/state", p.state + "\n", &p.written);
			put(p.dir + "/phys_state", p.phys_state + "\n", &p.written);
			put(p.dir + "/rate", p.rate + "\n", &p.written);
			for (const auto &[name, v] : p.counters) {
				std::uint64_t shown = v;
				if (d.spec.counters_ext && (name == "port_rcv_data" || name == "port_xmit_data" ||
							    name == "port_rcv_packets" || name == "port_xmit_packets"))
					shown = std::min(v, kU32Max); // 32-bit PortCounters saturate
				if (d.spec.counters_ext && (name.rfind("unicast_", 0) == 0 || name.rfind("multicast_", 0) == 0))
					continue; // mlx4 shows these in counters_ext/ only
				put(p.dir + "/counters/" + name, std::to_string(shown) + "\n", &p.written);
			}
			if (d.spec.counters_ext)
				for (const auto &[ext, base] : kExtCounters)
					put(p.dir + "/counters_ext/" + ext, std::to_string(p.counters[base]) + "\n",
					    &p.written);
			for (const auto &[name, v] : p.hw)
				put(p.dir + "/hw_counters/" + name, std::to_string(v) + "\n", &p.written);
		}
	}
	put(kIbTruthFile, truth().dump(1) + "\n", nullptr);
}

} // namespace argus::sim
