// InfiniBand / RoCE sysfs fixtures for argus-sim (--ib-fixture DIR, --degrade).
//
// IbFixture lays out, under DIR, what a GPU node's /sys shows of its RDMA NICs and PCI
// topology, and evolves the port counters with the job's traffic:
//
//   DIR/devices/pci0000:BB/0000:BB:01.0/...            PCI functions (real directories):
//       root port -> PCIe switch up/down ports -> GPUs and NICs, each with vendor, device,
//       class, numa_node, local_cpulist; a NIC holds infiniband/<dev>/ (the class device:
//       board_id, fw_ver, hca_type, node_guid, node_type, device -> ../../../<bdf>,
//       ports/<N>/{state,phys_state,rate,link_layer,lid,...,counters/,counters_ext/,hw_counters/})
//   DIR/class/infiniband/<dev> -> ../../devices/.../<bdf>/infiniband/<dev>     (symlinks)
//   DIR/bus/pci/devices/<bdf> -> ../../../devices/.../<bdf>                     (symlinks)
//   DIR/argus-sim-gpu-map        "INDEX PCI_ADDRESS" per GPU: which PCI function is GPU i
//   DIR/argus-sim-ib-truth.json  the simulator's own record (layout, counters it wrote,
//                                faults it injected and when)
//
// Every file is replaced atomically (written under DIR/.argus-sim-tmp, then renamed), so a
// reader (Argus, node_exporter) never sees a half-written counter.
//
// Traffic: rank i drives GPU i % gpus; its NCCL payload bytes x 2 (a ring all-reduce sends
// about twice the payload) go out and come in on the rail NICs that share its GPU's PCIe
// switch (else its NUMA node), split evenly over their ports. Storage/frontend/management
// ports carry a small constant load. Counters start at values of a node that has been up
// for a while, below 2^53 so that every exporter's float64 is exact.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace argus::sim {

inline constexpr const char *kIbTruthFile = "argus-sim-ib-truth.json";
inline constexpr const char *kIbGpuMapFile = "argus-sim-gpu-map";

struct IbDeviceSpec {
	std::string name;                     // "mlx5_0"
	std::string hca_type;                 // "MT4129"
	std::string board_id;                 // "MT_0000000838"
	std::string fw_ver;                   // "28.39.1002"
	std::string link_layer = "InfiniBand"; // or "Ethernet" (RoCE)
	std::string rate = "400 Gb/sec (4X NDR)";
	int ports = 1;
	int pcie_switch = -1; // the GPU PCIe switch it sits under; -1 = its own root port
	int numa_node = 0;
	int functions = 1;    // PCI functions (2 for a bond of two PFs)
	bool counters_ext = false; // legacy 64-bit counters (mlx4); counters/ data then 32-bit
	bool hw_counters = true;
	std::string pci_device_id = "0x1021";
	std::string role = "rail"; // rail (GPU traffic), storage, frontend, mgmt
};

struct IbLayout {
	std::string name;
	int switches = 4;        // GPU PCIe switches
	int gpus_per_switch = 2;
	std::vector<IbDeviceSpec> devices;

	// 8 GPUs under 4 switches; mlx5_0..mlx5_3 ConnectX-7 NDR rails (one per switch);
	// mlx5_4 a dual-port ConnectX-6 HDR storage HCA; mlx5_bond_0 a RoCE bond (Ethernet,
	// two PCI functions); mlx4_0 an FDR management HCA with counters_ext/ and no hw_counters/.
	static IbLayout standard();
	// `devices` dual-port NDR rails spread over 4 switches (the bench's 8 x 2).
	static IbLayout grid(int devices, int ports);
};

enum class DegradeKind { Errors, Flap, Width, Speed, Congestion, Down, Imbalance };

struct DegradeSpec {
	std::string device;
	int port = 1;
	DegradeKind kind = DegradeKind::Errors;
	double after_s = 3.0; // fixture time from the start
};

// "DEV:PORT:KIND[@SECONDS]", KIND = errors|flap|width|speed|congestion|down|imbalance.
// Returns std::nullopt and sets `error` (one line) when malformed.
std::optional<DegradeSpec> parse_degrade(const std::string &spec, std::string &error);
const char *degrade_kind_name(DegradeKind k);
// The argus_ib_link_degraded reason the fault should produce.
const char *degrade_expected_reason(DegradeKind k);

class IbFixture {
public:
	// Throws std::invalid_argument when a degrade spec names no such device/port, or when
	// a width/speed drop is impossible (a 1X port, an SDR port).
	IbFixture(std::string dir, IbLayout layout, std::vector<DegradeSpec> degrade);

	// Creates the tree. DIR must be empty, absent, or hold an earlier fixture (its
	// class/, devices/, bus/ and argus-sim-* files are replaced). Throws std::runtime_error.
	void lay_out();

	// Advances fixture time by dt_s; rank_bytes[i] = payload bytes rank i moved meanwhile.
	void advance(double dt_s, const std::vector<std::uint64_t> &rank_bytes);

	// Writes every file whose value changed, then the truth file.
	void write();

	int gpu_count() const;
	double elapsed() const { return elapsed_; }
	const std::string &dir() const { return dir_; }
	nlohmann::json truth() const;

private:
	struct Port {
		int num = 1;
		std::string rate;
		std::string state = "4: ACTIVE";
		std::string phys_state = "5: LinkUp";
		std::map<std::string, std::uint64_t> counters; // counters/ (data in 4-byte words, 64-bit)
		std::map<std::string, std::uint64_t> hw;
		std::map<std::string, double> frac;             // fractional increments carried over
		double traffic_factor = 1.0;
		std::map<std::string, std::string> written;     // path -> content last written
		std::string dir;
	};
	struct Device {
		IbDeviceSpec spec;
		std::vector<std::string> pci; // function addresses
		std::string pci_dir;          // devices/... of function 0
		std::vector<Port> ports;
	};
	struct Gpu {
		int index = 0;
		std::string pci;
		int pcie_switch = 0;
		int numa_node = 0;
	};
	struct Injected {
		DegradeSpec spec;
		bool active = false;
		double at_elapsed = 0;
		double at_unix = 0;
		double next_flap = 0;
		int flaps = 0;
	};

	Port *find_port(const std::string &dev, int port);
	void put(const std::string &rel, const std::string &content, std::map<std::string, std::string> *cache);
	void bump(Port &p, const std::string &name, double amount);
	void inject(Injected &inj);
	std::vector<Port *> rails_for_gpu(int gpu);

	std::string dir_;
	IbLayout layout_;
	std::vector<Device> devices_;
	std::vector<Gpu> gpus_;
	std::vector<Injected> injected_;
	double elapsed_ = 0;
	std::uint64_t seq_ = 0;
	bool laid_out_ = false;
};

// Payload bytes rank `rank` of `world` has moved after `colls` completed collectives/groups
// (the count the shim keeps in shared memory), following workload.h's per-step pattern.
class CollectiveBytes {
public:
	CollectiveBytes(int rank, int world) : rank_(rank), world_(world) {}
	std::uint64_t after(std::uint64_t colls);
	// Payload bytes of whole steps [0, steps).
	std::uint64_t after_steps(std::int64_t steps);

private:
	int rank_, world_;
	std::int64_t step_ = 0;
	std::uint64_t units_in_step_ = 0; // barriers done within step_
	std::uint64_t colls_ = 0;
	std::uint64_t bytes_ = 0;
};

// A thread that every `period_ms` asks `cumulative()` for each rank's payload bytes so far,
// advances the fixture by the wall time passed and writes it. stop() does a last update.
class IbFixtureRunner {
public:
	IbFixtureRunner(IbFixture &fixture, std::function<std::vector<std::uint64_t>()> cumulative,
			int period_ms = 200);
	~IbFixtureRunner();
	void start();
	void stop();

private:
	void tick();
	IbFixture &fx_;
	std::function<std::vector<std::uint64_t>()> cumulative_;
	int period_ms_;
	std::vector<std::uint64_t> last_;
	long long last_ns_ = 0;
	std::thread thread_;
	std::mutex mu_;
	std::condition_variable cv_;
	bool stop_ = false;
	bool running_ = false;
};

} // namespace argus::sim
