// One connection's bytes, plain or TLS, under the server's limits: the deadline of a
// whole request (not of each recv), the header budget, the write deadline.
#pragma once
#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "exporters/http_httplib.h"
#include "exporters/http_server.h"

namespace argus::httpd {

using Clock = std::chrono::steady_clock;

// Waits for events on fd until the deadline. >0 ready (or hung up), 0 timed out, <0 error.
int wait_fd(int fd, short events, Clock::time_point deadline);

// One connection's bytes (plain or TLS) under our limits. httplib reads the request
// line and headers through it byte by byte, so it sees where the headers end: until
// then at most max_header_bytes are handed out, and every read of a request must be
// done before that request's deadline, however busy the client keeps the socket.
class ConnStream final : public httplib::Stream {
 public:
  ConnStream(int fd, SSL* ssl, const HttpServerOptions& opts) : fd_(fd), ssl_(ssl), opts_(opts) {}

  void begin_request(Clock::time_point read_deadline) {
    read_deadline_ = read_deadline;
    write_started_ = false;
    in_headers_ = true;
    header_bytes_ = 0;
    body_bytes_ = 0;
    tail_ = 0;
    header_too_large_ = false;
    timed_out_ = false;
  }
  bool timed_out() const { return timed_out_; }
  bool header_too_large() const { return header_too_large_; }
  bool eof() const { return eof_; }
  bool broken() const { return broken_; }
  bool buffered() const { return pos_ < len_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0); }

  // Waits (until `until`) for the first byte of another request on a kept-alive connection.
  bool wait_next(Clock::time_point until);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return fd_; }

 private:
  Clock::time_point write_deadline() const {
    return write_started_ ? write_deadline_ : Clock::now() + opts_.write_timeout;
  }
  ssize_t fail_write() {
    broken_ = true;
    return -1;
  }

  // Refills the buffer: false at EOF, on an error, or when the request's deadline passed.
  bool fill();
  bool wait_read(short ev);
  bool end(bool eof) {
    (eof ? eof_ : broken_) = true;
    return false;
  }

  int fd_;
  SSL* ssl_;
  const HttpServerOptions& opts_;
  std::array<char, 16 * 1024> buf_{};
  std::size_t pos_ = 0, len_ = 0;
  Clock::time_point read_deadline_{};
  Clock::time_point write_deadline_{};
  bool write_started_ = false;
  bool in_headers_ = true;
  std::size_t header_bytes_ = 0, body_bytes_ = 0;
  uint64_t tail_ = 0;
  bool header_too_large_ = false, timed_out_ = false, eof_ = false, broken_ = false;
};

// Tells the client we are done and reads what it still sends (briefly: at most
// read_timeout, and no more than a second), so that closing with unread input does
// not reset the connection before it read our answer.
void linger(int fd, std::chrono::milliseconds read_timeout);

}  // namespace argus::httpd
