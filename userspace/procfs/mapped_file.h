// Opens a file that a process maps, safely, for the root agent to read and probe.
//
// The path in /proc/PID/maps is the process's to choose: inside its mount
// namespace (or after a chroot) it may name a symlink to a host file, a FIFO or
// a device. Opened by path under /proc/PID/root, an absolute symlink resolves
// from the agent's root, so a container could steer the agent to any host file.
// So the file is opened through the mapping itself (/proc/PID/map_files/A-B:
// the kernel hands over the very file that is mapped), or, where that is not
// permitted, with openat2(RESOLVE_IN_ROOT) so that every link stays inside the
// process's root. Before a byte is read the fd must be a regular file whose
// device and inode are the ones the maps line names. The caller then reads and
// attaches through that fd (/proc/self/fd/N), so the probes land on that inode.
#pragma once
#include <string>

#include "userspace/common/result.h"
#include "userspace/model/vocab.h"
#include "userspace/common/unique_fd.h"
#include "userspace/procfs/procfs.h"

namespace argus::procfs {

struct MappedFile {
  UniqueFd fd;
  const char* via = "";  // "map_files" or "root" (openat2 under /proc/PID/root)
  // /proc/self/fd/N: a path the kernel resolves to exactly this open file (libbpf
  // re-opens what it is given, for uprobes and USDT alike).
  std::string self_path() const;
};

// Why a mapped file was refused: its skip reason (kVanished,
// kMappedPathMissing, kMappedNotRegular, kMappedIdentityMismatch or
// kMappedOpenFailed), and a line for the log.
using Refusal = KindError<SkipReason>;
Result<MappedFile, Refusal> open_mapped_file(const std::string& proc_root, int pid, const MapEntry& mapping);

}  // namespace argus::procfs
