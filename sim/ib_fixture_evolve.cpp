// How the InfiniBand fixture (ib_fixture.h) evolves: each rank's traffic goes onto the rails
// next to its GPU, the other ports carry a background load, and the injected faults
// (--degrade) degrade a port from their time on. Also the payload bytes the ranks have moved
// (CollectiveBytes) and the thread that advances the fixture with them (IbFixtureRunner).
#include "ib_fixture.h"
#include "ib_fixture_detail.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "workload.h"

namespace argus::sim {
namespace {

long long mono_ns()
{
	timespec ts{};
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
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

// Lane Gb/s the kernel counts for a speed name.
double lane_gbps(const std::string &speed)
{
	static const std::map<std::string, double> k = {{"", 2.5},   {"SDR", 2.5}, {"DDR", 5},
							{"QDR", 10},  {"FDR10", 10}, {"FDR", 14},
							{"EDR", 25},  {"HDR", 50},   {"NDR", 100},
							{"XDR", 200}};
	auto it = k.find(speed);
	return it == k.end() ? 0 : it->second;
}

} // namespace

namespace ib_detail {

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

} // namespace ib_detail

using ib_detail::parse_fixture_rate;
using ib_detail::Rate;
using ib_detail::slower_speed;
using ib_detail::wall_now;

// ---------------------------------------------------------------- evolution

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
