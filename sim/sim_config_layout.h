// The framework-layout flags of parse_cli (sim_config.cpp): --tp, --ep, --accum,
// --layers, --jitter, --eval-every and --checkpoint, kept apart so that
// sim_config.cpp stays one screenful per concern.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "sim_config.h"

namespace argus::sim {

// The raw text of the flags that parse_cli checks after CLI11 has run.
struct LayoutFlagText {
	std::string eval_every;
	std::vector<std::string> checkpoints;
};

void add_layout_flags(CLI::App &app, SimConfig &cfg, LayoutFlagText &text);
// Throws UsageError (one line) on a bad value or a layout that does not divide.
void check_layout_flags(const CLI::App &app, const LayoutFlagText &text, SimConfig &cfg);

} // namespace argus::sim
