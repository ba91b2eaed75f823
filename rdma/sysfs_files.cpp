#include "rdma/sysfs_files.h"

#include <fcntl.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>

#include <spdlog/spdlog.h>

#include "rdma/parse.h"

namespace argus::rdma {

namespace {
constexpr long kSysfsMagic = 0x62656572;
constexpr std::size_t kMaxLoggedKeys = 4096;
}  // namespace

FileMode resolve_file_mode(FileMode mode, const std::string& dir) {
  if (mode != FileMode::kAuto) return mode;
  struct statfs st {};
  if (::statfs(dir.c_str(), &st) == 0 && static_cast<long>(st.f_type) == kSysfsMagic) return FileMode::kHold;
  return FileMode::kReopen;
}

AttrFile& AttrFile::operator=(AttrFile&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void AttrFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

AttrFile::Status AttrFile::read(bool hold, char (&buf)[256], std::string_view& text, int& err) {
  err = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    if (fd_ < 0) {
      fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd_ < 0) {
        err = errno;
        return err == ENOENT || err == ENOTDIR || err == ENODEV ? Status::kMissing : Status::kError;
      }
    }
    ssize_t n;
    do {
      n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
      err = errno;
      close();
      // A held fd of a device that went away (driver reload): reopen once.
      if (hold && attempt == 0 && (err == ENODEV || err == ENOENT || err == ESTALE)) continue;
      return err == ENODEV || err == ENOENT ? Status::kMissing : Status::kError;
    }
    buf[n] = '\0';
    text = std::string_view(buf, static_cast<std::size_t>(n));
    if (!hold) close();
    return Status::kOk;
  }
  return Status::kMissing;
}

bool read_text_file(const std::string& path, std::string& out, int& err) {
  err = 0;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    err = errno;
    return false;
  }
  char buf[4096];
  ssize_t n;
  do {
    n = ::read(fd, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n < 0) err = errno;
  ::close(fd);
  if (n < 0) return false;
  out = std::string(trim(std::string_view(buf, static_cast<std::size_t>(n))));
  return true;
}

void SkipLog::skip(const std::string& reason, const std::string& key, const std::string& message) {
  counts_[reason]++;
  const std::string k = reason + '\0' + key;
  if (logged_.count(k) == 0 && logged_.size() < kMaxLoggedKeys) {
    logged_.insert(k);
    spdlog::warn("rdma: {} (skipped: {}; logged once)", message, reason);
  } else {
    spdlog::debug("rdma: {} (skipped: {})", message, reason);
  }
}

}  // namespace argus::rdma
