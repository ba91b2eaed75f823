#include "userspace/model/vocab.h"

namespace argus {

// Each table indexed by an enum is as long as the enum.
static_assert(static_cast<unsigned>(EventKind::kOom) + 1 == kVocabSize<EventKind>);
static_assert(static_cast<unsigned>(SkipReason::kC10dUnsupported) + 1 == kVocabSize<SkipReason>);
static_assert(static_cast<unsigned>(Numbering::kTimeOnly) + 1 == kVocabSize<Numbering>);
static_assert(static_cast<unsigned>(EventSource::kGpu) + 1 == kVocabSize<EventSource>);
static_assert(static_cast<unsigned>(Cap::kPythonSamples) + 1 == kVocabSize<Cap>);

const char* label_of(EventKind k) {
  switch (k) {
    case EventKind::kStraggler: return "straggler";
    case EventKind::kHang: return "hang";
    case EventKind::kLinkDegraded: return "link_degraded";
    case EventKind::kPipelineBubble: return "pipeline_bubble";
    case EventKind::kGcPause: return "gc_pause";
    case EventKind::kRankExit: return "rank_exit";
    case EventKind::kXid: return "xid";
    case EventKind::kOom: return "oom";
  }
  return "unknown";
}

const char* label_of(StragglerReason r) {
  switch (r) {
    case StragglerReason::kNone: return "";
    case StragglerReason::kHost: return "host";
    case StragglerReason::kSync: return "sync";
    case StragglerReason::kGpu: return "gpu";
    case StragglerReason::kCompute: return "compute";
    case StragglerReason::kCpuContention: return "cpu_contention";
    case StragglerReason::kThrottled: return "throttled";
    case StragglerReason::kIo: return "io";
    case StragglerReason::kGcPause: return "gc_pause";
    case StragglerReason::kDataloader: return "dataloader";
  }
  return "";
}

const char* label_of(HangCause c) {
  switch (c) {
    case HangCause::kMissingRank: return "missing_rank";
    case HangCause::kRankDied: return "rank_died";
    case HangCause::kPeersExited: return "peers_exited";
    case HangCause::kNoLocalRankMissing: return "no_local_rank_missing";
    case HangCause::kCollectiveStuck: return "collective_stuck";
    case HangCause::kRankBusy: return "rank_busy";
    case HangCause::kPeerNeverSent: return "peer_never_sent";
  }
  return "unknown";
}

const char* label_of(ExitReason r) {
  switch (r) {
    case ExitReason::kNone: return "";
    case ExitReason::kExit: return "exit";
    case ExitReason::kSignal: return "signal";
    case ExitReason::kOom: return "oom";
  }
  return "";
}

const char* label_of(SkipReason r) {
  switch (r) {
    case SkipReason::kVanished: return "vanished";
    case SkipReason::kPermission: return "permission";
    case SkipReason::kMalformedProc: return "malformed_proc";
    case SkipReason::kProcReadError: return "proc_read_error";
    case SkipReason::kEnvironVanished: return "environ_vanished";
    case SkipReason::kEnvironPermission: return "environ_permission";
    case SkipReason::kEnvironMalformedProc: return "environ_malformed_proc";
    case SkipReason::kEnvironProcReadError: return "environ_proc_read_error";
    case SkipReason::kMalformedMapsLine: return "malformed_maps_line";
    case SkipReason::kUnreadableElf: return "unreadable_elf";
    case SkipReason::kElfLimit: return "elf_limit";
    case SkipReason::kMappedPathMissing: return "mapped_path_missing";
    case SkipReason::kMappedNotRegular: return "mapped_not_regular";
    case SkipReason::kMappedIdentityMismatch: return "mapped_identity_mismatch";
    case SkipReason::kMappedOpenFailed: return "mapped_open_failed";
    case SkipReason::kParseQueueFull: return "parse_queue_full";
    case SkipReason::kUsdtSpecTableFull: return "usdt_spec_table_full";
    case SkipReason::kPythonGcUnprobed: return "python_gc_unprobed";
    case SkipReason::kRankWorker: return "rank_worker";
    case SkipReason::kCgroupCpuStatMalformed: return "cgroup_cpu_stat_malformed";
    case SkipReason::kC10dUnsupported: return "c10d_unsupported";
  }
  return "unknown";
}

const char* label_of(Numbering n) {
  switch (n) {
    case Numbering::kAnchored: return "anchored";
    case Numbering::kReference: return "reference";
    case Numbering::kMatched: return "matched";
    case Numbering::kTimeOnly: return "time_only";
  }
  return "unknown";
}

const char* label_of(EventSource s) {
  switch (s) {
    case EventSource::kProc: return "proc";
    case EventSource::kNccl: return "nccl";
    case EventSource::kCuda: return "cuda";
    case EventSource::kGpu: return "gpu";
  }
  return "unknown";
}

const char* label_of(Cap c) {
  switch (c) {
    case Cap::kStepSketchTime: return "step_sketch_time";
    case Cap::kStepSketchRecords: return "step_sketch_records";
    case Cap::kKernelNames: return "kernel_names";
    case Cap::kGpuTraceRecords: return "gpu_trace_records";
    case Cap::kGpuWindowIntervals: return "gpu_window_intervals";
    case Cap::kGpuGaps: return "gpu_gaps";
    case Cap::kHostTraceSpans: return "host_trace_spans";
    case Cap::kTraceAnswerSpans: return "trace_answer_spans";
    case Cap::kCommunicators: return "communicators";
    case Cap::kOpenCollectives: return "open_collectives";
    case Cap::kCollectiveSamples: return "collective_samples";
    case Cap::kCommHandles: return "comm_handles";
    case Cap::kExitedRanks: return "exited_ranks";
    case Cap::kRankCommInits: return "rank_comm_inits";
    case Cap::kDetectedEvents: return "detected_events";
    case Cap::kPythonSamples: return "python_samples";
    case Cap::kProcessGroups: return "process_groups";
  }
  return "unknown";
}

}  // namespace argus
