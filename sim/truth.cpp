#include "truth.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <unistd.h>

namespace argus::sim {

void GpuMemoryTruth::count(MemOp op, const std::string &label, std::uint64_t bytes)
{
	auto &c = (op == MemOp::Alloc ? allocations : op == MemOp::Free ? frees : maps)[label];
	c.calls++;
	c.bytes += bytes;
	if (op == MemOp::Alloc) {
		held += bytes;
		peak = std::max(peak, held);
	} else if (op == MemOp::Free) {
		held -= std::min(bytes, held);
	}
}

nlohmann::json GpuMemoryTruth::to_json() const
{
	auto counts = [](const std::map<std::string, OpCount> &m) {
		nlohmann::json o = nlohmann::json::object();
		for (const auto &[label, c] : m)
			o[label] = {{"calls", c.calls}, {"bytes", c.bytes}};
		return o;
	};
	nlohmann::json j = {
		{"api", api},
		{"allocations", counts(allocations)},
		{"frees", counts(frees)},
		{"maps", counts(maps)},
		{"failures", failures.empty() ? nlohmann::json::object() : nlohmann::json(failures)},
		{"held_bytes_before_teardown", held_before_teardown.value_or(held)},
		{"peak_bytes", peak},
		{"total_bytes", total},
	};
	if (!oom.is_null())
		j["oom"] = oom;
	return j;
}

nlohmann::json Truth::to_json() const
{
	nlohmann::json j;
	j["job_id"] = job_id;
	j["rank"] = rank;
	j["pid"] = pid;
	j["local_rank"] = local_rank;
	j["world_size"] = world_size;
	j["local_world_size"] = local_world_size;
	j["node"] = node;
	j["steps_completed"] = steps_completed;
	j["status"] = status;
	j["faults"] = faults;
	j["nccl_mode"] = nccl_mode;
	j["host_cpu"] = host_cpu;
	j["host_cpu_seconds"] = static_cast<double>(host_cpu_burnt_ns) / 1e9;
	nlohmann::json colls = nlohmann::json::array();
	for (const auto &c : collectives)
		colls.push_back({c.seq, c.call_ns, c.gpu_start_ns, c.gpu_end_ns});
	j["collectives"] = std::move(colls);
	nlohmann::json ops = nlohmann::json::object();
	for (const auto &[op, c] : nccl)
		ops[op] = {{"calls", c.calls}, {"bytes", c.bytes}};
	j["nccl"] = ops;
	j["nccl_errors"] = nccl_errors.empty() ? nlohmann::json::object() : nlohmann::json(nccl_errors);
	j["nccl_group"] = {{"start", group_start},
			   {"end", group_end},
			   {"end_seconds", static_cast<double>(group_end_ns) / 1e9}};
	j["nccl_init"] = nccl_init;
	j["nccl_split"] = nccl_split;
	if (!layout.is_null())
		j["layout"] = layout;
	j["communicators"] = communicators;
	j["p2p"] = p2p;
	if (!jitter.is_null())
		j["jitter"] = jitter;
	j["pauses"] = pauses;
	nlohmann::json cuda;
	cuda["kernel_launches"] = kernel_launches;
	cuda["sync"] = sync.empty() ? nlohmann::json::object() : nlohmann::json(sync);
	cuda["errors"] = cuda_errors.empty() ? nlohmann::json::object() : nlohmann::json(cuda_errors);
	cuda["calls"] = cuda_calls.empty() ? nlohmann::json::object() : nlohmann::json(cuda_calls);
	nlohmann::json copies = nlohmann::json::object();
	for (const char *dir : {"htod", "dtoh", "dtod"})
		copies[dir] = {{"calls", 0}, {"bytes", 0}};
	for (const auto &[dir, c] : memcpy)
		copies[dir] = {{"calls", c.calls}, {"bytes", c.bytes}};
	cuda["memcpy"] = copies;
	j["cuda"] = cuda;
	j["gpu_memory"] = gpu_memory.to_json();
	if (pp_stage >= 0)
		j["pp_stage"] = pp_stage;
	if (has_gpu || pp_stage >= 0) {
		nlohmann::json g = nlohmann::json::object();
		if (has_gpu) {
			g["batches"] = gpu.batches;
			g["records"] = gpu.records;
			g["kernels"] = gpu.kernels;
			g["kernel_ns"] = gpu.kernel_ns;
			g["nccl_kernels"] = gpu.nccl_kernels;
			g["nccl_kernel_ns"] = gpu.nccl_kernel_ns;
			g["recv_kernels"] = gpu.recv_kernels;
			g["memcpy"] = gpu.memcpy;
			g["memcpy_bytes"] = {{"htod", gpu.memcpy_bytes_htod},
					     {"dtoh", gpu.memcpy_bytes_dtoh},
					     {"dtod", gpu.memcpy_bytes_dtod}};
			g["dropped"] = gpu.dropped;
			g["names"] = gpu.names;
			g["unheard_records"] = gpu.unheard_records;
		}
		if (pp_stage >= 0) {
			g["pp_stage"] = pp_stage;
			g["recv_delay_us"] = recv_delay_us;
		}
		j["gpu"] = g;
	}
	return j;
}

std::string cuda_base_api(std::string s)
{
	for (const char *suffix : {"_ptsz", "_ptds"}) {
		std::string suf = suffix;
		if (s.size() > suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0)
			s.resize(s.size() - suf.size());
	}
	// _v2, _v3, ...
	auto pos = s.rfind("_v");
	if (pos != std::string::npos && pos + 2 < s.size() && pos > 0) {
		bool digits = true;
		for (std::size_t i = pos + 2; i < s.size(); i++)
			digits = digits && s[i] >= '0' && s[i] <= '9';
		if (digits)
			s.resize(pos);
	}
	return s;
}

bool write_json_atomic(const std::string &path, const nlohmann::json &j)
{
	auto slash = path.rfind('/');
	std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
	std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
	std::string tmp = dir + "/." + base + ".tmp." + std::to_string(getpid());
	std::string text = j.dump(2) + "\n";
	int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return false;
	std::size_t off = 0;
	while (off < text.size()) {
		ssize_t n = write(fd, text.data() + off, text.size() - off);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			int e = errno;
			close(fd);
			unlink(tmp.c_str());
			errno = e;
			return false;
		}
		off += static_cast<std::size_t>(n);
	}
	if (close(fd) != 0) {
		int e = errno;
		unlink(tmp.c_str());
		errno = e;
		return false;
	}
	if (rename(tmp.c_str(), path.c_str()) != 0) {
		int e = errno;
		unlink(tmp.c_str());
		errno = e;
		return false;
	}
	return true;
}

} // namespace argus::sim
