#include "exporters/http_conn.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace argus::httpd {

namespace {

// Milliseconds until deadline, clamped to [0, 60 s] for poll().
int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, 60'000));
}

void ip_and_port(const sockaddr_storage& ss, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
    port = ntohs(a->sin6_port);
  }
  ip = buf;
}

}  // namespace

int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return r;
    if (r < 0 && errno != EINTR) return -1;
    if (r == 0 && Clock::now() >= deadline) return 0;
  }
}

bool ConnStream::wait_next(Clock::time_point until) {
  if (buffered()) return true;
  return wait_fd(fd_, POLLIN, until) > 0;
}

bool ConnStream::is_readable() const { return buffered() || wait_fd(fd_, POLLIN, read_deadline_) > 0; }
bool ConnStream::is_writable() const { return wait_fd(fd_, POLLOUT, write_deadline()) > 0; }

ssize_t ConnStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  // The header budget; after the headers, a backstop for the body (whose length the
  // pre-routing check already held to max_body_bytes).
  const std::size_t limit = in_headers_ ? opts_.max_header_bytes : opts_.max_body_bytes + 64 * 1024;
  std::size_t& used = in_headers_ ? header_bytes_ : body_bytes_;
  if (used >= limit) {
    if (in_headers_) header_too_large_ = true;
    return -1;
  }
  if (pos_ == len_ && !fill()) return eof_ ? 0 : -1;
  std::size_t n = std::min({size, len_ - pos_, limit - used});
  for (std::size_t i = 0; i < n; ++i) {
    if (in_headers_) {
      ++header_bytes_;
      tail_ = (tail_ << 8) | static_cast<unsigned char>(buf_[pos_ + i]);
      if ((tail_ & 0xffffffffu) == 0x0d0a0d0au) in_headers_ = false;  // "\r\n\r\n"
    } else {
      ++body_bytes_;
    }
  }
  std::memcpy(ptr, buf_.data() + pos_, n);
  pos_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnStream::write(const char* ptr, size_t size) {
  if (!write_started_) {
    write_started_ = true;
    write_deadline_ = Clock::now() + opts_.write_timeout;
  }
  std::size_t off = 0;
  while (off < size) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      int n = SSL_write(ssl_, ptr + off, static_cast<int>(std::min<std::size_t>(size - off, 1 << 20)));
      if (n > 0) {
        off += static_cast<std::size_t>(n);
        continue;
      }
      int err = SSL_get_error(ssl_, n);
      short ev = err == SSL_ERROR_WANT_READ ? POLLIN : err == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
      if (ev == 0 || wait_fd(fd_, ev, write_deadline_) <= 0) return fail_write();
      continue;
    }
    ssize_t n = ::send(fd_, ptr + off, size - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_fd(fd_, POLLOUT, write_deadline_) > 0) continue;
    return fail_write();
  }
  return static_cast<ssize_t>(size);
}

void ConnStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  port = 0;
  if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip_and_port(ss, ip, port);
}

void ConnStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  port = 0;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip_and_port(ss, ip, port);
}

bool ConnStream::fill() {
  pos_ = len_ = 0;
  for (;;) {
    if (ssl_ != nullptr) {
      ERR_clear_error();
      int n = SSL_read(ssl_, buf_.data(), static_cast<int>(buf_.size()));
      if (n > 0) {
        len_ = static_cast<std::size_t>(n);
        return true;
      }
      int err = SSL_get_error(ssl_, n);
      if (err == SSL_ERROR_ZERO_RETURN) return end(true);
      short ev = err == SSL_ERROR_WANT_READ ? POLLIN : err == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
      if (ev == 0) return end(err == SSL_ERROR_SYSCALL);  // a TCP close without close_notify
      if (!wait_read(ev)) return false;
      continue;
    }
    ssize_t n = ::recv(fd_, buf_.data(), buf_.size(), 0);
    if (n > 0) {
      len_ = static_cast<std::size_t>(n);
      return true;
    }
    if (n == 0) return end(true);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return end(false);
    if (!wait_read(POLLIN)) return false;
  }
}

bool ConnStream::wait_read(short ev) {
  int r = wait_fd(fd_, ev, read_deadline_);
  if (r == 0) timed_out_ = true;
  if (r < 0) broken_ = true;
  return r > 0;
}

void linger(int fd, std::chrono::milliseconds read_timeout) {
  ::shutdown(fd, SHUT_WR);
  const auto until = Clock::now() + std::min<std::chrono::milliseconds>(read_timeout, std::chrono::seconds(1));
  char sink[4096];
  for (std::size_t drained = 0; drained < (1u << 20);) {
    ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
    if (n > 0) {
      drained += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && wait_fd(fd, POLLIN, until) > 0) continue;
    return;
  }
}

}  // namespace argus::httpd
