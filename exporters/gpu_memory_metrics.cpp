// Device memory per rank (issue 32): what each rank holds through the driver,
// its peak, its GPU's total, the calls that moved it and the ones that failed.
// Counters sum over a rank's processes; gauges are its running lead's.
#include <map>
#include <string>

#include "exporters/kernel_metrics.h"

namespace argus {

using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

void add_by(MetricFamily& f, const MetricLabels& base, const char* key, const std::string& value, double v) {
  MetricLabels labels = base;
  labels.push_back({key, value});
  add_sample(f, std::move(labels), v);
}

struct Summed {
  std::map<std::string, CopyCounters> allocations, frees, maps;
  std::map<std::string, uint64_t> failures;
  uint64_t unpaired = 0;
  bool seen = false;
};

void add_into(std::map<std::string, CopyCounters>& sum, const std::map<std::string, CopyCounters>& by_api) {
  for (const auto& [api, c] : by_api) {
    sum[api].calls += c.calls;
    sum[api].bytes += c.bytes;
  }
}

Summed sum_of(const RankGroup& g) {
  Summed s;
  for (const auto* r : g.members) {
    const GpuMemoryView& m = r->gpu_memory;
    if (!m.seen()) continue;
    s.seen = true;
    add_into(s.allocations, m.allocations);
    add_into(s.frees, m.frees);
    add_into(s.maps, m.maps);
    for (const auto& [code, n] : m.failures) s.failures[code] += n;
    s.unpaired += m.unpaired_frees;
  }
  return s;
}

}  // namespace

void append_gpu_memory_metrics(const std::vector<RankGroup>& groups, std::vector<MetricFamily>& out) {
  auto held = metric_family("argus_gpu_memory_held_bytes",
                            "Device memory the rank holds through the driver now: allocations seen less their frees "
                            "(a caching allocator's whole pool).",
                            MetricType::Gauge);
  auto peak = metric_family("argus_gpu_memory_peak_bytes", "The most device memory the rank has held.",
                            MetricType::Gauge);
  auto total = metric_family("argus_gpu_memory_total_bytes",
                             "The total memory of the rank's GPU, as its own cuMemGetInfo or cuDeviceTotalMem "
                             "returned it (absent until seen).",
                             MetricType::Gauge);
  auto growth = metric_family("argus_gpu_memory_growth_bytes_per_second",
                              "The rate at which held bytes grew in every part of a steady window (a leak); 0 when "
                              "they do not.",
                              MetricType::Gauge);
  auto allocs = metric_family("argus_gpu_memory_allocations_total", "Device allocation calls that succeeded, by API.",
                              MetricType::Counter);
  auto allocated = metric_family("argus_gpu_memory_allocated_bytes_total", "Bytes those allocations handed out.",
                                 MetricType::Counter);
  auto failures = metric_family("argus_gpu_memory_alloc_failures_total",
                                "Device allocation calls that failed, by CUDA result name.", MetricType::Counter);
  auto frees = metric_family("argus_gpu_memory_frees_total",
                             "Frees that succeeded and were paired with an allocation seen, by API.",
                             MetricType::Counter);
  auto freed = metric_family("argus_gpu_memory_freed_bytes_total", "Bytes those frees gave back.",
                             MetricType::Counter);
  auto unpaired = metric_family("argus_gpu_memory_unpaired_frees_total",
                                "Frees of memory whose allocation was not seen (made before the agent watched): "
                                "counted, never subtracted.",
                                MetricType::Counter);
  auto maps = metric_family("argus_gpu_memory_maps_total",
                            "cuMemMap / cuMemUnmap calls that succeeded (expandable segments), by API.",
                            MetricType::Counter);
  auto mapped = metric_family("argus_gpu_memory_mapped_bytes_total", "The sizes of those calls, by API.",
                              MetricType::Counter);
  for (const auto& g : groups) {
    const Summed s = sum_of(g);
    if (!s.seen) continue;
    uint64_t allocated_bytes = 0, freed_bytes = 0;
    for (const auto& [api, c] : s.allocations) {
      add_by(allocs, g.base, "api", api, static_cast<double>(c.calls));
      allocated_bytes += c.bytes;
    }
    for (const auto& [api, c] : s.frees) {
      add_by(frees, g.base, "api", api, static_cast<double>(c.calls));
      freed_bytes += c.bytes;
    }
    for (const auto& [api, c] : s.maps) {
      add_by(maps, g.base, "api", api, static_cast<double>(c.calls));
      add_by(mapped, g.base, "api", api, static_cast<double>(c.bytes));
    }
    for (const auto& [code, n] : s.failures) add_by(failures, g.base, "code", code, static_cast<double>(n));
    add_sample(allocated, g.base, static_cast<double>(allocated_bytes));
    add_sample(freed, g.base, static_cast<double>(freed_bytes));
    add_sample(unpaired, g.base, static_cast<double>(s.unpaired));
    const RankSnapshot& lead = *g.lead;
    if (lead.exited) continue;  // what a process held at its end is the driver's to free
    add_sample(held, g.base, static_cast<double>(lead.gpu_memory.held_bytes));
    add_sample(peak, g.base, static_cast<double>(lead.gpu_memory.peak_bytes));
    if (lead.gpu_memory.total_bytes != 0) add_sample(total, g.base, static_cast<double>(lead.gpu_memory.total_bytes));
    add_sample(growth, g.base, lead.gpu_memory_verdict.growth_bytes_per_second);
  }
  for (auto* f : {&held, &peak, &total, &growth, &allocs, &allocated, &failures, &frees, &freed, &unpaired, &maps, &mapped})
    out.push_back(std::move(*f));
}

}  // namespace argus
