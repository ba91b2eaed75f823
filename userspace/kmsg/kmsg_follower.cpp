#include "userspace/kmsg/kmsg_follower.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "userspace/kmsg/xid.h"

namespace argus::kmsg {

Result<KmsgFollower> KmsgFollower::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + path + ": " + std::strerror(errno));
  KmsgFollower f(fd);
  if (::lseek(fd, 0, SEEK_END) < 0) return make_error("cannot seek to the end of " + path + ": " + std::strerror(errno));
  return f;
}

KmsgFollower::KmsgFollower(KmsgFollower&& other) noexcept
    : fd_(other.fd_), last_seq_(other.last_seq_), have_seq_(other.have_seq_), lost_(other.lost_) {
  other.fd_ = -1;
}

KmsgFollower& KmsgFollower::operator=(KmsgFollower&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    last_seq_ = other.last_seq_;
    have_seq_ = other.have_seq_;
    lost_ = other.lost_;
    other.fd_ = -1;
  }
  return *this;
}

KmsgFollower::~KmsgFollower() {
  if (fd_ >= 0) ::close(fd_);
}

void KmsgFollower::note_seq(std::string_view record) {
  auto r = parse_kmsg_record(record);
  if (!r) return;
  if (have_seq_ && r->seq > last_seq_ + 1) lost_ += r->seq - last_seq_ - 1;
  last_seq_ = r->seq;
  have_seq_ = true;
}

int KmsgFollower::poll(int timeout_ms, const std::function<void(std::string_view)>& on_record, int wake_fd) {
  pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd, POLLIN, 0}};
  const int ready = ::poll(p, wake_fd >= 0 ? 2 : 1, timeout_ms);
  if (ready < 0) return errno == EINTR ? 0 : -errno;
  if (ready == 0 || (p[0].revents & (POLLIN | POLLERR)) == 0) return 0;
  int n = 0;
  char buf[16384];  // a record is at most ~8 KiB (PRINTKRB_RECORD_MAX and its dictionary)
  for (int i = 0; i < 1024; ++i) {  // bounded: the loop's caller checks its stop flag between polls
    const ssize_t len = ::read(fd_, buf, sizeof(buf));
    if (len < 0) {
      if (errno == EAGAIN || errno == EINTR) break;
      if (errno == EPIPE) continue;  // overwritten while we looked: the next read resumes; the gap counts it
      return n > 0 ? n : -errno;
    }
    if (len == 0) break;
    const std::string_view record(buf, static_cast<size_t>(len));
    note_seq(record);
    on_record(record);
    ++n;
  }
  return n;
}

}  // namespace argus::kmsg
