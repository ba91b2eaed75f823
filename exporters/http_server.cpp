#include "exporters/http_server.h"
#include "exporters/http_admission.h"
#include "exporters/http_auth.h"
#include "exporters/http_conn.h"
#include "exporters/http_listen.h"
#include "exporters/http_message.h"
#include "exporters/http_server_impl.h"
#include "exporters/http_tls.h"
#include "userspace/common/thread_name.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <set>

#include <spdlog/spdlog.h>

namespace argus {

bool HttpServer::Impl::add_conn(int fd) {
  std::lock_guard lock(conns_mu);
  if (stopping) return false;
  conns.insert(fd);
  return true;
}

void HttpServer::Impl::remove_conn(int fd) {
  std::lock_guard lock(conns_mu);
  conns.erase(fd);
}

void HttpServer::Impl::drop_conns() {
  std::lock_guard lock(conns_mu);
  for (int fd : conns) ::shutdown(fd, SHUT_RDWR);
}

namespace {

using httpd::Clock;
using httpd::ConnState;
using httpd::ConnStream;
using httpd::lower;
using httpd::tl_conn;

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
    if (httpd::refuse_over_capacity(fd, impl_->rejections)) return;
    const HttpServerOptions& o = impl_->opts;
    const Clock::time_point accepted = httpd::accepted_at();
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
      if (!ssl || SSL_set_fd(ssl.get(), fd) != 1 || !httpd::tls_handshake(ssl.get(), fd, accepted + o.read_timeout)) {
        impl_->rejections.count(kRejectTls);
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
      if (strm.timed_out()) impl_->rejections.note(&st, kRejectReadTimeout);
      if (strm.header_too_large()) impl_->rejections.note(&st, kRejectHeaderTooLarge);
      wrote = wrote || ok;
      if (!ok || client_closes || st.close_after || st.reject || strm.eof() || strm.broken()) break;
    }
    tl_conn = nullptr;
    if (ssl) {
      ERR_clear_error();
      SSL_shutdown(ssl.get());  // one try: a close_notify if the socket takes it now
    }
    if (wrote && !strm.eof() && !strm.broken()) httpd::linger(fd, o.read_timeout);
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
    net::add_header(out.headers, k, v);
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

}  // namespace

HttpServer::HttpServer(HttpServerOptions options) : opts_(std::move(options)), impl_(std::make_shared<Impl>()) {
  impl_->opts = opts_;
  impl_->auth = httpd::BearerAuth(opts_.auth_token);
}

HttpServer::~HttpServer() { stop(); }

std::size_t HttpServer::active_connections() const { return impl_->active.load(); }
uint64_t HttpServer::queued_total() const { return impl_->queued.load(); }
std::map<std::string, uint64_t> HttpServer::rejections() const { return impl_->rejections.snapshot(); }

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
    auto ctx = httpd::load_tls(opts_.tls_cert_file, opts_.tls_key_file);
    if (!ctx) return make_error(ctx.error());
    impl_->tls = *ctx;
    // OpenSSL writes to the socket without MSG_NOSIGNAL: a client gone mid-answer must
    // not kill the process. (The agent ignores SIGPIPE anyway; this covers other users.)
    struct sigaction old{};
    if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
  }
  auto fd = httpd::bind_listen(listen, addr->host, addr->port);
  if (!fd) return make_error(fd.error());
  const uint16_t bound = httpd::bound_port(*fd, addr->port);

  auto backend = std::make_unique<Backend>(impl_);
  Impl* impl = impl_.get();
  backend->set_payload_max_length(opts_.max_body_bytes);
  backend->set_keep_alive_max_count(std::max<std::size_t>(opts_.keep_alive_max_requests, 1));
  backend->set_keep_alive_timeout(
      std::max<time_t>(1, std::chrono::duration_cast<std::chrono::seconds>(opts_.keep_alive_timeout).count()));
  backend->new_task_queue = [self = impl_] { return httpd::new_conn_queue(self); };

  // Our handler, for a request whose body httplib has read (or that has none).
  const httplib::Server::Handler handle = [this, impl](const httplib::Request& req, httplib::Response& res) {
    ConnState* st = tl_conn;
    if (st) st->dispatched = true;
    HttpRequest r;
    if (!to_request(req, r, res)) {
      impl->rejections.note(st, kRejectBadRequest);
      if (st) st->close_after = true;
      return;
    }
    if (httpd::needs_token(r) && !impl->auth.authorized(req.get_header_value("Authorization"))) {
      impl->rejections.note(st, kRejectUnauthorized);
      to_response(httpd::token_refused(), res);
      return;
    }
    to_response(dispatch(r), res);
  };
  backend->set_pre_routing_handler([impl, handle](const httplib::Request& req, httplib::Response& res) {
    return httpd::admit(req, res, impl->opts.max_body_bytes, impl->rejections, handle);
  });
  backend->Post(".*", handle);
  backend->Put(".*", handle);
  backend->Patch(".*", handle);
  backend->Delete(".*", handle);
  backend->set_error_handler(
      httplib::Server::HandlerWithResponse([impl](const httplib::Request&, httplib::Response& res) {
        return httpd::explain_refusal(res, impl->rejections);
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
      auto again = httpd::bind_listen(listen, host, bound);
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
