// A rank's step period from the repeating pattern of its calls.
//
// A training step makes the same operations in the same order every step: the
// tensor-parallel collectives of each layer, the pipeline's sends and
// receives, the data-parallel gradient reduction. Timing varies (jitter, an
// evaluation or a checkpoint pause); the sequence of (communicator, operation,
// and a collective's bytes) does not. So the period in calls is the smallest
// shift under which the recent sequence matches itself (98% of the calls, over
// at least 96, in most recent spans; a few calls inserted at once slip it, and
// only they miss), or the longer one whose NCCL operations match at most half
// as often wrong (micro-batches look alike: only the step's gradient reduction
// tells one from the next; a synchronize every tenth step for logging is no
// such thing), and the step is the median time that shift spans. A pause
// lengthens one period and not the median. A point-to-point call's bytes are left out (MoE token counts change
// every step). A pattern of one repeated call (identical DDP buckets) says
// nothing about steps: none.
//
// Pure logic on (signature, time): tested on recorded streams.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

namespace argus {

class StepPattern {
 public:
  static constexpr size_t kMaxCalls = 4096;     // calls kept
  static constexpr size_t kMaxPeriod = 1024;    // calls in one step at most
  static constexpr double kMinMatch = 0.98;     // share of calls that repeat at the period
  static constexpr size_t kMinSpan = 96;        // calls compared at least (a short period must hold long)

  // `collective`: an NCCL operation (false: a synchronize).
  void on_call(uint64_t signature, uint64_t ts_ns, bool collective = true);
  // The step in seconds (0 until three periods were seen), and the period in
  // calls through `calls`.
  double step_seconds(size_t* calls = nullptr) const;
  void trim_before(uint64_t cutoff_ns);
  bool empty() const { return calls_.empty(); }

  struct Call {
    uint64_t signature;
    uint64_t ts_ns;
    bool collective;
  };

 private:
  size_t search_period() const;

  std::deque<Call> calls_;  // oldest first
  // The last period searched for, trusted while it repeats for kMaxCalls / 4
  // calls: the search costs up to a few ms where most calls are alike, and a
  // job's step does not change from one second to the next.
  mutable size_t period_ = 0;
  mutable size_t calls_since_search_ = 0;
};

// The signature of a call: which communicator (a hash of its name),
// which operation, and for a collective its bytes (0 for point-to-point).
constexpr uint64_t call_signature(uint32_t comm_hash, uint32_t op, uint64_t bytes) {
  return (bytes * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(comm_hash) << 8 | (op & 0xff));
}

}  // namespace argus
