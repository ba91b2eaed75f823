#include "exporters/http_server.h"
#include "userspace/common/thread_name.h"

// cpp-httplib is built by Debian with OpenSSL, zlib and brotli support; its Request
// layout depends on those defines, which pkg-config (cpp-httplib) hands to the compiler.
#if !defined(CPPHTTPLIB_OPENSSL_SUPPORT) || !defined(CPPHTTPLIB_ZLIB_SUPPORT) || !defined(CPPHTTPLIB_BROTLI_SUPPORT)
#error "compile with the cpp-httplib defines from pkg-config (OPENSSL, ZLIB and BROTLI support)"
#endif
#include <httplib.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <list>
#include <set>
#include <system_error>

#include <spdlog/spdlog.h>

namespace argus {

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> out;
  std::size_t start = (!path.empty() && path[0] == '/') ? 1 : 0;
  for (;;) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string::npos) {
      out.push_back(path.substr(start));
      break;
    }
    out.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return out;
}

std::string host_for_message(const std::string& host) {
  if (host.find(':') != std::string::npos) return "[" + host + "]";
  return host;
}

// Milliseconds until deadline, clamped to [0, 60 s] for poll().
int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left, 60'000));
}

// Waits for events on fd until the deadline. >0 ready (or hung up), 0 timed out, <0 error.
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r > 0) return r;
    if (r < 0 && errno != EINTR) return -1;
    if (r == 0 && Clock::now() >= deadline) return 0;
  }
}

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtx = std::unique_ptr<SSL_CTX, SslCtxFree>;

// Cert and key as one SSL_CTX, or one line saying which file is wrong and why.
Result<std::shared_ptr<SSL_CTX>> load_tls(const std::string& cert, const std::string& key) {
  if (cert.empty() != key.empty())
    return make_error(cert.empty() ? "--tls-key needs --tls-cert" : "--tls-cert needs --tls-key");
  for (const auto& [flag, path] : {std::pair{"--tls-cert", cert}, std::pair{"--tls-key", key}}) {
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return make_error(std::string("cannot read ") + flag + " " + path + ": " + std::strerror(errno));
    std::fclose(f);
  }
  ERR_clear_error();
  SslCtx ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return make_error("cannot create a TLS context: " + openssl_error());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    return make_error("--tls-cert " + cert + " is not a usable PEM certificate: " + openssl_error());
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return make_error("--tls-key " + key + " does not match --tls-cert " + cert);
    }
    return make_error("--tls-key " + key + " is not a usable PEM private key: " + openssl_error());
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return make_error("--tls-key " + key + " does not match --tls-cert " + cert);
  return std::shared_ptr<SSL_CTX>(ctx.release(), SslCtxFree{});
}

// SHA-256 of s: tokens are compared as digests, in constant time and length.
std::array<unsigned char, SHA256_DIGEST_LENGTH> sha256(const std::string& s) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

// The token of an "Authorization: Bearer TOKEN" value; "" if it is not one.
std::string bearer_token(const std::string& value) {
  std::size_t sp = value.find_first_of(" \t");
  if (sp == std::string::npos || lower(value.substr(0, sp)) != "bearer") return "";
  std::size_t b = value.find_first_not_of(" \t", sp);
  if (b == std::string::npos) return "";
  std::size_t e = value.find_last_not_of(" \t");
  return value.substr(b, e - b + 1);
}

// A connection's bind: blocking (httplib's accept loop blocks), a generous backlog so a
// burst of clients is not refused before our own caps apply.
Result<int> bind_listen(const std::string& listen, const std::string& host_in, uint16_t port) {
  std::string host = host_in.empty() ? "0.0.0.0" : host_in;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(port);
  int gai = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    return make_error("invalid --listen address '" + listen + "': cannot resolve '" + host + "': " +
                      ::gai_strerror(gai));
  }
  int fd = -1;
  int last_errno = 0;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) break;
    last_errno = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0)
    return make_error("cannot listen on " + host_for_message(host) + ":" + port_str + ": " + std::strerror(last_errno));
  return fd;
}

uint16_t bound_port(int fd, uint16_t fallback) {
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) != 0) return fallback;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fallback;
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
  bool wait_next(Clock::time_point until) {
    if (buffered()) return true;
    return wait_fd(fd_, POLLIN, until) > 0;
  }

  bool is_readable() const override { return buffered() || wait_fd(fd_, POLLIN, read_deadline_) > 0; }
  bool is_writable() const override { return wait_fd(fd_, POLLOUT, write_deadline()) > 0; }

  ssize_t read(char* ptr, size_t size) override {
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

  ssize_t write(const char* ptr, size_t size) override {
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

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    port = 0;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip_and_port(ss, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    port = 0;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) ip_and_port(ss, ip, port);
  }
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
  bool fill() {
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
  bool wait_read(short ev) {
    int r = wait_fd(fd_, ev, read_deadline_);
    if (r == 0) timed_out_ = true;
    if (r < 0) broken_ = true;
    return r > 0;
  }
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

// What one connection's request left for the code after httplib: whether our
// handler ran, why it was refused, whether the connection must close.
struct ConnState {
  ConnStream* stream = nullptr;
  bool dispatched = false;
  const char* reject = nullptr;  // counted when set (note_reject), once per request
  bool close_after = false;
};

// httplib calls our hooks on the connection's own thread: they find its state here.
thread_local ConnState* tl_conn = nullptr;
// Set by the task queue around a connection it cannot serve: answer 503 and close.
thread_local bool tl_over_capacity = false;
// When the connection was accepted (its first request's deadline counts from there).
thread_local Clock::time_point tl_accepted_at{};

constexpr char kBusyResponse[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 20\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections";

}  // namespace

// Counters and live connections, shared by every start() of one HttpServer.
struct HttpServer::Impl {
  HttpServerOptions opts;
  std::shared_ptr<SSL_CTX> tls;  // null: plain HTTP
  std::array<unsigned char, SHA256_DIGEST_LENGTH> token_digest{};
  bool auth = false;

  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> active{0};
  std::atomic<uint64_t> queued{0};
  mutable std::mutex mu;
  std::map<std::string, uint64_t> rejections;
  std::set<int> conns;

  // The running httplib server and its accept thread (one per start()).
  std::unique_ptr<httplib::Server> backend;
  std::thread listener;
  std::atomic<bool> listener_done{true};

  void count(const char* reason) {
    std::lock_guard lock(mu);
    ++rejections[reason];
  }
  // A request refused: counted at once (before the answer goes out), once.
  void note_reject(ConnState* st, const char* reason) {
    if (st == nullptr) {
      count(reason);
    } else if (st->reject == nullptr) {
      st->reject = reason;
      count(reason);
    }
  }
  // Registers a connection; false when the server is stopping (then close it at once).
  bool add_conn(int fd) {
    std::lock_guard lock(mu);
    if (stopping) return false;
    conns.insert(fd);
    return true;
  }
  void remove_conn(int fd) {
    std::lock_guard lock(mu);
    conns.erase(fd);
  }
  // Wakes every connection thread out of its poll: they see EOF and end.
  void drop_conns() {
    std::lock_guard lock(mu);
    for (int fd : conns) ::shutdown(fd, SHUT_RDWR);
  }
  bool authorized(const std::string& authorization) const {
    if (!auth) return true;
    const auto got = sha256(bearer_token(authorization));
    return CRYPTO_memcmp(got.data(), token_digest.data(), got.size()) == 0;
  }
};

namespace {

// Each connection on its own thread, up to max_connections; then a bounded queue;
// beyond that the connection is answered 503 on the accepting thread. Idle threads
// wait a while for more work and then exit, so a flood leaves no thread behind.
class ConnQueue final : public httplib::TaskQueue {
 public:
  explicit ConnQueue(std::shared_ptr<HttpServer::Impl> impl) : impl_(std::move(impl)) {}
  ~ConnQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mu_);
    reap_locked();
    if (!stop_) {
      jobs_.push_back({std::move(fn), Clock::now()});
      if (idle_ >= jobs_.size()) {
        cv_.notify_one();
        return;
      }
      if (live_ < impl_->opts.max_connections && spawn_locked()) return;
      if (jobs_.size() - idle_ <= impl_->opts.max_queued) {
        impl_->queued.fetch_add(1);
        cv_.notify_one();
        return;
      }
      fn = std::move(jobs_.back().fn);
      jobs_.pop_back();
    }
    lock.unlock();
    tl_over_capacity = true;
    fn();
    tl_over_capacity = false;
  }

  void shutdown() override {
    std::list<Worker> workers;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      workers.swap(workers_);
    }
    cv_.notify_all();
    for (auto& w : workers) w.thread.join();
  }

 private:
  struct Job {
    std::function<void()> fn;
    Clock::time_point accepted;
  };
  struct Worker {
    std::thread thread;
    bool done = false;
  };
  static constexpr std::size_t kKeepIdleThreads = 4;
  static constexpr auto kIdleExit = std::chrono::seconds(30);

  bool spawn_locked() {
    workers_.emplace_back();
    Worker* w = &workers_.back();
    try {
      w->thread = std::thread([this, w] {
        name_this_thread("argus-http");
        work(w);
      });
    } catch (const std::system_error& e) {
      spdlog::warn("http: cannot start a connection thread: {}", e.what());
      workers_.pop_back();
      return false;
    }
    ++live_;
    return true;
  }

  void reap_locked() {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();  // it set done as its last step under mu_: no deadlock
      it = workers_.erase(it);
    }
  }

  void work(Worker* self) {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_;
      const bool woke = cv_.wait_for(lock, kIdleExit, [&] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) {
        if (stop_ || (!woke && live_ > kKeepIdleThreads)) break;
        continue;
      }
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      tl_accepted_at = job.accepted;
      job.fn();  // process_and_close_socket: never throws out (it catches)
      job.fn = nullptr;
      lock.lock();
    }
    --live_;
    self->done = true;
  }

  std::shared_ptr<HttpServer::Impl> impl_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::list<Worker> workers_;
  std::size_t live_ = 0, idle_ = 0;
  bool stop_ = false;
};

// httplib's server with our connection loop: our stream (limits, deadline, TLS) under
// its request parser and response writer.
class Backend final : public httplib::Server {
 public:
  explicit Backend(std::shared_ptr<HttpServer::Impl> impl) : impl_(std::move(impl)) {}
  void adopt(int listen_fd) { svr_sock_ = listen_fd; }

 private:
  bool process_and_close_socket(socket_t sock) override {
    try {
      serve(sock);
    } catch (const std::exception& e) {  // out of memory and the like: this connection only
      spdlog::warn("http: connection failed: {}", e.what());
    }
    ::close(sock);
    return true;
  }

  void serve(int fd) {
    if (tl_over_capacity) {
      impl_->count(kRejectOverCapacity);
      ssize_t n = ::send(fd, kBusyResponse, sizeof(kBusyResponse) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)n;
      ::shutdown(fd, SHUT_WR);
      return;
    }
    const HttpServerOptions& o = impl_->opts;
    const Clock::time_point accepted = tl_accepted_at == Clock::time_point{} ? Clock::now() : tl_accepted_at;
    int flags = ::fcntl(fd, F_GETFL, 0);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (!impl_->add_conn(fd)) return;
    impl_->active.fetch_add(1);
    struct Leave {
      HttpServer::Impl* impl;
      int fd;
      ~Leave() {
        impl->remove_conn(fd);
        impl->active.fetch_sub(1);
      }
    } leave{impl_.get(), fd};

    std::unique_ptr<SSL, decltype(&SSL_free)> ssl(nullptr, SSL_free);
    if (impl_->tls) {
      ssl.reset(SSL_new(impl_->tls.get()));
      if (!ssl || SSL_set_fd(ssl.get(), fd) != 1 || !handshake(ssl.get(), fd, accepted + o.read_timeout)) {
        impl_->count(kRejectTls);
        return;
      }
    }
    ConnStream strm(fd, ssl.get(), o);
    ConnState st;
    tl_conn = &st;
    bool wrote = false;
    for (std::size_t i = 0; i < o.keep_alive_max_requests && !impl_->stopping; ++i) {
      if (i > 0 && !strm.wait_next(Clock::now() + o.keep_alive_timeout)) break;
      strm.begin_request(i == 0 ? accepted + o.read_timeout : Clock::now() + o.read_timeout);
      st = ConnState{&strm};
      bool client_closes = false;
      const bool last = i + 1 == o.keep_alive_max_requests;
      const bool ok = process_request(strm, last, client_closes, nullptr);
      // Cut off before httplib had a request line to answer: counted here.
      if (strm.timed_out()) impl_->note_reject(&st, kRejectReadTimeout);
      if (strm.header_too_large()) impl_->note_reject(&st, kRejectHeaderTooLarge);
      wrote = wrote || ok;
      if (!ok || client_closes || st.close_after || st.reject || strm.eof() || strm.broken()) break;
    }
    tl_conn = nullptr;
    if (ssl) {
      ERR_clear_error();
      SSL_shutdown(ssl.get());  // one try: a close_notify if the socket takes it now
    }
    if (wrote && !strm.eof() && !strm.broken()) linger(fd);
  }

  // Tells the client we are done and reads what it still sends (briefly), so that
  // closing with unread input does not reset the connection before it read our answer.
  void linger(int fd) {
    ::shutdown(fd, SHUT_WR);
    const auto until = Clock::now() + std::min<std::chrono::milliseconds>(impl_->opts.read_timeout, std::chrono::seconds(1));
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

  static bool handshake(SSL* ssl, int fd, Clock::time_point deadline) {
    for (;;) {
      ERR_clear_error();
      int r = SSL_accept(ssl);
      if (r == 1) return true;
      int err = SSL_get_error(ssl, r);
      short ev = err == SSL_ERROR_WANT_READ ? POLLIN : err == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
      if (ev == 0) {
        spdlog::debug("http: TLS handshake failed: {}", openssl_error());
        return false;
      }
      if (wait_fd(fd, ev, deadline) <= 0) return false;
    }
  }

  std::shared_ptr<HttpServer::Impl> impl_;
};

// The request as our handlers see it; false (and a 400 in res) on a bad escape.
bool to_request(const httplib::Request& in, HttpRequest& out, httplib::Response& res) {
  out.method = in.method;
  const std::string& target = in.target;  // as sent, less any fragment
  if (target.empty() || target[0] != '/') {
    res.status = 400;
    res.set_content("the request target must be a path\n", "text/plain; charset=utf-8");
    return false;
  }
  auto qm = target.find('?');
  out.path = target.substr(0, qm);
  if (qm != std::string::npos) out.raw_query = target.substr(qm + 1);
  for (const auto& [k, v] : in.headers) {
    // httplib adds the peer's and our address as pseudo-headers: not the client's.
    if (k == "REMOTE_ADDR" || k == "REMOTE_PORT" || k == "LOCAL_ADDR" || k == "LOCAL_PORT") continue;
    std::string name = lower(k);
    auto it = out.headers.find(name);
    if (it == out.headers.end()) {
      out.headers.emplace(std::move(name), v);
    } else {
      it->second += ", " + v;
    }
  }
  std::size_t start = 0;
  while (qm != std::string::npos && start <= out.raw_query.size()) {
    auto amp = out.raw_query.find('&', start);
    std::string part = out.raw_query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
    if (!part.empty()) {
      auto eq = part.find('=');
      auto k = percent_decode(part.substr(0, eq), true);
      auto v = percent_decode(eq == std::string::npos ? "" : part.substr(eq + 1), true);
      if (!k || !v) {
        res.status = 400;
        res.set_content("bad percent-encoding in the query\n", "text/plain; charset=utf-8");
        return false;
      }
      out.query[*k] = *v;
    }
    if (amp == std::string::npos) break;
    start = amp + 1;
  }
  return true;
}

void to_response(const HttpResponse& in, httplib::Response& out) {
  out.status = in.status;
  auto clean = [](const std::string& s) { return s.find_first_of("\r\n") == std::string::npos; };
  for (const auto& [k, v] : in.headers) {
    // A handler's header must not smuggle in lines or contradict the framing.
    if (k.empty() || !clean(k) || !clean(v) || k.find(':') != std::string::npos) continue;
    const std::string lk = lower(k);
    if (lk == "content-length" || lk == "connection" || lk == "transfer-encoding" || lk == "content-type" ||
        lk == "keep-alive" || lk == "content-encoding")
      continue;
    out.set_header(k, v);
  }
  out.set_content(in.body, clean(in.content_type) && !in.content_type.empty() ? in.content_type.c_str() : "text/plain");
}

bool body_method(const std::string& m) {
  return m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE" || m == "PRI";
}

}  // namespace

HttpResponse HttpResponse::text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse HttpResponse::json(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

const char* http_reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

Result<std::string> percent_decode(const std::string& s, bool plus_as_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%') {
      if (i + 2 >= s.size()) return make_error("bad percent-encoding in '" + s + "'");
      int hi = hex(s[i + 1]);
      int lo = hex(s[i + 2]);
      if (hi < 0 || lo < 0) return make_error("bad percent-encoding in '" + s + "'");
      out.push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (c == '+' && plus_as_space) {
      out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<ListenAddress> parse_listen_address(const std::string& listen) {
  auto bad = [&](const std::string& why) {
    return make_error("invalid --listen address '" + listen + "': " + why);
  };
  const std::string expected = "expected ADDR:PORT (e.g. 0.0.0.0:9745 or [::1]:9745)";
  ListenAddress out;
  std::string port_str;
  if (listen.empty()) return bad(expected);
  if (listen[0] == '[') {
    auto close = listen.find(']');
    if (close == std::string::npos) return bad(expected);
    out.host = listen.substr(1, close - 1);
    if (close + 1 >= listen.size() || listen[close + 1] != ':') return bad(expected);
    port_str = listen.substr(close + 2);
    in6_addr a6{};
    if (::inet_pton(AF_INET6, out.host.c_str(), &a6) != 1) {
      return bad("'" + out.host + "' is not an IPv6 address");
    }
  } else {
    auto colon = listen.rfind(':');
    if (colon == std::string::npos) return bad(expected);
    out.host = listen.substr(0, colon);
    port_str = listen.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      return bad("put an IPv6 address in brackets, e.g. [::1]:9745");
    }
    if (out.host == "*") out.host.clear();
    for (char c : out.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return bad("'" + out.host + "' is not an address or host name");
      }
    }
  }
  if (port_str.empty() || port_str.size() > 5 ||
      !std::all_of(port_str.begin(), port_str.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return bad("port must be a number 0-65535");
  }
  unsigned long port = std::stoul(port_str);
  if (port > 65535) return bad("port must be a number 0-65535");
  out.port = static_cast<uint16_t>(port);
  return out;
}

Result<bool> check_tls_files(const std::string& cert_file, const std::string& key_file) {
  auto ctx = load_tls(cert_file, key_file);
  if (!ctx) return make_error(ctx.error());
  return true;
}

HttpServer::HttpServer(HttpServerOptions options) : opts_(std::move(options)), impl_(std::make_shared<Impl>()) {
  impl_->opts = opts_;
  impl_->auth = !opts_.auth_token.empty();
  if (impl_->auth) impl_->token_digest = sha256(opts_.auth_token);
}

HttpServer::~HttpServer() { stop(); }

std::size_t HttpServer::active_connections() const { return impl_->active.load(); }
uint64_t HttpServer::queued_total() const { return impl_->queued.load(); }
std::map<std::string, uint64_t> HttpServer::rejections() const {
  std::lock_guard lock(impl_->mu);
  return impl_->rejections;
}

void HttpServer::route(std::string method, std::string path_pattern, HttpHandler handler) {
  Route r{std::move(method), split_path(path_pattern), std::move(handler)};
  std::unique_lock lock(routes_mu_);
  routes_.push_back(std::move(r));
}

Result<uint16_t> HttpServer::start(const std::string& listen) {
  std::lock_guard life(lifecycle_mu_);
  if (running_) return make_error("HTTP server already listening on port " + std::to_string(port_.load()));
  auto addr = parse_listen_address(listen);
  if (!addr) return make_error(addr.error());
  impl_->tls.reset();
  if (!opts_.tls_cert_file.empty() || !opts_.tls_key_file.empty()) {
    auto ctx = load_tls(opts_.tls_cert_file, opts_.tls_key_file);
    if (!ctx) return make_error(ctx.error());
    impl_->tls = *ctx;
    // OpenSSL writes to the socket without MSG_NOSIGNAL: a client gone mid-answer must
    // not kill the process. (The agent ignores SIGPIPE anyway; this covers other users.)
    struct sigaction old{};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  }
  auto fd = bind_listen(listen, addr->host, addr->port);
  if (!fd) return make_error(fd.error());
  const uint16_t bound = bound_port(*fd, addr->port);

  auto backend = std::make_unique<Backend>(impl_);
  Impl* impl = impl_.get();
  backend->set_payload_max_length(opts_.max_body_bytes);
  backend->set_keep_alive_max_count(std::max<std::size_t>(opts_.keep_alive_max_requests, 1));
  backend->set_keep_alive_timeout(
      std::max<time_t>(1, std::chrono::duration_cast<std::chrono::seconds>(opts_.keep_alive_timeout).count()));
  backend->new_task_queue = [self = impl_] { return new ConnQueue(self); };

  // Our handler, for a request whose body httplib has read (or that has none).
  auto handle = [this, impl](const httplib::Request& req, httplib::Response& res) {
    ConnState* st = tl_conn;
    if (st) st->dispatched = true;
    HttpRequest r;
    if (!to_request(req, r, res)) {
      impl->note_reject(st, kRejectBadRequest);
      if (st) st->close_after = true;
      return;
    }
    const bool health = (r.method == "GET" || r.method == "HEAD") && r.path == "/healthz";
    if (!health && !impl->authorized(req.get_header_value("Authorization"))) {
      impl->note_reject(st, kRejectUnauthorized);
      auto deny = HttpResponse::json(401, "{\"error\":\"missing or wrong bearer token (Authorization: Bearer ...)\"}");
      deny.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"argus\"");
      to_response(deny, res);
      return;
    }
    to_response(dispatch(r), res);
  };
  // Before httplib reads a body: refuse what we do not take, and answer every request
  // without a body here (httplib would read a body-less POST until EOF).
  backend->set_pre_routing_handler([impl, handle](const httplib::Request& req, httplib::Response& res) {
    ConnState* st = tl_conn;
    auto refuse = [&](int status, const char* reason, const std::string& why) {
      res.status = status;
      res.set_content(why + "\n", "text/plain; charset=utf-8");
      impl->note_reject(st, reason);
      if (st) st->close_after = true;
      return httplib::Server::HandlerResponse::Handled;
    };
    if (req.has_header("Transfer-Encoding"))
      return refuse(501, kRejectBadRequest, "Transfer-Encoding in requests is not supported");
    if (req.has_header("Content-Encoding"))
      return refuse(415, kRejectBadRequest, "Content-Encoding in requests is not supported");
    uint64_t length = 0;
    const std::size_t copies = req.get_header_value_count("Content-Length");
    for (std::size_t i = 0; i < copies; ++i) {
      const std::string v = req.get_header_value("Content-Length", i);
      if (v.empty() || v.size() > 15 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return refuse(400, kRejectBadRequest, "bad Content-Length");
      const uint64_t n = std::stoull(v);
      if (i > 0 && n != length) return refuse(400, kRejectBadRequest, "bad Content-Length");
      length = n;
    }
    if (length > impl->opts.max_body_bytes) return refuse(413, kRejectBodyTooLarge, "request body too large");
    if (body_method(req.method) && length > 0) return httplib::Server::HandlerResponse::Unhandled;
    if (length > 0 && st) st->close_after = true;  // httplib leaves that body unread
    handle(req, res);
    return httplib::Server::HandlerResponse::Handled;
  });
  backend->Post(".*", handle);
  backend->Put(".*", handle);
  backend->Patch(".*", handle);
  backend->Delete(".*", handle);
  // A request httplib refused before routing (bad request line or header, URI too
  // long, cut short): say why in one line, count it, and close the connection.
  backend->set_error_handler(httplib::Server::HandlerWithResponse([impl](const httplib::Request&,
                                                                          httplib::Response& res) {
    ConnState* st = tl_conn;
    if (st == nullptr || st->dispatched || st->reject != nullptr) return httplib::Server::HandlerResponse::Unhandled;
    st->close_after = true;
    if (st->stream->header_too_large()) {
      res.status = 431;
      impl->note_reject(st, kRejectHeaderTooLarge);
    } else if (st->stream->timed_out()) {
      res.status = 408;
      impl->note_reject(st, kRejectReadTimeout);
    } else if (res.status == 414) {
      impl->note_reject(st, kRejectHeaderTooLarge);
    } else if (res.status == 413) {
      impl->note_reject(st, kRejectBodyTooLarge);
    } else if (!st->stream->eof() && !st->stream->broken()) {
      impl->note_reject(st, kRejectBadRequest);
    }
    res.set_content(lower(http_reason_phrase(res.status)) + "\n", "text/plain; charset=utf-8");
    return httplib::Server::HandlerResponse::Handled;
  }));
  backend->set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      spdlog::warn("http: {} {} failed: {}", req.method, req.path, e.what());
    } catch (...) {
      spdlog::warn("http: {} {} failed with a non-standard exception", req.method, req.path);
    }
    res.status = 500;
    res.set_content("internal error\n", "text/plain; charset=utf-8");
  });
  backend->set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (tl_conn == nullptr || !tl_conn->close_after) return;
    res.headers.erase("Keep-Alive");
    res.headers.erase("Connection");
    res.set_header("Connection", "close");
  });
  backend->adopt(*fd);

  impl_->stopping = false;
  impl_->listener_done = false;
  impl_->backend = std::move(backend);
  const std::string host = addr->host;
  impl_->listener = std::thread([impl, listen, host, bound] {
    name_this_thread("argus-listen");
    auto* b = static_cast<Backend*>(impl->backend.get());
    for (;;) {
      b->listen_after_bind();
      if (impl->stopping) break;
      // httplib ends its accept loop on an unexpected accept() error (ENFILE, ENOMEM):
      // listen again on the same port rather than go deaf.
      spdlog::warn("http: accepting connections failed ({}); listening again", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      auto again = bind_listen(listen, host, bound);
      if (!again) {
        spdlog::warn("http: {}", again.error());
        if (impl->stopping) break;
        continue;
      }
      if (impl->stopping) {
        ::close(*again);
        break;
      }
      b->adopt(*again);
    }
    impl->listener_done = true;
  });
  // Serving once httplib's loop runs: stop() relies on it (httplib's stop() is a no-op before).
  for (int i = 0; i < 5000 && !impl_->backend->is_running() && !impl_->listener_done; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  port_ = bound;
  running_ = true;
  return bound;
}

void HttpServer::stop() {
  std::lock_guard life(lifecycle_mu_);
  if (!running_) return;
  impl_->stopping = true;
  impl_->drop_conns();
  while (!impl_->listener_done) {
    impl_->backend->stop();
    impl_->drop_conns();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  impl_->listener.join();
  impl_->backend.reset();
  running_ = false;
}

HttpResponse HttpServer::dispatch(HttpRequest& req) {
  std::vector<std::string> raw_segments = split_path(req.path);
  std::vector<std::string> segments;
  segments.reserve(raw_segments.size());
  for (const auto& s : raw_segments) {
    auto d = percent_decode(s, false);
    if (!d) return HttpResponse::text(400, "bad percent-encoding in the path\n");
    segments.push_back(std::move(*d));
  }
  {
    std::string decoded;
    for (const auto& s : segments) decoded += "/" + s;
    req.path = decoded;
  }

  HttpHandler handler;
  std::set<std::string> allowed;
  {
    std::shared_lock lock(routes_mu_);
    const Route* chosen = nullptr;
    const Route* get_route = nullptr;
    std::map<std::string, std::string> chosen_params, get_params;
    for (const auto& r : routes_) {
      if (r.segments.size() != segments.size()) continue;
      std::map<std::string, std::string> params;
      bool match = true;
      for (std::size_t i = 0; i < segments.size() && match; ++i) {
        const std::string& p = r.segments[i];
        if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
          if (segments[i].empty()) match = false;
          else params[p.substr(1, p.size() - 2)] = segments[i];
        } else if (p != segments[i]) {
          match = false;
        }
      }
      if (!match) continue;
      allowed.insert(r.method);
      if (r.method == "GET") allowed.insert("HEAD");
      if (!chosen && r.method == req.method) {
        chosen = &r;
        chosen_params = std::move(params);
      } else if (!get_route && r.method == "GET") {
        get_route = &r;
        get_params = std::move(params);
      }
    }
    if (!chosen && req.method == "HEAD" && get_route) {
      chosen = get_route;
      chosen_params = std::move(get_params);
    }
    if (chosen) {
      handler = chosen->handler;
      req.params = std::move(chosen_params);
    }
  }
  if (allowed.empty()) return HttpResponse::text(404, "not found\n");
  if (!handler) {
    std::string allow;
    for (const auto& m : allowed) allow += (allow.empty() ? "" : ", ") + m;
    auto r = HttpResponse::text(405, "method not allowed\n");
    r.headers.emplace_back("Allow", allow);
    return r;
  }
  try {
    return handler(req);
  } catch (const std::exception& e) {
    spdlog::warn("http: handler for {} {} failed: {}", req.method, req.path, e.what());
  } catch (...) {
    spdlog::warn("http: handler for {} {} failed with a non-standard exception", req.method, req.path);
  }
  return HttpResponse::text(500, "internal error\n");
}

}  // namespace argus
