// Sampled Python profiles: the BPF sampler's records (bpf/argus_py_sample.h)
// decoded, named by a per-process resolver (CodeSymbolizer over the process's
// memory), kept per rank for a bounded time and count, and answered as folded
// stacks (flamegraph.pl, speedscope) or as per-function shares that compare a
// straggler with its peers.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "bpf/argus_py_sample.h"
#include "userspace/model/agent_counters.h"
#include "userspace/model/event.h"
#include "userspace/python/py_runtime.h"

namespace argus::python {

// One record of the py_samples ring buffer, checked (size, frame count).
struct RawSample {
  uint32_t tgid = 0, tid = 0;
  uint64_t ts_ns = 0;
  uint16_t flags = 0;  // ARGUS_PY_SAMPLE_*
  std::vector<argus_py_sample_frame> frames;  // innermost first
};
std::optional<RawSample> decode_py_sample(const void* data, size_t size);

// "qualname (file:line)", a folded stack's frame ("(file)" when the line is
// unknown); ';' and control characters in names become '_' so the format holds.
std::string frame_label(const PyFrame& f);
// "qualname (file)": a function whatever line it is at, to compare ranks.
std::string function_label(const PyFrame& f);

struct ProfileOptions {
  double retention_seconds = 300;       // samples older than this are dropped
  size_t max_samples_per_rank = 30000;  // ... and beyond this count the oldest (Cap::kPythonSamples)
  AgentCounters* caps = nullptr;
};

// Samples per process, thread-safe (the event loop adds, HTTP threads read).
class ProfileStore {
 public:
  explicit ProfileStore(ProfileOptions opts = {}) : opts_(opts) {}
  // `frames` innermost first, as sampled; a truncated stack gets a
  // "[truncated]" root so that its partial path is never read as complete.
  void add(int pid, uint64_t ts_ns, const std::vector<PyFrame>& frames, bool truncated);
  // Folded stacks of the samples at or after since_ns: "root;...;leaf COUNT\n"
  // per distinct stack, sorted by stack.
  std::string folded(int pid, uint64_t since_ns) const;
  // Samples at or after since_ns, and in how many of them each function
  // (function_label) appears at least once (inclusive counts).
  uint64_t function_counts(int pid, uint64_t since_ns, std::map<std::string, uint64_t>* counts) const;
  // Drops what is older than the retention at `now_ns`.
  void expire(uint64_t now_ns);
  // Keeps only these processes' samples.
  void retain(const std::set<int>& pids);
  bool has(int pid) const;
  // The process's newest sample: when, and its frames root first (frame_label;
  // "[truncated]" first when cut). Nullopt when it has none (any more).
  struct Newest {
    uint64_t ts_ns = 0;
    std::vector<std::string> frames;
  };
  std::optional<Newest> newest(int pid) const;

 private:
  struct Stack {
    std::vector<std::string> functions;  // distinct function labels in it
    uint64_t refs = 0;
  };
  struct Sample {
    uint64_t ts_ns;
    const std::string* key;  // the folded stack (a key of Rank::stacks, stable)
  };
  struct Rank {
    std::deque<Sample> samples;
    std::unordered_map<std::string, Stack> stacks;
  };
  void drop_front(Rank& r);
  ProfileOptions opts_;
  mutable std::mutex mu_;
  std::map<int, Rank> ranks_;
};

// A function where a rank spends a larger share of its samples than its peers.
struct FrameShare {
  std::string frame;  // function_label
  double share = 0;   // of the rank's samples that have it (inclusive)
  double peers_share = 0;  // of its peers' samples, all together
};
// The `top` functions by how much more of the rank's samples they hold than of
// its peers', each held by at least `min_share` of the rank's samples; largest
// gap first. Empty when either side has no samples.
std::vector<FrameShare> compare_with_peers(const std::map<std::string, uint64_t>& rank_counts, uint64_t rank_total,
                                           const std::map<std::string, uint64_t>& peer_counts, uint64_t peer_total,
                                           size_t top = 5, double min_share = 0.05);
// "38% of its samples are in X, against 2% on its peers"
std::string frame_share_sentence(const FrameShare& f);

// A straggler event's Python side: the functions where the rank's processes
// (own_pids) spend a larger share of their samples since since_ns than its
// peers' processes do, as evidence.python_profile = [{frame, share,
// peers_share}], evidence.python_samples = {rank, peers}, and the first of
// them in the summary. Nothing when either side has no samples.
void add_python_evidence(DetectedEvent& ev, const ProfileStore& store, const std::vector<int>& own_pids,
                         const std::vector<int>& peer_pids, uint64_t since_ns);

// Names the frames of one process's samples.
class FrameResolver {
 public:
  virtual ~FrameResolver() = default;
  virtual std::optional<PyFrame> resolve(uint64_t code, uint64_t tag, uint64_t instr) = 0;
};
// The real one: a CodeSymbolizer (bounded, tag-validated cache) on the process's memory.
std::unique_ptr<FrameResolver> make_frame_resolver(const PyProcess& p, size_t max_entries = 65536);

// The event loop's side: records in, named samples into the store.
class PySampler {
 public:
  explicit PySampler(ProfileStore& store) : store_(store) {}
  void add_process(int pid, std::unique_ptr<FrameResolver> resolver) { resolvers_[pid] = std::move(resolver); }
  bool has_process(int pid) const { return resolvers_.count(pid) != 0; }
  void forget(int pid) { resolvers_.erase(pid); }
  void on_record(const void* data, size_t size);
  // Where a stack taken at a failed allocation (ARGUS_PY_SAMPLE_AT_OOM) goes,
  // named and root first, instead of the profile.
  using OomStackHandler = std::function<void(int pid, uint32_t tid, uint64_t ts_ns, std::vector<std::string> frames)>;
  void set_oom_stack_handler(OomStackHandler h) { oom_stack_handler_ = std::move(h); }

  struct Stats {
    uint64_t samples = 0;        // stored
    uint64_t malformed = 0;      // records of the wrong size or frame count
    uint64_t unknown_process = 0;  // from a tgid without a resolver (forgotten meanwhile)
    uint64_t unresolved_frames = 0;  // a frame whose code object no longer matched its tag
    uint64_t truncated = 0;      // stacks deeper than the sampler keeps
  };
  const Stats& stats() const { return stats_; }

 private:
  ProfileStore& store_;
  std::map<int, std::unique_ptr<FrameResolver>> resolvers_;
  OomStackHandler oom_stack_handler_;
  Stats stats_;
};

}  // namespace argus::python
