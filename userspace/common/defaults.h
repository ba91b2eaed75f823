// Defaults that more than one part of the agent uses, declared once: the flag
// parser, the runtime's options and every component the runtime configures.
#pragma once
#include <cstddef>

namespace argus {

// Where the agent reads the host from, unless a flag says otherwise (every
// component's default; the flags' too).
inline constexpr const char* kDefaultProcRoot = "/proc";
inline constexpr const char* kDefaultSysfsRoot = "/sys";
inline constexpr const char* kDefaultBtfPath = "/sys/kernel/btf/vmlinux";
inline constexpr const char* kDefaultKmsgPath = "/dev/kmsg";
inline constexpr const char* kDefaultPodLogsDir = "/var/log/pods";
inline constexpr const char* kDefaultContainerLogsDir = "/var/log/containers";
inline constexpr const char* kDefaultListen = "0.0.0.0:9745";

// --window: the analysis window of every ratio, lag and detector, in seconds.
// The Prometheus rules read it from argus_agent_window_seconds.
inline constexpr double kDefaultWindowSeconds = 10;
// --exit-grace: how long an exited rank stays visible, in seconds.
inline constexpr double kDefaultExitGraceSeconds = 300;
// --ringbuf-kb: the BPF ring buffer, in KiB.
inline constexpr unsigned kDefaultRingbufKiB = 4096;
// --probe-release-seconds: how long the probes of a library stay after the last
// process that maps it is gone (a restarted job maps it again within seconds).
inline constexpr double kDefaultProbeReleaseSeconds = 60;
// Slots of libbpf's USDT spec table (its default is 256: ~128 producer files).
// Slots of a released producer are reused.
inline constexpr unsigned kUsdtSpecSlots = 1024;
// --python-sample-hz: the Python stack sampler's rate per CPU (0: off). Prime,
// so that it never beats in step with a periodic job.
inline constexpr unsigned kDefaultPythonSampleHz = 19;

// Bounds on what the agent keeps (each bound that bites is counted in
// argus_agent_capped_total{structure}, userspace/common/caps.h). Sized for a
// node of 8 ranks running thousands of kernels per step.

// A rank's step sketch closes at the next step mark (its first collective after a
// quiet gap), or on time when none comes (a producer that never calls NCCL:
// inference, one GPU, Gloo), or when it holds this many kernels (16 B each).
inline constexpr double kDefaultMaxStepSketchSeconds = 60;
inline constexpr size_t kDefaultMaxStepSketchKernels = 131072;
// Kernel names kept per rank (each up to 255 bytes); later ones read "kernel#<id>".
inline constexpr size_t kDefaultMaxKernelNamesPerRank = 8192;
// GPU records (48 B) and idle gaps kept per rank for the trace (the last 60 s), and
// busy intervals and gaps per rank for the window.
inline constexpr double kDefaultTraceSeconds = 60;
inline constexpr size_t kDefaultMaxTraceRecordsPerRank = 200000;
inline constexpr size_t kDefaultMaxWindowIntervalsPerRank = 200000;
// Host call spans (collectives, synchronize waits) kept per rank for the trace.
inline constexpr size_t kDefaultMaxHostSpansPerRank = 50000;
// Spans in one GET /api/v1/trace answer, all ranks together (about 150 B of JSON each).
inline constexpr size_t kDefaultMaxTraceAnswerSpans = 100000;
// Communicators the collective tracker follows on the node, and ncclComm_t handles
// (and ncclCommInitRank records) kept per process.
inline constexpr size_t kDefaultMaxCommunicators = 4096;
inline constexpr size_t kDefaultMaxCommsPerRank = 1024;
// Arrival and lag samples kept per rank for the window (a rank issuing more
// collectives than this per window is judged on its latest ones).
inline constexpr size_t kDefaultMaxCollectiveSamplesPerRank = 65536;
// Exited ranks kept for --exit-grace: past this many, the oldest goes first.
inline constexpr size_t kDefaultMaxExitedRanks = 1024;
// Detected events kept for GET /api/v1/events, oldest out first.
inline constexpr size_t kDefaultMaxDetectedEvents = 10000;

}  // namespace argus
