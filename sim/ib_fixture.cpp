// The InfiniBand sysfs fixture's model (ib_fixture.h): its layouts and degrade specs, the
// GPUs, devices and ports built from them with the counters of a node that has been up for
// a while, and the truth file's record of it all. ib_fixture_tree.cpp lays the tree out
// and writes it; ib_fixture_evolve.cpp moves the counters with the traffic and the faults.
#include "ib_fixture.h"
#include "ib_fixture_detail.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <stdexcept>

namespace argus::sim {
namespace {

std::uint64_t mix(std::uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

const std::vector<std::string> kStandardCounters = {
	"excessive_buffer_overrun_errors", "link_downed", "link_error_recovery", "local_link_integrity_errors",
	"multicast_rcv_packets", "multicast_xmit_packets", "port_rcv_constraint_errors", "port_rcv_data",
	"port_rcv_errors", "port_rcv_packets", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
	"port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards", "port_xmit_packets",
	"port_xmit_wait", "symbol_error", "unicast_rcv_packets", "unicast_xmit_packets", "VL15_dropped"};

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

namespace ib_detail {

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

std::uint64_t seed_of(const std::string &s, int port)
{
	std::uint64_t h = 1469598103934665603ULL;
	for (char c : s)
		h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
	return mix(h + static_cast<std::uint64_t>(port));
}

} // namespace ib_detail

using ib_detail::parse_fixture_rate;
using ib_detail::pci_addr;
using ib_detail::Rate;
using ib_detail::seed_of;
using ib_detail::slower_speed;
using ib_detail::wall_now;

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

} // namespace argus::sim
