// The GPU memory flags of parse_cli (sim_config.cpp): --mem-api, --gpu-mem-mb,
// --mem-leak and --mem-oom, and their lines of the ranks' JSON, kept apart so
// that sim_config.cpp stays one screenful per concern.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sim_config.h"

namespace argus::sim {

// --mem-leak: the most a rank's pool may grow by per step.
inline constexpr std::uint64_t kMaxMemLeakBytes = std::uint64_t{1} << 40;

// The raw text of the flags that parse_cli checks after CLI11 has run.
struct MemoryFlagText {
	std::string api = "classic";
	std::vector<std::string> leaks; // RANK:BYTES
	std::vector<std::string> ooms;  // RANK:STEP
};

void add_memory_flags(CLI::App &app, SimConfig &cfg, MemoryFlagText &text);

// "4096", "64K", "64M", "2G" (binary multiples, either case): bytes; nullopt if
// not a whole number with at most one suffix, or if it overflows.
std::optional<std::uint64_t> parse_byte_size(const std::string &text);

// The memory fields of to_json / config_from_json (config_from_json throws on
// malformed input).
void memory_to_json(const SimConfig &cfg, nlohmann::json &j);
void memory_from_json(const nlohmann::json &j, SimConfig &cfg);

} // namespace argus::sim
