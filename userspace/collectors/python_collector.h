// The Python layer of each rank: its interpreter located once (cached by file),
// its py_procs entry written once the interpreter is initialised (the GC probes
// and the stack sampler act only then), its GC counters read each stats pass,
// and its sampled stacks kept for the profile route and straggler evidence.
// Stacks dumped on demand read the process's memory from the caller's thread.
#pragma once
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/collectors/dataloader_workers.h"
#include "userspace/common/clock.h"
#include "userspace/common/defaults.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/event.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/rank_facts.h"
#include "userspace/probes/bpf_backend.h"
#include "userspace/python/py_profile.h"
#include "userspace/python/py_runtime.h"

namespace argus {

struct PythonOptions {
  std::string proc_root = kDefaultProcRoot;
  bool gc_probes = true;                         // probe collectors (false: GC counts by polling only)
  uint32_t sample_hz = kDefaultPythonSampleHz;   // 0: no stack sampling
  AgentCounters* counters = nullptr;             // samples pushed out before their time
  double window_seconds = kDefaultWindowSeconds;  // the input polls handed on cover this long
};

class PythonCollector final : public HostCollector {
 public:
  PythonCollector(BpfRankMaps& maps, RankFacts& facts, const Clock& clock, PythonOptions opts);
  const char* name() const override { return "python"; }

  // Starts the stack sampler on the streams' perf events; "" when it runs (or
  // is off), else why not (the rest of the agent runs; the profile route says so).
  std::string start_sampling(BpfEventStreams& streams);

  // Every live rank that runs Python: located, configured, GC counters read;
  // samples past their retention dropped.
  void refresh(double now, const std::vector<int>& live_pids) override;
  // The probes' last counters (the process can no longer be polled); its BPF
  // config and sampler entry go, and a reused pid is located afresh.
  void rank_ended(int pid) override;
  void retain(const std::set<int>& pids) override { profiles_.retain(pids); }

  // Looks where each Python rank's main thread is now (wall clock, whatever
  // it is doing: the CPU sampler sees only running threads, and a rank that
  // waits for its next batch is off CPU), and hands on how often, over the
  // last window, it was inside a DataLoader's __next__. Event loop; due every
  // kInputPollSeconds.
  void poll_input(double now);
  static constexpr double kInputPollSeconds = 0.2;  // the mean interval (the caller draws each)
  // Whether some rank's interpreter is located and initialised (poll_input has work).
  bool has_initialised_python() const;

  // Read on the caller's thread (the HTTP server's), never the event loop's.
  Result<python::PyStackDump, python::LocateFailure> stacks(int pid) const;
  Result<std::string> profile(int pid, double seconds) const;
  // The grouped stacks of these (rank, pid)s now: hang evidence.
  nlohmann::json grouped_stacks(const std::vector<std::pair<int, int>>& rank_pids) const;
  // A straggler's own frames against its peers' over [since_ns, now]: the
  // functions that hold a much larger share of its samples.
  void add_evidence(DetectedEvent& ev, const std::vector<int>& own, const std::vector<int>& peers,
                    uint64_t since_ns) const;
  // Its newest sampled stack and how old it is (null without one): a rank's last words.
  nlohmann::json newest_stack(int pid) const;
  bool sampling() const { return sampling_; }
  // Where the stacks taken at failed allocations go (the event loop's thread).
  void set_oom_stack_handler(python::PySampler::OomStackHandler h) { sampler_.set_oom_stack_handler(std::move(h)); }
  python::PySampler::Stats sampler_stats() const;  // as of the last refresh

 private:
  struct PyRank {
    std::optional<python::PyProcess> proc;
    std::unique_ptr<python::RemoteMemory> mem;
    uint64_t gc_stats_addr = 0;  // 0 until the interpreter is initialised
    double next_try = 0;         // when to try locating it again
    bool configured = false;     // its py_procs entry is written
    bool said = false;           // its refusal was logged
    std::deque<std::pair<double, bool>> input;  // (when, in its DataLoader's __next__), last window
    std::unique_ptr<python::MainThreadLook> look;  // made at the first look
    std::unique_ptr<DataLoaderWorkers> workers;     // made at the first look
  };
  void refresh_rank(int pid, PyRank& pr, double now);
  void take_probed_gc(int pid);
  void sampling_status(int pid, const std::string& why_not, const python::PyProcess* p);

  BpfRankMaps& maps_;
  RankFacts& facts_;
  const Clock& clock_;
  PythonOptions opts_;
  mutable python::PythonLocator locator_;  // thread-safe; interpreter files cached by inode
  python::ProfileStore profiles_;
  python::PySampler sampler_{profiles_};
  bool sampling_ = false;
  std::map<int, PyRank> ranks_;  // event loop only
  mutable std::mutex mu_;  // guards what the HTTP threads read:
  // pid -> "" when sampled, else why not (per rank refresh() has located)
  std::map<int, std::string> status_;
  python::PySampler::Stats stats_;
};

}  // namespace argus
