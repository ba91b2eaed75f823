#include "exporters/json_api.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "userspace/detect/rank_exit.h"

namespace argus {

namespace {

using nlohmann::json;

json int_or_null(int v) { return v < 0 ? json(nullptr) : json(v); }
json str_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// What the rank holds through the driver and the calls that moved it; null
// until one of its device memory calls was seen.
json gpu_memory_json(const RankSnapshot& r) {
  const GpuMemoryView& m = r.gpu_memory;
  if (!m.seen() && m.held_bytes == 0) return nullptr;
  auto calls = [](const std::map<std::string, CopyCounters>& by_api) {
    json j = json::object();
    for (const auto& [api, c] : by_api) j[api] = {{"calls", c.calls}, {"bytes", c.bytes}};
    return j;
  };
  const GpuMemoryVerdict& v = r.gpu_memory_verdict;
  return {{"held_bytes", m.held_bytes},
          {"peak_bytes", m.peak_bytes},
          {"total_bytes", m.total_bytes != 0 ? json(m.total_bytes) : json(nullptr)},
          {"allocations", calls(m.allocations)},
          {"frees", calls(m.frees)},
          {"maps", calls(m.maps)},
          {"unpaired_frees", m.unpaired_frees},
          {"failures", m.failures},
          {"growing", v.growth_bytes_per_second > 0},
          {"growth_bytes_per_second", v.growth_bytes_per_second},
          {"growth_window_seconds", v.growth_bytes_per_second > 0 ? json(v.growth_window_seconds) : json(nullptr)},
          {"pressure", v.pressure},
          {"seconds_to_full", v.seconds_to_full >= 0 ? json(v.seconds_to_full) : json(nullptr)}};
}

json error_list(const std::map<std::pair<std::string, std::string>, uint64_t>& errors) {
  json out = json::array();
  for (const auto& [k, v] : errors) out.push_back({{"api", k.first}, {"code", k.second}, {"count", v}});
  return out;
}

// The kernel layer's view of a rank's CPU: totals, last window's shares
// (thread-seconds per wall second), who took its CPU, and its cgroup's quota.

// The job ranks of each c10d group's members on this node ("<job>/pg:<name>"
// is the same on every member).
using GroupMembers = std::map<std::string, std::vector<int>>;
GroupMembers group_members(const Snapshot& snap) {
  GroupMembers out;
  for (const auto& r : snap.ranks)
    for (const auto& g : r.process_groups)
      if (!g.comm_id.empty() && r.rank >= 0) out[g.comm_id].push_back(r.rank);
  for (auto& [id, ranks] : out) std::sort(ranks.begin(), ranks.end());
  return out;
}

// The c10d groups it joined, each with its calls by op and its members here.
json process_groups_json(const RankSnapshot& r, const GroupMembers& members) {
  json out = json::array();
  for (const auto& g : r.process_groups) {
    const std::string label = process_group_label(g);
    json calls = json::object();
    for (const auto& [key, n] : r.process_group_calls)
      if (std::get<0>(key) == label && std::get<1>(key) == g.backend_kind) calls[std::get<2>(key)] = n;
    out.push_back({{"group", label},
                   {"name", g.name},
                   {"desc", g.desc},
                   {"backend", g.backend_kind},
                   {"rank", g.rank},
                   {"size", g.size},
                   {"comm", g.comm_id},
                   {"nccl_comm", g.nccl_comm.empty() ? json() : json(g.nccl_comm)},
                   {"members", members.count(g.comm_id) ? json(members.at(g.comm_id)) : json::array()},
                   {"calls", std::move(calls)}});
  }
  return out;
}

json offcpu_json(const RankSnapshot& r) {
  if (!r.offcpu.present && !r.cgroup_cpu.present) return nullptr;
  static constexpr const char* kReasons[] = {"runqueue", "io", "lock", "sleep", "other"};
  json j = json::object();
  if (r.offcpu.present) {
    const OffCpuView& v = r.offcpu;
    json seconds = json::object(), shares = json::object();
    for (size_t i = 0; i < v.offcpu_ns.size(); ++i) {
      seconds[kReasons[i]] = static_cast<double>(v.offcpu_ns[i]) / 1e9;
      shares[kReasons[i]] = v.window_offcpu_share[i];
    }
    json stealers = json::array();
    for (const auto& s : v.stealers)
      stealers.push_back({{"pid", s.pid}, {"comm", s.comm}, {"cgroup", s.cgroup}, {"seconds", s.seconds}});
    j["seconds"] = std::move(seconds);
    j["cpu_seconds"] = static_cast<double>(v.oncpu_ns) / 1e9;
    j["window_shares"] = std::move(shares);
    j["window_cpu_share"] = v.window_oncpu_share;
    j["window_span_seconds"] = v.window_span_seconds;
    j["stealers"] = std::move(stealers);
  }
  if (r.cgroup_cpu.present) {
    const CgroupCpuView& c = r.cgroup_cpu;
    j["cgroup_cpu"] = {{"path", c.path},
                       {"periods", c.periods},
                       {"throttled_periods", c.throttled_periods},
                       {"throttled_seconds", c.throttled_seconds},
                       {"window_throttled_share", c.window_throttled_share}};
  } else {
    j["cgroup_cpu"] = nullptr;
  }
  return j;
}

// Its Kubernetes identity, null when its cgroup names no pod; a name not found is null.
json pod_json(const PodIdentityView& p) {
  if (!p.present()) return nullptr;
  return {{"namespace", str_or_null(p.namespace_name)}, {"pod", str_or_null(p.pod)},
          {"container", str_or_null(p.container)},      {"pod_uid", p.pod_uid},
          {"container_id", str_or_null(p.container_id)}, {"source", p.source}};
}

json rank_json(const RankSnapshot& r, const GroupMembers& members) {
  json nccl = json::object();
  for (const auto& [op, c] : r.nccl) {
    nccl[op] = {{"calls", c.calls}, {"bytes", c.bytes}, {"wait_seconds", static_cast<double>(c.wait_ns) / 1e9}};
  }
  json sync = json::object();
  for (const auto& [api, c] : r.sync) {
    sync[api] = {{"calls", c.calls}, {"wait_seconds", static_cast<double>(c.wait_ns) / 1e9}};
  }
  json j = json::object();
  j["pid"] = r.pid;
  j["job_id"] = str_or_null(r.job_id);
  j["rank"] = int_or_null(r.rank);
  j["local_rank"] = int_or_null(r.local_rank);
  j["world_size"] = int_or_null(r.world_size);
  j["local_world_size"] = int_or_null(r.local_world_size);
  j["node"] = r.node;
  j["comm"] = r.comm;
  j["state"] = r.exited ? "exited" : "running";
  j["exit_reason"] = r.exited ? str_or_null(label_of(r.exit_reason)) : json(nullptr);
  j["exit_code"] = r.exited ? json(r.exit_code) : json(nullptr);
  j["exited_at"] = r.exited ? json(r.exited_at_unix) : json(nullptr);
  j["exit_cause"] = r.exited ? exit_evidence(r) : json(nullptr);  // as in its rank_exit event
  j["identity_source"] = str_or_null(r.identity_source);
  j["pod"] = pod_json(r.pod);
  j["gpu_uuid"] = str_or_null(r.gpu_uuid);
  j["first_seen"] = r.first_seen_unix;
  j["collective_wait_ratio"] = r.collective_wait_ratio;
  j["sync_wait_ratio"] = r.sync_wait_ratio;
  j["arrival_lag_seconds"] = r.arrival_lag_seconds;
  j["late_fraction"] = r.late_fraction;
  j["step_seconds"] = r.step_seconds;
  j["straggler"] = r.straggler;
  j["straggler_score"] = r.straggler_score;
  j["straggler_reason"] = r.straggler ? str_or_null(label_of(r.straggler_reason)) : json(nullptr);
  j["pipeline_bubble"] = r.pipeline_bubble;
  j["hang_missing"] = r.hang_missing;
  if (r.gpu.seen) {
    const auto& g = r.gpu;
    j["gpu"] = {{"busy_ratio", g.window_valid ? json(g.busy_ratio) : json(nullptr)},
                {"nccl_kernel_ratio", g.window_valid ? json(g.nccl_ratio) : json(nullptr)},
                {"bubble_ratio", g.window_valid ? json(g.bubble_ratio) : json(nullptr)},
                {"records", g.records},
                {"kernels", g.kernels},
                {"kernels_folded", g.folded_kernels},
                {"records_unheard", g.unheard_records},
                {"kernels_unheard", g.unheard_kernels},
                {"nccl_kernels_unheard", g.unheard_nccl_kernels},
                {"kernel_seconds", static_cast<double>(g.kernel_ns) / 1e9},
                {"nccl_kernel_seconds", static_cast<double>(g.nccl_kernel_ns) / 1e9},
                {"idle_seconds", static_cast<double>(g.idle_ns) / 1e9},
                {"bubble_seconds", static_cast<double>(g.bubble_ns) / 1e9},
                {"records_lost", g.lost},
                {"memcpy_bytes", g.memcpy_bytes},
                {"step_summary_bytes", g.step_summary_bytes},
                {"steps_summarized", g.steps_summarized}};
  } else {
    j["gpu"] = nullptr;
  }
  j["comm_seq"] = r.comm_seq;
  j["nccl"] = std::move(nccl);
  const GroupCounters& g = r.nccl_groups;
  j["nccl_groups"] = {{"ended", g.ended},
                      {"operations", g.ops},
                      {"timed", g.timed},
                      {"wait_seconds", static_cast<double>(g.wait_ns) / 1e9}};
  json copies = json::object();
  for (const char* dir : {"htod", "dtoh", "dtod"}) copies[dir] = {{"calls", 0}, {"bytes", 0}};
  for (const auto& [dir, c] : r.memcpy) copies[dir] = {{"calls", c.calls}, {"bytes", c.bytes}};
  json timing = nullptr;
  if (r.launches_counted) {
    // log2 buckets by their upper bound in ns: "1024" counts launches of [512, 1024) ns.
    json buckets = json::object();
    for (const auto& [b, n] : r.launch_timing.log2_buckets)
      buckets[b >= 64 ? std::string("+Inf") : std::to_string(uint64_t{1} << b)] = n;
    timing = {{"count", r.launch_timing.count},
              {"seconds", static_cast<double>(r.launch_timing.ns) / 1e9},
              {"log2_buckets_ns", std::move(buckets)}};
  }
  j["cuda"] = {{"sync", std::move(sync)},
               {"kernel_launches", r.launches_counted ? json(r.kernel_launches) : json(nullptr)},
               {"launch_timing", std::move(timing)},
               {"memcpy", std::move(copies)},
               {"errors", error_list(r.cuda_errors)}};
  j["gpu_memory"] = gpu_memory_json(r);
  j["nccl_errors"] = error_list(r.nccl_errors);
  j["process_groups"] = process_groups_json(r, members);
  j["process_group_waits"] = {{"calls", r.process_group_waits.calls},
                              {"wait_seconds", static_cast<double>(r.process_group_waits.wait_ns) / 1e9}};
  j["libraries"] = r.libraries;
  j["python"] = nullptr;  // not Python, or not followed yet
  if (r.python_gc.present) {
    const PythonGcView& gc = r.python_gc;
    const bool timed = gc.anchor != "none";
    j["python"] = {{"version", gc.version},
                   {"gc_anchor", gc.anchor},
                   {"gc_collections", gc.collections},
                   {"gc_seconds", timed ? json(static_cast<double>(gc.ns) / 1e9) : json(nullptr)},
                   {"gc_pauses", timed ? json(gc.timed) : json(nullptr)},
                   {"gc_window_seconds", timed ? json(gc.window_seconds) : json(nullptr)},
                   {"gc_window_pauses", timed ? json(gc.window_pauses) : json(nullptr)},
                   {"gc_window_max_pause_seconds", timed ? json(gc.window_max_pause_seconds) : json(nullptr)}};
  }
  j["offcpu"] = offcpu_json(r);
  return j;
}

}  // namespace

json ranks_json(const Snapshot& snap) {
  std::vector<const RankSnapshot*> order;
  order.reserve(snap.ranks.size());
  for (const auto& r : snap.ranks) order.push_back(&r);
  auto key = [](const RankSnapshot* r) { return std::make_tuple(r->job_id.empty(), r->job_id, r->rank < 0, r->rank, r->pid); };
  std::sort(order.begin(), order.end(), [&](const RankSnapshot* a, const RankSnapshot* b) { return key(a) < key(b); });

  const GroupMembers members = group_members(snap);
  json ranks = json::array();
  for (const auto* r : order) ranks.push_back(rank_json(*r, members));
  json doc = json::object();
  doc["node"] = snap.agent.node;
  doc["version"] = snap.agent.version;
  doc["probes"] = snap.agent.probes;
  doc["window_seconds"] = snap.agent.window_seconds;
  doc["tracked_processes"] = snap.agent.tracked_processes;
  doc["ranks"] = std::move(ranks);
  return doc;
}

std::string dump_json(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string render_ranks_json(const Snapshot& snap) { return dump_json(ranks_json(snap)); }

nlohmann::json comms_json(const Snapshot& snap) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& c : snap.comms) {
    list.push_back({{"job_id", c.job_id.empty() ? nlohmann::json() : nlohmann::json(c.job_id)},
                    {"comm", c.comm},
                    {"group", c.group.empty() ? nlohmann::json() : nlohmann::json(c.group)},
                    {"ranks", c.ranks},
                    {"nranks", c.nranks},
                    {"ranks_here", c.ranks_here},
                    {"newest_seq", c.newest_seq},
                    {"stalled_seconds", c.stalled_seconds},
                    {"hung", c.hung},
                    {"missing_ranks", c.missing_ranks}});
  }
  return {{"comms", list}};
}

}  // namespace argus

namespace argus {

json gpu_steps_json(const std::string& job_id, int rank, int pid, const std::vector<gpu::StepSummary>& steps,
                    const std::map<uint32_t, std::string>& names, double mono_to_unix_offset_s) {
  json list = json::array();
  for (const auto& s : steps) {
    json kernels = json::array();
    auto sketch = gpu::StepSketch::decode(s.sketch);
    if (sketch) {
      std::vector<std::pair<uint32_t, const gpu::KernelDistribution*>> order;
      for (const auto& [id, k] : sketch->kernels()) order.push_back({id, &k});
      std::stable_sort(order.begin(), order.end(),
                       [](const auto& a, const auto& b) { return a.second->sum_ns > b.second->sum_ns; });
      for (const auto& [id, k] : order) {
        auto n = names.find(id);
        kernels.push_back({{"name", n != names.end() ? n->second : "kernel#" + std::to_string(id)},
                           {"count", k->count},
                           {"total_us", static_cast<double>(k->sum_ns) / 1e3},
                           {"p50_us", k->quantile_ns(0.5) / 1e3},
                           {"p90_us", k->quantile_ns(0.9) / 1e3},
                           {"max_us", k->quantile_ns(1.0) / 1e3}});
      }
    }
    list.push_back({{"start", static_cast<double>(s.start_ns) / 1e9 + mono_to_unix_offset_s},
                    {"bytes", s.sketch.size()},
                    {"decoded", sketch.has_value()},
                    {"closed_by", s.closed_by},
                    {"kernels", std::move(kernels)}});
  }
  return {{"job_id", job_id}, {"rank", rank}, {"pid", pid}, {"steps", std::move(list)}};
}

}  // namespace argus
