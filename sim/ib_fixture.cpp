#include "ib_fixture.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

#include "workload.h"

namespace argus::sim {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kU32Max = 0xffffffffULL;

std::string pci_addr(unsigned bus, unsigned dev, unsigned fn)
{
	char b[32];
	std::snprintf(b, sizeof b, "0000:%02x:%02x.%x", bus & 0xffu, dev & 0x1fu, fn & 7u);
	return b;
}

double wall_now()
{
	timespec ts{};
	clock_gettime(CLOCK_REALTIME, &ts);
	return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

long long mono_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// "400 Gb/sec (4X NDR)" -> (400, 4, "NDR"); the fixture only parses what it writes.
struct Rate {
	double gbps = 0;
	int width = 0;
	std::string speed;
};

Rate parse_fixture_rate(const std::string &s)
{
	Rate r;
	r.gbps = std::atof(s.c_str());
	auto open = s.find('(');
	if (open != std::string::npos) {
		r.width = std::atoi(s.c_str() + open + 1);
		auto x = s.find('X', open);
		auto close = s.find(')', open);
		if (x != std::string::npos && close != std::string::npos && close > x + 1)
			r.speed = s.substr(x + 2, close - x - 2);
	}
	return r;
}

std::string format_gbps(double g)
{
	char b[32];
	if (std::fabs(g - std::round(g)) < 1e-9)
		std::snprintf(b, sizeof b, "%.0f", g);
	else
		std::snprintf(b, sizeof b, "%g", g);
	return b;
}

std::string format_rate(double gbps, int width, const std::string &speed)
{
	return format_gbps(gbps) + " Gb/sec (" + std::to_string(width) + "X" +
	       (speed.empty() ? "" : " " + speed) + ")";
}

// Lane Gb/s the kernel counts for a speed name, and the one a generation below.
double lane_gbps(const std::string &speed)
{
	static const std::map<std::string, double> k = {{"", 2.5},   {"SDR", 2.5}, {"DDR", 5},
							{"QDR", 10},  {"FDR10", 10}, {"FDR", 14},
							{"EDR", 25},  {"HDR", 50},   {"NDR", 100},
							{"XDR", 200}};
	auto it = k.find(speed);
	return it == k.end() ? 0 : it->second;
}

std::optional<std::string> slower_speed(const std::string &speed)
{
	static const std::map<std::string, std::string> k = {{"XDR", "NDR"}, {"NDR", "HDR"}, {"HDR", "EDR"},
							     {"EDR", "FDR"}, {"FDR", "QDR"}, {"FDR10", "QDR"},
							     {"QDR", "DDR"}, {"DDR", ""}};
	auto it = k.find(speed);
	if (it == k.end())
		return std::nullopt;
	return it->second;
}

std::uint64_t mix(std::uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

std::uint64_t seed_of(const std::string &s, int port)
{
	std::uint64_t h = 1469598103934665603ULL;
	for (char c : s)
		h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
	return mix(h + static_cast<std::uint64_t>(port));
}

const std::vector<std::string> kStandardCounters = {
	"excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_link_integrity_errors",
	"multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_constraint_errors", "port_rcv_data",
	"port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
	"port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_packets",
	"port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets", "VL15_dropped"};

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

const std::vector<std::string> kHwCounters = {
	"duplicate_request",       "implied_nak_seq_err",     "lifespan",
	"local_ack_timeout_err",   "out_of_buffer",           "out_of_sequence",
	"packet_seq_err",          "req_cqe_error",           "req_cqe_flush_error",
	"req_remote_access_errors", "req_remote_invalid_request", "resp_cqe_error",
	"resp_cqe_flush_error",    "resp_local_length_error", "resp_remote_access_errors",
	"rnr_nak_retry_err",       "rx_atomic_requests",      "rx_dct_connect",
	"rx_read_requests",        "rx_write_requests"};
const std::vector<std::string> kRoceHwCounters = {"np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled",
						  "rp_cnp_ignored", "roce_adp_retrans", "roce_slow_restart"};

bool is_error_name(const std::string &n)
{
	return n != "port_rcv_data" && n != "port_xmit_data" && n != "port_xmit_wait" &&
	       n.find("packets") == std::string::npos;
}

} // namespace

// ---------------------------------------------------------------- layouts and specs

IbLayout IbLayout::standard()
{
	IbLayout l;
	l.name = "standard";
	for (int k = 0; k < 4; k++) {
		IbDeviceSpec d;
		d.name = "mlx5_" + std::to_string(k);
		d.hca_type = "MT4129";
		d.board_id = "MT_0000000838";
		d.fw_ver = "28.39.1002";
		d.rate = "400 Gb/sec (4X NDR)";
		d.pcie_switch = k;
		d.numa_node = k < 2 ? 0 : 1;
		d.pci_device_id = "0x1021";
		l.devices.push_back(d);
	}
	IbDeviceSpec storage;
	storage.name = "mlx5_4";
	storage.hca_type = "MT4123";
	storage.board_id = "MT_0000000223";
	storage.fw_ver = "20.38.1002";
	storage.rate = "200 Gb/sec (4X HDR)";
	storage.ports = 2;
	storage.numa_node = 0;
	storage.pci_device_id = "0x101b";
	storage.role = "storage";
	l.devices.push_back(storage);
	IbDeviceSpec bond;
	bond.name = "mlx5_bond_0";
	bond.hca_type = "MT4125";
	bond.board_id = "MT_0000000359";
	bond.fw_ver = "22.38.1002";
	bond.link_layer = "Ethernet";
	bond.rate = "200 Gb/sec (4X HDR)";
	bond.numa_node = 1;
	bond.functions = 2;
	bond.pci_device_id = "0x101d";
	bond.role = "frontend";
	l.devices.push_back(bond);
	IbDeviceSpec mgmt;
	mgmt.name = "mlx4_0";
	mgmt.hca_type = "MT4099";
	mgmt.board_id = "MT_1090120019";
	mgmt.fw_ver = "2.42.5000";
	mgmt.rate = "56 Gb/sec (4X FDR)";
	mgmt.numa_node = 1;
	mgmt.counters_ext = true;
	mgmt.hw_counters = false;
	mgmt.pci_device_id = "0x1007";
	mgmt.role = "mgmt";
	l.devices.push_back(mgmt);
	return l;
}

IbLayout IbLayout::grid(int devices, int ports)
{
	IbLayout l;
	l.name = "grid-" + std::to_string(devices) + "x" + std::to_string(ports);
	for (int i = 0; i < devices; i++) {
		IbDeviceSpec d;
		d.name = "mlx5_" + std::to_string(i);
		d.hca_type = "MT4129";
		d.board_id = "MT_0000000838";
		d.fw_ver = "28.39.1002";
		d.rate = "400 Gb/sec (4X NDR)";
		d.ports = ports;
		d.pcie_switch = i % l.switches;
		d.numa_node = (i % l.switches) < l.switches / 2 ? 0 : 1;
		l.devices.push_back(d);
	}
	return l;
}

const char *degrade_kind_name(DegradeKind k)
{
	switch (k) {
	case DegradeKind::Errors:
		return "errors";
	case DegradeKind::Flap:
		return "flap";
	case DegradeKind::Width:
		return "width";
	case DegradeKind::Speed:
		return "speed";
	case DegradeKind::Congestion:
		return "congestion";
	case DegradeKind::Down:
		return "down";
	case DegradeKind::Imbalance:
		return "imbalance";
	}
	return "?";
}

const char *degrade_expected_reason(DegradeKind k)
{
	switch (k) {
	case DegradeKind::Errors:
		return "errors";
	case DegradeKind::Flap:
		return "flapping";
	case DegradeKind::Width:
		return "width";
	case DegradeKind::Speed:
		return "rate";
	case DegradeKind::Congestion:
		return "congestion";
	case DegradeKind::Down:
		return "down";
	case DegradeKind::Imbalance:
		return "imbalance";
	}
	return "?";
}

std::optional<DegradeSpec> parse_degrade(const std::string &spec, std::string &error)
{
	DegradeSpec d;
	std::string body = spec;
	if (auto at = body.find('@'); at != std::string::npos) {
		std::string t = body.substr(at + 1);
		char *end = nullptr;
		errno = 0;
		double v = std::strtod(t.c_str(), &end);
		if (t.empty() || errno != 0 || end != t.c_str() + t.size() || !std::isfinite(v) || v < 0 ||
		    v > 86400 * 365) {
			error = "--degrade: bad delay '" + t + "' in '" + spec + "' (seconds >= 0)";
			return std::nullopt;
		}
		d.after_s = v;
		body.resize(at);
	}
	auto c2 = body.rfind(':');
	auto c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : body.rfind(':', c2 - 1);
	if (c1 == std::string::npos || c1 == 0) {
		error = "--degrade: expected DEV:PORT:KIND[@SECONDS], got '" + spec + "'";
		return std::nullopt;
	}
	d.device = body.substr(0, c1);
	std::string port = body.substr(c1 + 1, c2 - c1 - 1);
	std::string kind = body.substr(c2 + 1);
	char *end = nullptr;
	long p = std::strtol(port.c_str(), &end, 10);
	if (port.empty() || end != port.c_str() + port.size() || p < 1 || p > 255) {
		error = "--degrade: bad port '" + port + "' in '" + spec + "'";
		return std::nullopt;
	}
	d.port = static_cast<int>(p);
	static const std::map<std::string, DegradeKind> kinds = {
		{"errors", DegradeKind::Errors}, {"flap", DegradeKind::Flap},
		{"width", DegradeKind::Width},   {"speed", DegradeKind::Speed},
		{"congestion", DegradeKind::Congestion}, {"down", DegradeKind::Down},
		{"imbalance", DegradeKind::Imbalance}};
	auto it = kinds.find(kind);
	if (it == kinds.end()) {
		error = "--degrade: unknown KIND '" + kind +
			"' (errors, flap, width, speed, congestion, down, imbalance)";
		return std::nullopt;
	}
	d.kind = it->second;
	return d;
}

// ---------------------------------------------------------------- the fixture

IbFixture::IbFixture(std::string dir, IbLayout layout, std::vector<DegradeSpec> degrade)
	: dir_(std::move(dir)), layout_(std::move(layout))
{
	while (dir_.size() > 1 && dir_.back() == '/')
		dir_.pop_back();

	// GPUs, in PCI order: switch k holds GPUs, then its NICs.
	const int per = std::max(0, layout_.gpus_per_switch);
	for (int k = 0; k < layout_.switches; k++) {
		const unsigned root = 0x10u + 0x30u * static_cast<unsigned>(k);
		for (int g = 0; g < per; g++) {
			Gpu gpu;
			gpu.index = static_cast<int>(gpus_.size());
			gpu.pci = pci_addr(root + 3u + static_cast<unsigned>(g), 0, 0);
			gpu.pcie_switch = k;
			gpu.numa_node = k < (layout_.switches + 1) / 2 ? 0 : 1;
			gpus_.push_back(gpu);
		}
	}
	std::vector<int> on_switch(static_cast<std::size_t>(std::max(1, layout_.switches)), per);
	unsigned own_root = 0xc0u;
	for (const auto &spec : layout_.devices) {
		Device d;
		d.spec = spec;
		if (spec.pcie_switch >= 0 && spec.pcie_switch < layout_.switches) {
			const unsigned root = 0x10u + 0x30u * static_cast<unsigned>(spec.pcie_switch);
			int slot = on_switch[static_cast<std::size_t>(spec.pcie_switch)]++;
			for (int f = 0; f < spec.functions; f++)
				d.pci.push_back(pci_addr(root + 3u + static_cast<unsigned>(slot), 0,
							 static_cast<unsigned>(f)));
		} else {
			for (int f = 0; f < spec.functions; f++)
				d.pci.push_back(pci_addr(own_root + 1u, 0, static_cast<unsigned>(f)));
			own_root += 0x08u;
		}
		for (int p = 1; p <= spec.ports; p++) {
			Port port;
			port.num = p;
			port.rate = spec.rate;
			const std::uint64_t s = seed_of(spec.name, p);
			for (const auto &n : kStandardCounters)
				port.counters[n] = 0;
			// A node up for a while: large data counters, a few old errors (all < 2^53 / 4).
			const std::uint64_t words = 250'000'000'000ULL + (s % 90'000'000'000ULL);
			port.counters["port_rcv_data"] = words;
			port.counters["port_xmit_data"] = words - (s % 1'000'000'007ULL);
			port.counters["port_rcv_packets"] = words / 1024;
			port.counters["port_xmit_packets"] = port.counters["port_xmit_data"] / 1024;
			port.counters["unicast_rcv_packets"] = words / 1024 - 5000;
			port.counters["unicast_xmit_packets"] = port.counters["port_xmit_data"] / 1024 - 4000;
			port.counters["multicast_rcv_packets"] = 5000;
			port.counters["multicast_xmit_packets"] = 4000;
			port.counters["port_xmit_wait"] = (s >> 8) % 500'000'000ULL;
			port.counters["symbol_error"] = (s >> 16) % 13;
			port.counters["link_downed"] = 1;
			port.counters["port_rcv_errors"] = (s >> 24) % 4;
			port.counters["port_xmit_discards"] = (s >> 32) % 40;
			if (spec.hw_counters) {
				for (const auto &n : kHwCounters)
					port.hw[n] = 0;
				if (spec.link_layer == "Ethernet")
					for (const auto &n : kRoceHwCounters)
						port.hw[n] = 0;
				port.hw["lifespan"] = 10;
				port.hw["out_of_sequence"] = (s >> 40) % 50;
				port.hw["rx_write_requests"] = words / 4096;
				port.hw["rx_read_requests"] = words / 65536;
			}
			d.ports.push_back(std::move(port));
		}
		devices_.push_back(std::move(d));
	}

	for (const auto &spec : degrade) {
		Port *p = find_port(spec.device, spec.port);
		if (!p)
			throw std::invalid_argument("--degrade: no port " + spec.device + ":" + std::to_string(spec.port) +
						    " in the fixture");
		Rate r = parse_fixture_rate(p->rate);
		if (spec.kind == DegradeKind::Width && r.width <= 1)
			throw std::invalid_argument("--degrade: " + spec.device + ":" + std::to_string(spec.port) +
						    " is 1X already: no narrower width");
		if (spec.kind == DegradeKind::Speed && !slower_speed(r.speed))
			throw std::invalid_argument("--degrade: " + spec.device + ":" + std::to_string(spec.port) +
						    " has no slower speed than '" + r.speed + "'");
		Injected inj;
		inj.spec = spec;
		injected_.push_back(inj);
	}
}

IbFixture::Port *IbFixture::find_port(const std::string &dev, int port)
{
	for (auto &d : devices_)
		if (d.spec.name == dev)
			for (auto &p : d.ports)
				if (p.num == port)
					return &p;
	return nullptr;
}

int IbFixture::gpu_count() const
{
	return static_cast<int>(gpus_.size());
}

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

std::vector<IbFixture::Port *> IbFixture::rails_for_gpu(int gpu)
{
	std::vector<Port *> out;
	const Gpu &g = gpus_[static_cast<std::size_t>(gpu)];
	for (auto &d : devices_)
		if (d.spec.role == "rail" && d.spec.pcie_switch == g.pcie_switch)
			for (auto &p : d.ports)
				out.push_back(&p);
	if (out.empty())
		for (auto &d : devices_)
			if (d.spec.role == "rail" && d.spec.numa_node == g.numa_node)
				for (auto &p : d.ports)
					out.push_back(&p);
	if (out.empty())
		for (auto &d : devices_)
			if (d.spec.role == "rail")
				for (auto &p : d.ports)
					out.push_back(&p);
	return out;
}

void IbFixture::bump(Port &p, const std::string &name, double amount)
{
	if (amount <= 0)
		return;
	double &f = p.frac[name];
	f += amount;
	const double whole = std::floor(f);
	f -= whole;
	auto add = static_cast<std::uint64_t>(whole);
	auto hw = p.hw.find(name);
	if (hw != p.hw.end())
		hw->second += add;
	else
		p.counters[name] += add;
}

void IbFixture::inject(Injected &inj)
{
	Port *p = find_port(inj.spec.device, inj.spec.port);
	if (!p)
		return;
	inj.active = true;
	inj.at_elapsed = elapsed_;
	inj.at_unix = wall_now();
	inj.next_flap = elapsed_;
	Rate r = parse_fixture_rate(p->rate);
	switch (inj.spec.kind) {
	case DegradeKind::Width: {
		const int w = r.width >= 4 ? r.width / 2 : 1;
		p->rate = format_rate(lane_gbps(r.speed) * w, w, r.speed);
		break;
	}
	case DegradeKind::Speed: {
		const std::string slower = slower_speed(r.speed).value_or(r.speed);
		p->rate = format_rate(lane_gbps(slower) * r.width, r.width, slower);
		break;
	}
	case DegradeKind::Down:
		p->state = "1: DOWN";
		p->phys_state = "2: Polling";
		p->counters["link_downed"] += 1;
		p->traffic_factor = 0;
		break;
	case DegradeKind::Imbalance:
		p->traffic_factor = 0.1;
		break;
	default:
		break;
	}
}

void IbFixture::advance(double dt_s, const std::vector<std::uint64_t> &rank_bytes)
{
	if (dt_s < 0)
		dt_s = 0;
	elapsed_ += dt_s;
	for (auto &inj : injected_)
		if (!inj.active && elapsed_ >= inj.spec.after_s)
			inject(inj);

	// Rank traffic onto the rails next to each rank's GPU.
	std::map<Port *, double> tx, rx;
	if (!gpus_.empty()) {
		for (std::size_t r = 0; r < rank_bytes.size(); r++) {
			auto rails = rails_for_gpu(static_cast<int>(r % gpus_.size()));
			if (rails.empty())
				continue;
			const double share = 2.0 * static_cast<double>(rank_bytes[r]) / static_cast<double>(rails.size());
			for (Port *p : rails) {
				tx[p] += share;
				rx[p] += share;
			}
		}
	}
	// What a slowed or dead rail does not carry goes over the healthy ones (PXN).
	double moved = 0;
	std::vector<Port *> healthy;
	for (auto &d : devices_)
		for (auto &p : d.ports)
			if (d.spec.role == "rail") {
				if (p.traffic_factor < 1) {
					moved += tx[&p] * (1 - p.traffic_factor);
					tx[&p] *= p.traffic_factor;
					rx[&p] *= p.traffic_factor;
				} else {
					healthy.push_back(&p);
				}
			}
	for (Port *p : healthy) {
		tx[p] += moved / static_cast<double>(healthy.size());
		rx[p] += moved / static_cast<double>(healthy.size());
	}
	// Background load of the other roles.
	for (auto &d : devices_) {
		double in = 0, out = 0;
		if (d.spec.role == "storage") {
			in = 200e6;
			out = 20e6;
		} else if (d.spec.role == "frontend") {
			in = out = 50e6;
		} else if (d.spec.role == "mgmt") {
			in = out = 1e6;
		}
		for (auto &p : d.ports) {
			tx[&p] += out * dt_s * p.traffic_factor;
			rx[&p] += in * dt_s * p.traffic_factor;
		}
	}

	for (std::size_t di = 0; di < devices_.size(); di++) {
		Device &d = devices_[di];
		for (auto &p : d.ports) {
			const double t = tx[&p], r = rx[&p];
			const double line = parse_fixture_rate(p.rate).gbps * 125e6;
			bump(p, "port_xmit_data", t / 4);
			bump(p, "port_rcv_data", r / 4);
			bump(p, "port_xmit_packets", t / 4096);
			bump(p, "port_rcv_packets", r / 4096);
			bump(p, "unicast_xmit_packets", t / 4096);
			bump(p, "unicast_rcv_packets", r / 4096);
			if (t > 0) {
				bump(p, "multicast_xmit_packets", dt_s);
				bump(p, "port_xmit_wait", 0.002 * dt_s * line / 8); // healthy: 0.2% of line rate
			}
			if (r > 0)
				bump(p, "multicast_rcv_packets", dt_s);
			if (!p.hw.empty() && r > 0) {
				bump(p, "rx_write_requests", r / 65536);
				bump(p, "rx_read_requests", r / 1048576);
			}
		}
	}
	// A healthy link with a rare symbol error (one per 40 s): never "degraded".
	for (auto &d : devices_)
		if (d.spec.role == "rail" && d.spec.name == "mlx5_1")
			bump(d.ports[0], "symbol_error", dt_s / 40);

	// Active faults.
	for (auto &inj : injected_) {
		if (!inj.active)
			continue;
		Port *p = find_port(inj.spec.device, inj.spec.port);
		if (!p)
			continue;
		const double line = parse_fixture_rate(p->rate).gbps * 125e6;
		switch (inj.spec.kind) {
		case DegradeKind::Errors:
			bump(*p, "symbol_error", 200 * dt_s);
			bump(*p, "port_rcv_errors", 20 * dt_s);
			break;
		case DegradeKind::Flap:
			while (elapsed_ >= inj.next_flap) {
				p->counters["link_error_recovery"] += 1;
				if (++inj.flaps % 3 == 0)
					p->counters["link_downed"] += 1;
				inj.next_flap += 2.0;
			}
			break;
		case DegradeKind::Congestion:
			bump(*p, "port_xmit_wait", 0.3 * dt_s * line / 8); // 30% of line rate lost
			break;
		default:
			break;
		}
	}
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

nlohmann::json IbFixture::truth() const
{
	nlohmann::json devs = nlohmann::json::array();
	for (const auto &d : devices_) {
		nlohmann::json ports = nlohmann::json::array();
		for (const auto &p : d.ports) {
			auto c = [&](const char *n) { return p.counters.at(n); };
			nlohmann::json errors = nlohmann::json::object();
			for (const auto &[name, v] : p.counters)
				if (is_error_name(name))
					errors[name] = v;
			ports.push_back({{"port", p.num},
					 {"rate", p.rate},
					 {"state", p.state},
					 {"phys_state", p.phys_state},
					 {"receive_bytes", c("port_rcv_data") * 4},
					 {"transmit_bytes", c("port_xmit_data") * 4},
					 {"transmit_wait", c("port_xmit_wait")},
					 {"errors", errors},
					 {"counters", p.counters},
					 {"hw_counters", p.hw.empty() ? nlohmann::json::object() : nlohmann::json(p.hw)}});
		}
		devs.push_back({{"name", d.spec.name},
				{"hca_type", d.spec.hca_type},
				{"board_id", d.spec.board_id},
				{"fw_ver", d.spec.fw_ver},
				{"link_layer", d.spec.link_layer},
				{"role", d.spec.role},
				{"pci", d.pci},
				{"numa_node", d.spec.numa_node},
				{"pcie_switch", d.spec.pcie_switch},
				{"counters_ext", d.spec.counters_ext},
				{"hw_counters", d.spec.hw_counters},
				{"ports", ports}});
	}
	nlohmann::json gpus = nlohmann::json::array();
	for (const auto &g : gpus_) {
		nlohmann::json near = nlohmann::json::array();
		for (const auto &d : devices_)
			if (d.spec.role == "rail" && d.spec.pcie_switch == g.pcie_switch)
				near.push_back(d.spec.name);
		gpus.push_back({{"index", g.index},
				{"pci", g.pci},
				{"numa_node", g.numa_node},
				{"pcie_switch", g.pcie_switch},
				{"rails", near}});
	}
	nlohmann::json inj = nlohmann::json::array();
	for (const auto &i : injected_)
		inj.push_back({{"device", i.spec.device},
			       {"port", i.spec.port},
			       {"kind", degrade_kind_name(i.spec.kind)},
			       {"expected_reason", degrade_expected_reason(i.spec.kind)},
			       {"after_s", i.spec.after_s},
			       {"injected", i.active},
			       {"injected_at_elapsed_s", i.active ? nlohmann::json(i.at_elapsed) : nlohmann::json()},
			       {"injected_at_unix", i.active ? nlohmann::json(i.at_unix) : nlohmann::json()},
			       {"flaps", i.flaps}});
	return {{"version", 1},
		{"layout", layout_.name},
		{"dir", dir_},
		{"elapsed_s", elapsed_},
		{"updated_unix", wall_now()},
		{"gpu_map", kIbGpuMapFile},
		{"devices", devs},
		{"gpus", gpus},
		{"degrade", inj}};
}

// ---------------------------------------------------------------- traffic

namespace {

// A step's barriers (each non-grouped call, and the group as one), with their payload bytes.
std::vector<std::uint64_t> step_units(std::int64_t step, int rank, int world)
{
	std::vector<std::uint64_t> units;
	std::uint64_t group = 0;
	bool in_group = false;
	for (const NcclCall &c : step_nccl_calls(step, rank, world)) {
		if (c.grouped) {
			group += c.bytes();
			in_group = true;
		} else {
			units.push_back(c.bytes());
		}
	}
	if (in_group)
		units.push_back(group);
	return units;
}

} // namespace

std::uint64_t CollectiveBytes::after(std::uint64_t colls)
{
	while (colls_ < colls) {
		auto units = step_units(step_, rank_, world_);
		if (units_in_step_ >= units.size()) {
			step_++;
			units_in_step_ = 0;
			continue;
		}
		bytes_ += units[units_in_step_++];
		colls_++;
		if (units_in_step_ >= units.size()) {
			step_++;
			units_in_step_ = 0;
		}
	}
	return bytes_;
}

std::uint64_t CollectiveBytes::after_steps(std::int64_t steps)
{
	while (step_ < steps) {
		auto units = step_units(step_, rank_, world_);
		while (units_in_step_ < units.size()) {
			bytes_ += units[units_in_step_++];
			colls_++;
		}
		step_++;
		units_in_step_ = 0;
	}
	return bytes_;
}

// ---------------------------------------------------------------- runner

IbFixtureRunner::IbFixtureRunner(IbFixture &fixture, std::function<std::vector<std::uint64_t>()> cumulative,
				 int period_ms)
	: fx_(fixture), cumulative_(std::move(cumulative)), period_ms_(std::max(10, period_ms))
{
}

IbFixtureRunner::~IbFixtureRunner()
{
	stop();
}

void IbFixtureRunner::tick()
{
	const long long now = mono_ns();
	std::vector<std::uint64_t> cum = cumulative_();
	std::vector<std::uint64_t> delta(cum.size(), 0);
	for (std::size_t i = 0; i < cum.size(); i++) {
		const std::uint64_t prev = i < last_.size() ? last_[i] : 0;
		delta[i] = cum[i] >= prev ? cum[i] - prev : 0;
	}
	last_ = cum;
	const double dt = last_ns_ ? static_cast<double>(now - last_ns_) / 1e9 : 0;
	last_ns_ = now;
	try {
		fx_.advance(dt, delta);
		fx_.write();
	} catch (const std::exception &e) {
		static std::atomic<bool> warned{false};
		if (!warned.exchange(true))
			std::fprintf(stderr, "argus-sim: ib fixture: %s\n", e.what());
	}
}

void IbFixtureRunner::start()
{
	if (running_)
		return;
	running_ = true;
	stop_ = false;
	last_ = cumulative_();
	last_ns_ = mono_ns();
	thread_ = std::thread([this] {
		std::unique_lock<std::mutex> lock(mu_);
		while (!stop_) {
			cv_.wait_for(lock, std::chrono::milliseconds(period_ms_), [this] { return stop_; });
			if (stop_)
				break;
			lock.unlock();
			tick();
			lock.lock();
		}
	});
}

void IbFixtureRunner::stop()
{
	if (!running_)
		return;
	{
		std::lock_guard<std::mutex> lock(mu_);
		stop_ = true;
	}
	cv_.notify_all();
	if (thread_.joinable())
		thread_.join();
	running_ = false;
	tick(); // the final counters
}

} // namespace argus::sim
