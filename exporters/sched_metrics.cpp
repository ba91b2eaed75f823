// Scheduling and cgroup CPU families (issue 12, part 1): the ranks' off-CPU
// time by reason and CPU time (bpf/sched_switch.bpf.c), and the CPU
// throttling of their cgroups (cpu.stat).
#include "exporters/kernel_metrics.h"

#include "bpf/argus.h"

namespace argus {

using prometheus::MetricType;

namespace {

// The `reason` label values, in enum argus_offcpu_reason order (the contract's).
constexpr const char* kOffCpuReasons[ARGUS_OFFCPU_MAX] = {"runqueue", "io", "lock", "sleep", "other"};

MetricLabels with(const MetricLabels& base, const char* key, const char* value) {
  MetricLabels l = base;
  l.push_back({key, value});
  return l;
}

}  // namespace

void append_sched_metrics(const std::vector<RankGroup>& groups, std::vector<prometheus::MetricFamily>& out) {
  auto offcpu = metric_family("argus_offcpu_seconds_total",
                              "Thread-seconds the rank's threads spent off CPU, by reason: runqueue (runnable, "
                              "waiting for a CPU), io (block I/O), lock (futex), sleep, other (sched_switch).",
                              MetricType::Counter);
  auto cpu = metric_family("argus_cpu_seconds_total", "Thread-seconds the rank's threads ran on a CPU (sched_switch).",
                           MetricType::Counter);
  auto throttled =
      metric_family("argus_cpu_throttled_seconds_total",
                    "Seconds the rank's cgroup was throttled by its CPU quota (cpu.stat).", MetricType::Counter);
  auto throttled_periods =
      metric_family("argus_cpu_throttled_periods_total",
                    "CPU quota periods in which the rank's cgroup was throttled (cpu.stat).", MetricType::Counter);
  auto periods = metric_family("argus_cpu_periods_total",
                               "CPU quota periods that elapsed for the rank's cgroup (cpu.stat).", MetricType::Counter);
  for (const auto& g : groups) {
    bool followed = false;
    std::array<uint64_t, ARGUS_OFFCPU_MAX> off{};
    uint64_t on = 0;
    for (const auto* r : g.members) {
      if (!r->offcpu.present) continue;
      followed = true;
      for (size_t i = 0; i < off.size(); ++i) off[i] += r->offcpu.offcpu_ns[i];
      on += r->offcpu.oncpu_ns;
    }
    if (followed) {
      for (size_t i = 0; i < off.size(); ++i)
        add_sample(offcpu, with(g.base, "reason", kOffCpuReasons[i]), static_cast<double>(off[i]) / 1e9);
      add_sample(cpu, g.base, static_cast<double>(on) / 1e9);
    }
    // One cgroup's counters: from the lead, never summed over processes that share it.
    if (g.lead != nullptr && g.lead->cgroup_cpu.present) {
      const CgroupCpuView& c = g.lead->cgroup_cpu;
      add_sample(throttled, g.base, c.throttled_seconds);
      add_sample(throttled_periods, g.base, static_cast<double>(c.throttled_periods));
      add_sample(periods, g.base, static_cast<double>(c.periods));
    }
  }
  for (auto* f : {&offcpu, &cpu, &throttled, &throttled_periods, &periods}) out.push_back(std::move(*f));
}

}  // namespace argus
