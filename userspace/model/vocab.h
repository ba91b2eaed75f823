// The agent's vocabulary: every kind of event, reason and cause it names, as an
// enum, turned into the one word /metrics, the JSON API and the logs use for it
// in one place (vocab.cpp). Code compares enums, never text; the words are the
// contract's (../shared/CONTRACT.md) and docs/metrics.md's.
#pragma once
#include <cstdint>

namespace argus {

// GET /api/v1/events "kind".
enum class EventKind : uint8_t {
  kStraggler,
  kHang,
  kLinkDegraded,
  kPipelineBubble,
  kGcPause,
  kRankExit,
  kXid,
  kOom,
};
const char* label_of(EventKind k);  // "straggler", "hang", "link_degraded", ...

// Why a straggler is late (evidence.reason, GET /api/v1/ranks straggler_reason):
// kNone while it is on time.
enum class StragglerReason : uint8_t {
  kNone,
  kHost,           // its host computes longer (the kernel layer is not there to say more)
  kSync,           // it spent its lag in its own synchronize calls: its GPU or stream
  kGpu,            // its NCCL kernels run least: its peers' kernels wait for it
  kCompute,        // its host computes longer and nothing on the host explains it
  kCpuContention,  // runnable, waiting for a CPU another process held
  kThrottled,      // its cgroup's CPU quota throttled it
  kIo,             // blocked in block I/O
  kGcPause,        // its Python garbage collector
  kDataloader,     // its main thread waits for its next batch (its input pipeline cannot keep up)
};
const char* label_of(StragglerReason r);  // "host", "sync", ... ("" for kNone)

// What a hang event says is stuck (evidence.cause).
enum class HangCause : uint8_t {
  kMissingRank,         // a rank here never issued the collective its peers sit in
  kRankDied,            // the ranks holding it up issued it and died before it finished
  kPeersExited,         // every rank here issued it; some then exited cleanly, the rest wait
  kNoLocalRankMissing,  // every rank here issued it and waits; the communicator has ranks elsewhere
  kCollectiveStuck,     // every rank of the communicator is here, issued it, and waits
  kRankBusy,            // the rank holding it up is alive, in no collective or CUDA call, and busy (a checkpoint, an eval)
  kPeerNeverSent,       // a point-to-point receive (a pipeline stage's input) never got its send
};
const char* label_of(HangCause c);  // "missing_rank", "rank_died", ...

// How a rank process ended (argus_rank_exits_total{reason}); kNone while it runs.
// OOM wins over the signal that carried it out.
enum class ExitReason : uint8_t { kNone, kExit, kSignal, kOom };
const char* label_of(ExitReason r);  // "exit", "signal", "oom" ("" for kNone)

// A process, file or record the agent passed over, and why
// (argus_agent_discovery_skips_total{reason}).
enum class SkipReason : uint8_t {
  kVanished,                // the process or file went away while read
  kPermission,              // the agent may not read it (ptrace access mode, hidepid)
  kMalformedProc,           // a /proc file that does not parse
  kProcReadError,           // any other read failure
  kEnvironVanished,         // the same four, for a rank's environment
  kEnvironPermission,
  kEnvironMalformedProc,
  kEnvironProcReadError,
  kMalformedMapsLine,       // a maps line of a format the agent does not know
  kUnreadableElf,           // a mapped library whose ELF does not parse
  kElfLimit,                // ... that is over a parse cap
  kMappedPathMissing,       // a mapped file refused: its path no longer resolves
  kMappedNotRegular,        // ... its path names something else than a regular file
  kMappedIdentityMismatch,  // ... its path names another file than the mapping
  kMappedOpenFailed,        // ... it cannot be opened
  kParseQueueFull,          // too many libraries waiting to be parsed: looked at again later
  kUsdtSpecTableFull,       // libbpf's USDT spec table is full: a GPU producer not probed
  kPythonGcUnprobed,        // an interpreter with no usable GC anchor
  kRankWorker,              // a process forked by a rank that claims its job and rank
  kCgroupCpuStatMalformed,  // a rank's cpu.stat that does not parse (once per rank)
  kC10dUnsupported,         // a PyTorch c10d library without the backend methods the agent probes
};
const char* label_of(SkipReason r);  // "vanished", "permission", "malformed_proc", ...

// How a rank's collectives on a communicator came to be numbered like its peers'
// (argus_agent_collective_numbering_total{how}).
enum class Numbering : uint8_t {
  kAnchored,   // its communicator's init was seen: counted from its first call
  kReference,  // nobody was anchored: the first late process is the reference
  kMatched,    // matched by call signatures, the nearest in time among those that agree
  kTimeOnly,   // no shift made the signatures agree: the nearest in time
};
const char* label_of(Numbering n);  // "anchored", "reference", "matched", "time_only"

// A bound of the agent's memory that bit (argus_agent_capped_total{structure}):
// one item dropped, refused or cut short because of it.
enum class Cap : uint8_t {
  kStepSketchTime,      // a step sketch closed because no step mark came in time
  kStepSketchRecords,   // ... because it held the most kernels a sketch may hold
  kKernelNames,         // a kernel name refused: the rank has the most names kept
  kGpuTraceRecords,     // a GPU record pushed out of the trace buffer before its time
  kGpuWindowIntervals,  // a busy interval pushed out of the window before its time
  kGpuGaps,             // an idle gap pushed out of the window or trace before its time
  kHostTraceSpans,      // a host call span pushed out of the trace before its time
  kTraceAnswerSpans,    // a span left out of a GET /api/v1/trace answer
  kCommunicators,       // a communicator the tracker refused (the node has the most kept)
  kOpenCollectives,     // an incomplete collective dropped (some member never came)
  kCollectiveSamples,   // a per-rank arrival or lag sample dropped before its time
  kCommHandles,         // an ncclComm_t handle of a process left unnamed
  kExitedRanks,         // an exited rank forgotten before its grace period ended
  kRankCommInits,       // an ncclCommInitRank of a process not kept
  kDetectedEvents,      // a detected event pushed out of the event log
  kPythonSamples,       // a Python stack sample pushed out of a rank's profile before its time
  kProcessGroups,       // a c10d backend, group or NCCL join of a process not kept
};

const char* label_of(Cap c);  // "step_sketch_time", "kernel_names", ...

// Where a record the agent received came from (argus_agent_events_total{source},
// argus_agent_events_lost_total{source}); the same numbers as BPF's enum
// argus_source (the wire layer checks).
enum class EventSource : uint8_t { kProc, kNccl, kCuda, kGpu };
const char* label_of(EventSource s);  // "proc", "nccl", "cuda", "gpu"

// Why a process's Python interpreter could not be read.
enum class LocateError : uint8_t {
  kNotPython,          // it maps no Python interpreter
  kUnsupportedPython,  // an interpreter the agent refuses (version, debug or free-threaded build)
  kUnreadable,         // found, but its memory or files could not be read
};

// How many values each enum has (for tables indexed by them).
template <typename E>
constexpr unsigned kVocabSize = 0;
template <>
inline constexpr unsigned kVocabSize<EventKind> = 8;
template <>
inline constexpr unsigned kVocabSize<SkipReason> = 21;
template <>
inline constexpr unsigned kVocabSize<Numbering> = 4;
template <>
inline constexpr unsigned kVocabSize<EventSource> = 4;
template <>
inline constexpr unsigned kVocabSize<Cap> = 16;

}  // namespace argus
