// Snapshots of the agent's state, handed from the rank registry to the exporters.
// Plain values: exporters never see maps, files or locks.
#pragma once
#include "userspace/common/defaults.h"
#include <array>
#include <bit>
#include <cstdint>
#include <map>
#include <tuple>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "userspace/model/agent_counters.h"
#include "userspace/model/rank_identity.h"
#include "userspace/model/vocab.h"

namespace argus {

// A PyTorch c10d process group a rank is a member of, as the c10d probes saw
// its backend made and the group named.
struct ProcessGroupInfo {
  uint64_t backend = 0;      // the backend's address in the process (what its calls are made on)
  std::string backend_kind;  // "gloo"
  int rank = -1;             // in the group
  int size = -1;
  std::string name;     // c10d's group name: the same on every member ("0" for the world)
  std::string desc;     // what the framework calls it ("default_pg", a Megatron group's), "" when unset
  std::string comm_id;  // its communicator's name in the agent ("<job>/pg:<name>")
  std::string nccl_comm;  // NCCL backends: the NCCL communicator its collectives ran on ("" until joined)
};
// How metrics and events name a group: its description where the framework
// gave one, else c10d's name, else "unnamed" (made before the agent attached).
std::string process_group_label(const ProcessGroupInfo& g);
// Ranks as a short list: "4-5", "0, 2, 4", "0-3, 8-11" (unknown ranks, -1,
// left out; past 6 pieces, "..."): how users name a group's members.
std::string rank_list_text(std::vector<int> ranks);
// A group as users say it: "tp (ranks 4-5)"; where this node holds only some
// of its members, "dp (ranks 0, 1 here, of 8)". The label alone when no rank
// is known.
std::string group_phrase(const std::string& label, const std::vector<int>& ranks_here, int nranks);

// Where its main thread was when the agent looked (wall clock, a few times a
// second, whatever it was doing): how often inside its DataLoader's __next__,
// waiting for (or making) its next batch, over the last 2 s, 5 s and window
// (the detector reads the span its lag was measured over: a window that began
// before training, in the imports, would thin the share).
// Its DataLoader workers over a span (DataLoaderWorkers): how many, their CPU
// seconds and bytes read per second, summed.
struct InputWorkersView {
  bool valid = false;
  int workers = 0;
  double seconds = 0;  // the span the rates cover
  double cpu_per_s = 0;
  double rchar_per_s = 0;       // read() bytes, page cache and pipes included
  double read_bytes_per_s = 0;  // bytes fetched from storage
};

struct InputWaitView {
  struct Span {
    double seconds = 0;
    int polls = 0;
    int in_input = 0;
    InputWorkersView workers;
  };
  std::array<Span, 3> spans{};
};

struct OpCounters {
  uint64_t calls = 0;
  uint64_t bytes = 0;
  uint64_t wait_ns = 0;  // time inside the call (entry to return)
};

// The rank's NCCL groups: ended (outermost), the operations grouped in them,
// and the time its host spent in their ncclGroupEnd (the ends with operations).
struct GroupCounters {
  uint64_t ended = 0;
  uint64_t ops = 0;
  uint64_t timed = 0;
  uint64_t wait_ns = 0;
};

struct SyncCounters {
  uint64_t calls = 0;
  uint64_t wait_ns = 0;
};

// Host-API copies (cuMemcpyHtoD*, ...) of one direction, counted at the call.
struct CopyCounters {
  uint64_t calls = 0;
  uint64_t bytes = 0;
};

// Device memory the rank asked the driver for (bpf/cuda_mem.bpf.c): held and
// peak from BPF's running sums, the calls from its aggregates.
struct GpuMemoryView {
  int64_t held_bytes = 0;   // allocations seen less their frees
  uint64_t peak_bytes = 0;  // the most held since the agent began watching
  uint64_t total_bytes = 0; // its GPU's total, as its own cuMemGetInfo/cuDeviceTotalMem said; 0 unknown
  std::map<std::string, CopyCounters> allocations;  // api -> allocations that succeeded, bytes
  std::map<std::string, CopyCounters> frees;        // api -> frees paired with an allocation seen, bytes
  std::map<std::string, CopyCounters> maps;         // "cuMemMap"/"cuMemUnmap" -> calls, bytes
  uint64_t unpaired_frees = 0;                      // frees of memory allocated before it was watched
  std::map<std::string, uint64_t> failures;         // CUDA result name -> allocation calls that failed
  bool seen() const { return !allocations.empty() || !frees.empty() || unpaired_frees != 0 || !failures.empty() || total_bytes != 0; }
};

// The detection pass's word on a rank's device memory.
struct GpuMemoryVerdict {
  double growth_bytes_per_second = 0;  // held grew segment after segment over a steady window: a leak's rate
  double growth_window_seconds = 0;    // over how long it was judged
  bool pressure = false;               // held at or above kGpuMemoryPressureShare of the GPU's total
  double seconds_to_full = -1;         // at that rate, until held reaches the total (-1: not growing or total unknown)
};

// Host time inside kernel-launch calls (--probes deep only).
struct LaunchTiming {
  uint64_t count = 0;  // timed launches (entry and return seen)
  uint64_t ns = 0;     // sum of the time inside them
  // log2 histogram: bucket b counts launches of [2^(b-1), 2^b) ns (b = 0: 0 ns).
  std::map<uint32_t, uint64_t> log2_buckets;
};

// One more duration in a LaunchTiming-shaped log2 histogram.
inline void add_to_log2(LaunchTiming& t, uint64_t ns) {
  t.count += 1;
  t.ns += ns;
  t.log2_buckets[static_cast<uint32_t>(std::bit_width(ns))] += 1;
}

// The rank's GPU timeline (GPU-activity records from CUPTI or the sim).
struct GpuRankView {
  bool seen = false;          // any record arrived from this rank
  bool window_valid = false;  // records within the last window
  double busy_ratio = 0;      // share of the window with a kernel running
  double nccl_ratio = 0;      // ... with an NCCL kernel running
  double bubble_ratio = 0;    // ... idle before a pipeline P2P kernel
  uint64_t records = 0, kernels = 0, memcpys = 0, memsets = 0;
  uint64_t folded_kernels = 0;  // ... of the kernels, those the producer folded into spans
  // Produced while no agent listened (never received; the records are in `lost` too).
  uint64_t unheard_records = 0, unheard_kernels = 0, unheard_nccl_kernels = 0;
  uint64_t kernel_ns = 0, nccl_kernel_ns = 0, idle_ns = 0, bubble_ns = 0;
  uint64_t lost = 0;  // records the producer dropped, plus any BPF truncated
  std::map<std::string, uint64_t> memcpy_bytes;  // direction -> bytes
  double step_summary_bytes = 0;  // encoded kernel sketch per step, mean of the last 100 steps
  uint64_t steps_summarized = 0;
  uint64_t latest_end_ns = 0;  // CLOCK_MONOTONIC end of its newest kernel (a hang shows the GPU went quiet)
};

// The rank's Python garbage collector, when it runs Python.
struct PythonGcView {
  bool present = false;   // its interpreter was located
  std::string version;    // "3.11.7"
  std::string anchor;     // its interpreter file's GC anchor: "gc_collect_main", "usdt", "pygc_collect_call", "none"
  // Per generation, the interpreter's own `collections` counters (gc.get_stats()):
  // the larger of the newest polled value and the newest the probes saw.
  std::array<uint64_t, 3> collections{};
  uint64_t timed = 0;     // collections the probes timed (entry and return seen)
  uint64_t ns = 0;        // time inside them
  // Pause histogram: bucket b counts pauses of [2^(b-1), 2^b) ns (b = 0: 0 ns).
  std::map<uint32_t, uint64_t> log2_buckets;
  // Last window: GC time, pauses, and the longest pause (its bucket's upper bound).
  double window_seconds = 0;
  double window_span_seconds = 0;  // how long that window was
  uint64_t window_pauses = 0;
  double window_max_pause_seconds = 0;
};

// A task that held the CPU while a rank's thread waited for it (runqueue time),
// from sched_switch: the task switched out when the rank's thread got the CPU back.
struct CpuStealer {
  int pid = 0;           // its tgid
  std::string comm;      // its process name
  std::string cgroup;    // its cgroup path (v2, else the cpu controller's), "" when unknown
  double seconds = 0;    // rank thread-time spent waiting behind it
  uint64_t count = 0;    // waits attributed to it
};

// The rank's threads on and off CPU (bpf/sched_switch.bpf.c), when the
// scheduler probes run.
struct OffCpuView {
  bool present = false;  // the sched_switch probe follows this rank
  // Totals, in thread-nanoseconds (summed over the rank's threads).
  std::array<uint64_t, 5> offcpu_ns{};  // by enum argus_offcpu_reason
  uint64_t oncpu_ns = 0;
  // Last window, as thread-seconds per wall second (a single busy thread waiting
  // half the time for a CPU has runqueue 0.5; many threads may sum above 1).
  std::array<double, 5> window_offcpu_share{};
  double window_oncpu_share = 0;
  double window_span_seconds = 0;
  std::vector<CpuStealer> stealers;  // the top few over the window, most time first
};

// The CPU controller of the rank's cgroup (cpu.stat, v2 or v1).
struct CgroupCpuView {
  bool present = false;
  std::string path;  // the cgroup path as /proc/PID/cgroup names it
  uint64_t periods = 0;
  uint64_t throttled_periods = 0;
  double throttled_seconds = 0;
  double window_throttled_share = 0;  // throttled seconds per wall second, last window
};

// Why a rank ended, from the kernel (bpf/proc_exit.bpf.c and the memory cgroup).
struct ExitCause {
  int signal = 0;             // the fatal signal (0: it exited)
  int sender_pid = -1;        // who sent it: -1 unknown, 0 the kernel
  std::string sender_comm;
  bool oom = false;           // chosen by the OOM killer
  nlohmann::json oom_details = nlohmann::json::object();  // memory cgroup, limit, usage, ... where known
  nlohmann::json last_python_stack = nullptr;  // the newest sampled stack, where the Python layer had one
  nlohmann::json gpu_oom = nullptr;  // the device allocation that ran out of memory shortly before it ended
};

// The rank's Kubernetes identity: the pod and container its cgroup names, and
// the names the kubelet's log dirs (or the apiserver) give them. "" = unknown.
struct PodIdentityView {
  std::string namespace_name;
  std::string pod;
  std::string container;
  std::string pod_uid;
  std::string container_id;  // 64 hex, as the runtime names it
  std::string source;        // "logs", "apiserver", or "cgroup" (the uid alone, no names found)
  bool present() const { return !pod_uid.empty(); }
  bool operator==(const PodIdentityView&) const = default;
};

// What the detection pass concluded about one rank at its last evaluation:
// kept apart from the registry's state, and laid over the registry's part of a
// rank's snapshot when one is taken (RankSnapshot is both).
struct RankDetection {
  double arrival_lag_seconds = 0;  // mean lag behind the node's earliest rank, last window
  double late_fraction = 0;        // share of collectives it arrived last (and late)
  double step_seconds = 0;         // period of its collective pattern; 0 when unknown
  bool straggler = false;
  StragglerReason straggler_reason = StragglerReason::kNone;  // while a straggler
  double straggler_score = 0;      // how much slower than the median rank (0 = on time)
  bool pipeline_bubble = false;    // its GPU idles on pipeline receives far more than its peers
  bool hang_missing = false;       // never reached a collective its peers sit in
  std::map<std::string, uint64_t> comm_seq;  // communicator -> newest collective it entered
  GpuMemoryVerdict gpu_memory_verdict;
};


// One rank as the exporters see it: the registry's state and the detection
// pass's conclusions.
struct RankSnapshot : RankDetection {
  int pid = 0;
  uint64_t start_time_ticks = 0;  // /proc/PID/stat starttime: tells a reused pid apart
  std::string comm;               // process name
  std::string job_id;             // "" while unknown
  int rank = -1;                  // -1 while unknown
  int local_rank = -1;
  int world_size = -1;
  int local_world_size = -1;
  std::string node;
  std::string identity_source;  // "env:RANK", "nccl:ncclCommInitRank", ...
  bool exited = false;
  ExitReason exit_reason = ExitReason::kNone;  // once exited
  int exit_code = 0;
  double exited_at_unix = 0;  // wall clock seconds
  double first_seen_unix = 0;

  std::map<std::string, OpCounters> nccl;    // op label -> counters
  GroupCounters nccl_groups;
  std::map<std::string, SyncCounters> sync;  // api label -> counters
  uint64_t kernel_launches = 0;
  bool launches_counted = false;  // true only under --probes deep
  LaunchTiming launch_timing;     // meaningful only where launches_counted
  std::map<std::string, CopyCounters> memcpy;  // direction ("htod", "dtoh", "dtod") -> host-API copies
  std::map<std::pair<std::string, std::string>, uint64_t> cuda_errors;  // (api, code) -> calls
  GpuMemoryView gpu_memory;
  std::map<std::pair<std::string, std::string>, uint64_t> nccl_errors;  // (api, code) -> calls
  std::vector<ProcessGroupInfo> process_groups;  // c10d groups it was seen joining (capped)
  // c10d collective and p2p calls: (group label, backend, op) -> calls
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> process_group_calls;
  // Its waits on c10d work objects (Gloo's Work::wait): a host blocked in a collective.
  SyncCounters process_group_waits;

  double collective_wait_ratio = 0;  // last window: time inside collective calls / wall time
  double sync_wait_ratio = 0;        // last window: time inside CUDA synchronize calls / wall time
  GpuRankView gpu;
  std::vector<std::string> libraries;  // probed library files this process maps
  PythonGcView python_gc;
  InputWaitView input;
  OffCpuView offcpu;
  CgroupCpuView cgroup_cpu;
  ExitCause exit_cause;  // meaningful once exited
  std::map<std::string, uint64_t> tcp_retransmits;  // remote address -> retransmits of its sockets
  std::map<std::string, LaunchTiming> block_io;     // op ("read", "write", ...) -> request latency histogram

  bool identified() const { return rank >= 0 && !job_id.empty(); }

  // From the environment (RankIdentity): "" when unset or empty; gpu_ref is what
  // they name (rank_gpu), decided once by the registry.
  std::string cuda_visible_devices;
  std::string nvidia_visible_devices;
  GpuRef gpu_ref;

  PodIdentityView pod;   // present() once its cgroup named a pod
  std::string gpu_uuid;  // "GPU-..." where the environment or the driver's files name it, else ""
};

// The agent itself: its settings, its counts (agent_counters.h) and what its
// sources report of their own health.
struct AgentSnapshot {
  std::string version;
  std::string node;
  std::string probes;  // "default" or "deep"
  double window_seconds = kDefaultWindowSeconds;
  AgentCounterValues counters;  // events received, skips, caps, numbering, failed polls, ...
  std::map<std::string, uint64_t> events_lost;            // source -> events lost (ring buffer full, ...)
  std::map<std::string, uint64_t> bpf_errors;             // BPF error counter name -> count
  std::map<std::string, uint64_t> probe_attach_errors;    // library -> failed attaches
  std::map<std::string, uint64_t> probes_attached;        // library -> attached probes now
  std::map<std::string, uint64_t> probed_files;           // library -> files with probes now
  uint64_t probe_files_released = 0;                      // files whose probes were detached (unused), ever
  uint64_t usdt_spec_slots_used = 0;                      // libbpf USDT spec slots held by our producers
  uint64_t usdt_spec_slots_limit = 0;                     // the table's size (0: unknown)
  uint64_t probes_detaching = 0;                          // released probes the kernel is still detaching
  std::map<std::string, LaunchTiming> probe_attach_delay;  // library -> mapped (first seen) to probes live
  std::map<std::string, bool> capabilities;  // capability -> held (checked at start)
  uint64_t tracked_processes = 0;
  std::map<std::string, uint64_t> python_gc_files;  // GC anchor -> interpreter files probed now
  uint64_t python_gc_unprobed_files = 0;            // interpreter files with no usable GC anchor, ever
  std::map<std::string, std::string> kernel_probes;  // kernel probe -> "tp_btf", "raw_tp", "off", "failed"
  std::string uprobe_links = "perf";                  // "multi" (uprobe_multi links) or "perf" (one per probe)
  std::string pod_info;                              // --pod-info: "logs", "apiserver" or "off"
  std::map<std::string, uint64_t> pod_lookups;       // result -> pod identity lookups (one per rank and try)
  std::map<std::string, uint64_t> pod_source_skips;  // reason -> log dir entries / apiserver objects skipped
  std::map<std::string, uint64_t> pod_watch_errors;  // reason -> apiserver list/watch failures
};

// One communicator as this node sees it.
struct CommSnapshot {
  std::string job_id;
  std::string comm;  // comm_id_from_uid of its ncclUniqueId (a hash): the same on every node
  std::string group;  // the c10d group it is, as the framework labels it ("" when not known)
  std::vector<int> ranks;  // the job ranks of its members here, sorted
  int nranks = 0;    // the whole communicator
  int ranks_here = 0;
  uint64_t newest_seq = 0;
  double stalled_seconds = 0;  // how long its newest collective has waited (0 when moving)
  bool hung = false;
  std::vector<int> missing_ranks;
};

struct Snapshot {
  AgentSnapshot agent;
  std::vector<RankSnapshot> ranks;
  std::vector<CommSnapshot> comms;
};

}  // namespace argus
