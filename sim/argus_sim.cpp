// argus-sim: the simulated training job (launcher, and each rank in worker mode).
#include <cstdio>
#include <exception>
#include <string_view>

#include "launcher.h"
#include "sim_config.h"
#include "worker.h"

int main(int argc, char **argv)
{
	using namespace argus::sim;
	// Hidden worker mode: `argus-sim --worker` (started by the launcher only).
	if (argc >= 2 && std::string_view(argv[1]) == kWorkerFlag)
		return worker_main();
	try {
		auto cfg = parse_cli(argc, argv);
		if (!cfg)
			return 0; // --help
		return launcher_main(std::move(*cfg));
	} catch (const UsageError &e) {
		std::fprintf(stderr, "argus-sim: error: %s\n", e.what());
		return 2;
	} catch (const std::exception &e) {
		std::fprintf(stderr, "argus-sim: error: %s\n", e.what());
		return 1;
	}
}
