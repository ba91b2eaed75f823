// Private to the InfiniBand sysfs fixture (ib_fixture*.cpp, see ib_fixture.h): the helpers
// its files share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace argus::sim::ib_detail {

// "0000:BB:DD.F" (bus, device and function masked to their widths).
std::string pci_addr(unsigned bus, unsigned dev, unsigned fn);
// CLOCK_REALTIME in unix seconds: when a fault was injected, when the truth was updated.
double wall_now();
// A fixed pseudo-random value per device name and port: the starting counters, GUIDs, LIDs.
std::uint64_t seed_of(const std::string &s, int port);

// "400 Gb/sec (4X NDR)" -> (400, 4, "NDR"); the fixture only parses what it writes.
struct Rate {
	double gbps = 0;
	int width = 0;
	std::string speed;
};
Rate parse_fixture_rate(const std::string &s);
// The speed name a generation below `speed` ("" below DDR), or std::nullopt when none is known.
std::optional<std::string> slower_speed(const std::string &speed);

} // namespace argus::sim::ib_detail
