// uprobe_multi links (kernel >= 6.6) through the raw bpf() syscall: libbpf 1.1
// has no wrapper for them. One link holds every probe of one program on one
// file, and closing it waits for one RCU grace period for all of them, where
// perf-event uprobes wait one per probe (~0.1 s each here: 100 probes took ~10 s
// to stop, past a pod's termination grace period).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "userspace/common/result.h"

namespace argus::uprobe_multi {

// BPF_TRACE_UPROBE_MULTI in the kernel's enum bpf_attach_type (6.6+); Debian
// bookworm's headers (6.1) lack it. A program attached this way must be loaded
// with it as its expected attach type, and then cannot attach as a perf event.
inline constexpr uint32_t kAttachType = 48;

// Whether this kernel creates uprobe_multi links: a probe program is loaded
// with the attach type and linked to "/" (a directory), which a kernel that
// has them refuses with EBADF, as libbpf's own feature probe does. `why` says
// what answered otherwise.
bool supported(std::string* why = nullptr);

// One link for `offsets` in `path` (every process), each with its cookie.
// Returns the link's fd.
Result<int> attach(int prog_fd, const std::string& path, const std::vector<uint64_t>& offsets,
                   const std::vector<uint64_t>& cookies, bool retprobe);

}  // namespace argus::uprobe_multi
