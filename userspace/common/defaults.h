// Defaults that more than one part of the agent uses, declared once: the flag
// parser, the runtime's options and every component the runtime configures.
#pragma once

namespace argus {

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

}  // namespace argus
