#include "sim_config_memory.h"

#include <cctype>
#include <stdexcept>

namespace argus::sim {

const char *mem_api_name(MemApi api)
{
	switch (api) {
	case MemApi::Classic:
		return "classic";
	case MemApi::Async:
		return "async";
	case MemApi::Vmm:
		return "vmm";
	}
	return "classic";
}

std::optional<MemApi> mem_api_from_name(const std::string &name)
{
	for (MemApi api : {MemApi::Classic, MemApi::Async, MemApi::Vmm})
		if (name == mem_api_name(api))
			return api;
	return std::nullopt;
}

std::optional<std::uint64_t> parse_byte_size(const std::string &text)
{
	std::size_t digits = 0;
	while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
		digits++;
	if (digits == 0 || digits > 19 || text.size() - digits > 1)
		return std::nullopt;
	const std::uint64_t n = std::stoull(text.substr(0, digits));
	unsigned shift = 0;
	if (digits < text.size()) {
		switch (std::toupper(static_cast<unsigned char>(text.back()))) {
		case 'K':
			shift = 10;
			break;
		case 'M':
			shift = 20;
			break;
		case 'G':
			shift = 30;
			break;
		default:
			return std::nullopt;
		}
	}
	if (shift && n > (~std::uint64_t{0} >> shift))
		return std::nullopt;
	return n << shift;
}

void add_memory_flags(CLI::App &app, SimConfig &cfg, MemoryFlagText &text)
{
	app.add_option("--mem-api", text.api,
		       "classic|async|vmm: the driver calls each rank's caching allocator grows and "
		       "shrinks its pool by: cuMemAlloc_v2/cuMemFree_v2 (classic, default), "
		       "cuMemAllocFromPoolAsync/cuMemFreeAsync (async: PyTorch's cudaMallocAsync backend) "
		       "or one cuMemAddressReserve, then cuMemCreate + cuMemMap + cuMemSetAccess per 20 MiB "
		       "page and cuMemUnmap + cuMemRelease (vmm: PyTorch's expandable segments)")
		->check(CLI::IsMember({"classic", "async", "vmm"}));
	app.add_option("--gpu-mem-mb", cfg.gpu_mem_mb,
		       "the emulated GPU's memory capacity in MiB (" + std::to_string(kMinGpuMemMb) + ".." +
			       std::to_string(kMaxGpuMemMb) + ", default " + std::to_string(kDefaultGpuMemMb) + ")")
		->check(CLI::Range(kMinGpuMemMb, kMaxGpuMemMb));
	app.add_option("--mem-leak", text.leaks,
		       "RANK:BYTES (suffix K, M or G): from step 0 that rank's pool grows by BYTES (rounded "
		       "up to 2 MiB) every step, never freed, as a tensor kept in a list; once it no longer "
		       "fits the rank runs out of memory as --mem-oom does (repeatable, one per rank)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
	app.add_option("--mem-oom", text.ooms,
		       "RANK:STEP: at step STEP that rank asks for more memory than fits, gets "
		       "CUDA_ERROR_OUT_OF_MEMORY, releases its cached segments, retries once, fails again "
		       "and exits with status 1; its peers wait for it, as with --exit (repeatable, one per "
		       "rank)")
		->expected(1)
		->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void memory_to_json(const SimConfig &cfg, nlohmann::json &j)
{
	nlohmann::json leaks = nlohmann::json::array();
	for (const auto &[rank, bytes] : cfg.mem_leaks)
		leaks.push_back({{"rank", rank}, {"bytes", bytes}});
	nlohmann::json ooms = nlohmann::json::array();
	for (const auto &[rank, step] : cfg.mem_ooms)
		ooms.push_back({{"rank", rank}, {"step", step}});
	j["mem_api"] = mem_api_name(cfg.mem_api);
	j["gpu_mem_mb"] = cfg.gpu_mem_mb;
	j["mem_leaks"] = std::move(leaks);
	j["mem_ooms"] = std::move(ooms);
}

void memory_from_json(const nlohmann::json &j, SimConfig &cfg)
{
	auto api = mem_api_from_name(j.value("mem_api", std::string("classic")));
	if (!api)
		throw std::runtime_error("mem_api must be classic, async or vmm");
	cfg.mem_api = *api;
	cfg.gpu_mem_mb = j.value("gpu_mem_mb", kDefaultGpuMemMb);
	if (cfg.gpu_mem_mb < kMinGpuMemMb || cfg.gpu_mem_mb > kMaxGpuMemMb)
		throw std::runtime_error("gpu_mem_mb out of range");
	for (const auto &l : j.value("mem_leaks", nlohmann::json::array()))
		cfg.mem_leaks[l.at("rank").get<int>()] = l.at("bytes").get<std::uint64_t>();
	for (const auto &o : j.value("mem_ooms", nlohmann::json::array()))
		cfg.mem_ooms[o.at("rank").get<int>()] = o.at("step").get<std::int64_t>();
}

} // namespace argus::sim
