#include "userspace/procfs/mapped_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string_view>

namespace argus::procfs {
namespace {

// Each refusal's kind is its skip reason; the message starts with a word for it too.
constexpr std::string_view kVanished = "vanished: ";
constexpr std::string_view kNotRegular = "not_regular: ";
constexpr std::string_view kIdentity = "identity: ";
constexpr std::string_view kPathMissing = "path_missing: ";

// Only an O_PATH handle is taken until the file is known to be the mapped
// regular file: an O_PATH open never opens a FIFO or a device.
constexpr int kPathFlags = O_PATH | O_CLOEXEC;
// O_NONBLOCK: belt and braces, should a FIFO ever get this far.
constexpr int kReadFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

bool gone(int err) { return err == ENOENT || err == ESRCH; }

std::string describe(int pid, const MapEntry& m) {
  return "pid " + std::to_string(pid) + " " + (m.path.empty() ? std::string("<anonymous>") : m.path);
}

// A failed call: gone (ENOENT, ESRCH) is `if_gone`, anything else a failed open.
Refusal errno_error(SkipReason if_gone, int err, const std::string& what) {
  const bool is_gone = gone(err);
  const SkipReason kind = is_gone ? if_gone : SkipReason::kMappedOpenFailed;
  const std::string_view word = !is_gone                                 ? ""
                                : if_gone == SkipReason::kMappedPathMissing ? kPathMissing
                                                                            : kVanished;
  return make_error(kind, std::string(word) + what + ": " + std::strerror(err));
}

// The mapping itself: the kernel resolves the link to the mapped file, whatever
// the path now names. Needs CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE).
UniqueFd path_via_map_files(const std::string& proc_root, int pid, const MapEntry& m) {
  char range[64];
  std::snprintf(range, sizeof(range), "map_files/%lx-%lx", static_cast<unsigned long>(m.start),
                static_cast<unsigned long>(m.end));
  return UniqueFd(::open(pid_path(proc_root, pid, range).c_str(), kPathFlags));
}

// The path resolved inside the process's root: a link (absolute or "..") can
// never climb out of it, and no /proc magic link is followed.
Result<UniqueFd, Refusal> path_in_root(const std::string& proc_root, int pid, const MapEntry& m) {
  UniqueFd root(::open(pid_path(proc_root, pid, "root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.valid()) return errno_error(SkipReason::kVanished, errno, "open the root of " + describe(pid, m));
  open_how how{};
  how.flags = kPathFlags;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root.get(), m.path.c_str(), &how, sizeof(how))));
  if (!fd.valid())
    return errno_error(SkipReason::kMappedPathMissing, errno, "resolve " + describe(pid, m) + " in its root");
  return fd;
}

bool on_overlayfs(int fd) {
  struct statfs fs {};
  return ::fstatfs(fd, &fs) == 0 && static_cast<unsigned long>(fs.f_type) == OVERLAYFS_SUPER_MAGIC;
}

// The fd must be the regular file the maps line names. On overlayfs the line
// shows the backing file's device while fstat shows the overlay's: the inode
// number is the same one (and through map_files the kernel itself chose it).
std::optional<Refusal> check_identity(int fd, bool via_mapping, int pid, const MapEntry& m, const char* how) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_error(SkipReason::kVanished, errno, "stat " + describe(pid, m));
  if (!S_ISREG(st.st_mode))
    return make_error(SkipReason::kMappedNotRegular,
                      std::string(kNotRegular) + describe(pid, m) + " (" + how + ") is not a regular file");
  const bool same_inode = static_cast<uint64_t>(st.st_ino) == m.inode;
  const bool same_dev = major(st.st_dev) == m.dev_major && minor(st.st_dev) == m.dev_minor;
  if (same_inode && same_dev) return std::nullopt;
  if ((same_inode || via_mapping) && on_overlayfs(fd)) return std::nullopt;
  char want[64], got[64];
  std::snprintf(want, sizeof(want), "%x:%x inode %lu", m.dev_major, m.dev_minor, static_cast<unsigned long>(m.inode));
  std::snprintf(got, sizeof(got), "%x:%x inode %lu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long>(st.st_ino));
  return make_error(SkipReason::kMappedIdentityMismatch,
                    std::string(kIdentity) + describe(pid, m) + " (" + how + ") is " + got + ", mapped as " + want);
}

}  // namespace

std::string MappedFile::self_path() const { return "/proc/self/fd/" + std::to_string(fd.get()); }

// Two views of one file must agree before it is read: the mapping itself
// (map_files, where permitted) and the maps path resolved inside the
// process's root. A path that now names something else (a planted link, a
// FIFO, a device, a file outside its root) is refused, even though the mapping
// alone would be safe to read: the process is not behaving like a rank.
Result<MappedFile, Refusal> open_mapped_file(const std::string& proc_root, int pid, const MapEntry& m) {
  UniqueFd mapped = path_via_map_files(proc_root, pid, m);
  if (mapped.valid()) {
    if (auto e = check_identity(mapped.get(), true, pid, m, "its mapping")) return *e;
  } else if (m.deleted) {
    // A deleted file has no path left to resolve: only the mapping reaches it.
    return errno_error(SkipReason::kVanished, errno, "open deleted " + describe(pid, m) + " via map_files");
  }
  const bool via_mapping = mapped.valid();
  UniqueFd chosen = std::move(mapped);
  if (!m.deleted) {
    auto in_root = path_in_root(proc_root, pid, m);
    if (!in_root.ok()) return in_root.failure();
    if (auto e = check_identity(in_root->get(), false, pid, m, "its path")) return *e;
    if (!chosen.valid()) chosen = std::move(*in_root);
  }
  // Now a real open, through the checked handle: it cannot name anything else.
  MappedFile out;
  out.via = via_mapping ? "map_files" : "root";
  const std::string self = "/proc/self/fd/" + std::to_string(chosen.get());
  out.fd.reset(::open(self.c_str(), kReadFlags));
  if (!out.fd.valid()) return errno_error(SkipReason::kMappedOpenFailed, errno, "open " + describe(pid, m));
  if (auto e = check_identity(out.fd.get(), via_mapping, pid, m, "opened")) return *e;
  return out;
}

}  // namespace argus::procfs
