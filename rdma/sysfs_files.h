// Small-file reading for pollers of sysfs attributes, and the counted, logged skips.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace argus::rdma {

// How attribute files are read on each poll.
//  - kHold: open once, then pread(fd, 0) each poll. On sysfs this re-runs the attribute's
//    show() (the kernel documents "seek to 0 and read again"), one syscall per file.
//  - kReopen: open, read, close each poll (3 syscalls). Needed on fixture trees whose
//    writers replace files by rename: a held fd would keep reading the old file.
//  - kAuto: kHold when the tree is on sysfs (statfs magic), else kReopen.
enum class FileMode { kAuto, kHold, kReopen };

// kAuto resolved for `dir`.
FileMode resolve_file_mode(FileMode mode, const std::string& dir);

// One attribute file read again and again (move-only: owns an fd in kHold mode).
class AttrFile {
 public:
  enum class Status { kOk, kMissing, kError };

  AttrFile() = default;
  explicit AttrFile(std::string path) : path_(std::move(path)) {}
  AttrFile(const AttrFile&) = delete;
  AttrFile& operator=(const AttrFile&) = delete;
  AttrFile(AttrFile&& o) noexcept : path_(std::move(o.path_)), fd_(o.fd_) { o.fd_ = -1; }
  AttrFile& operator=(AttrFile&& o) noexcept;
  ~AttrFile() { close(); }

  // Reads up to 255 bytes into `buf`, sets `text` to what was read. `err` gets errno on failure.
  Status read(bool hold, char (&buf)[256], std::string_view& text, int& err);
  void close();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Whole small file (<= 4 KiB) as text with surrounding whitespace trimmed; false if unreadable.
bool read_text_file(const std::string& path, std::string& out, int& err);

// Skips by reason, each logged (warn) the first time for its key, later ones at debug.
class SkipLog {
 public:
  void skip(const std::string& reason, const std::string& key, const std::string& message);
  const std::map<std::string, uint64_t>& counts() const { return counts_; }

 private:
  std::map<std::string, uint64_t> counts_;
  std::set<std::string> logged_;
};

}  // namespace argus::rdma
