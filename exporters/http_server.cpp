#include "exporters/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <exception>
#include <set>

#include <spdlog/spdlog.h>

namespace argus {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  if (left > 60'000) return 60'000;
  return static_cast<int>(left);
}

// Waits until fd is readable (or writable). False on timeout or a poll error.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int left = ms_left(deadline);
    if (left == 0) return false;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, left);
    if (r > 0) return true;  // readable, writable, hung up or in error: the next call tells
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Sends all of data before the deadline. False if the peer went away or was too slow.
bool send_all(int fd, const char* data, std::size_t len, Clock::time_point deadline) {
  while (len > 0) {
    ssize_t n = ::send(fd, data, len, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline)) return false;
      continue;
    }
    return false;
  }
  return true;
}

enum class ReadStatus { kData, kClosed, kTimeout, kError };

ReadStatus read_some(int fd, std::string& buf, std::size_t max, Clock::time_point deadline) {
  char tmp[4096];
  for (;;) {
    ssize_t n = ::recv(fd, tmp, std::min(sizeof(tmp), max), 0);
    if (n > 0) {
      buf.append(tmp, static_cast<std::size_t>(n));
      return ReadStatus::kData;
    }
    if (n == 0) return ReadStatus::kClosed;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ReadStatus::kError;
    if (!wait_fd(fd, POLLIN, deadline)) return ReadStatus::kTimeout;
  }
}

bool is_tchar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim_ows(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
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

constexpr std::size_t kMaxMethod = 20;

// True while buf can still become a valid request line: an upper-case method and a space.
bool plausible_prefix(const std::string& buf) {
  std::size_t i = 0;
  for (; i < buf.size() && i <= kMaxMethod; ++i) {
    char c = buf[i];
    if (c == ' ') return i > 0;
    if (c < 'A' || c > 'Z') return false;
  }
  return i <= kMaxMethod;
}

std::string host_for_message(const std::string& host) {
  if (host.find(':') != std::string::npos) return "[" + host + "]";
  return host;
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
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

HttpServer::HttpServer(HttpServerOptions options) : opts_(options) {}

HttpServer::~HttpServer() { stop(); }

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

  std::string host = addr->host.empty() ? "0.0.0.0" : addr->host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(addr->port);
  int gai = ::getaddrinfo(host.c_str(), port_str.c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    return make_error("invalid --listen address '" + listen + "': cannot resolve '" + host +
                      "': " + ::gai_strerror(gai));
  }
  int fd = -1;
  int last_errno = 0;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) break;
    last_errno = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  if (fd < 0) {
    return make_error("cannot listen on " + host_for_message(host) + ":" + port_str + ": " +
                      std::strerror(last_errno));
  }
  sockaddr_storage ss{};
  socklen_t sl = sizeof(ss);
  uint16_t bound = addr->port;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &sl) == 0) {
    if (ss.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    if (ss.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  }
  int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    int e = errno;
    ::close(fd);
    return make_error(std::string("cannot create eventfd: ") + std::strerror(e));
  }
  listen_fd_ = fd;
  wake_fd_ = wake;
  port_ = bound;
  stopping_ = false;
  running_ = true;
  accept_thread_ = std::thread([this] { accept_loop(); });
  return bound;
}

void HttpServer::stop() {
  std::lock_guard life(lifecycle_mu_);
  if (!running_) return;
  stopping_ = true;
  uint64_t one = 1;
  ssize_t w = ::write(wake_fd_, &one, sizeof(one));
  (void)w;
  if (accept_thread_.joinable()) accept_thread_.join();
  reap(/*all=*/true);
  ::close(listen_fd_);
  ::close(wake_fd_);
  listen_fd_ = -1;
  wake_fd_ = -1;
  running_ = false;
}

void HttpServer::reap(bool all) {
  std::list<std::unique_ptr<Connection>> finished;
  {
    std::lock_guard lock(conns_mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all) {
        if ((*it)->fd >= 0) ::shutdown((*it)->fd, SHUT_RDWR);
      }
      if (all || (*it)->done.load()) {
        finished.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // Joined outside the lock: a connection thread takes it to close its socket.
  for (auto& c : finished) {
    if (c->thread.joinable()) c->thread.join();
  }
}

void HttpServer::accept_loop() {
  while (!stopping_.load()) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    bool have_conns;
    {
      std::lock_guard lock(conns_mu_);
      have_conns = !conns_.empty();
    }
    // While connections are open, wake now and then to join the finished ones.
    int r = ::poll(fds, 2, have_conns ? 200 : -1);
    reap(/*all=*/false);
    if (r < 0) {
      if (errno == EINTR) continue;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    if (stopping_.load() || (fds[1].revents & POLLIN)) break;
    if (r == 0 || !(fds[0].revents & POLLIN)) continue;
    int cfd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (cfd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        spdlog::warn("http: accept failed: {}", std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    set_nonblocking(cfd);  // accept4 already did; harmless if some kernel ignored the flag
    if (active_.load() >= opts_.max_connections) {
      static const char kBusy[] =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
          "Content-Length: 20\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections";
      ssize_t n = ::send(cfd, kBusy, sizeof(kBusy) - 1, MSG_NOSIGNAL);
      (void)n;
      ::shutdown(cfd, SHUT_WR);
      ::close(cfd);
      continue;
    }
    auto conn = std::make_unique<Connection>();
    conn->fd = cfd;
    Connection* raw = conn.get();
    active_.fetch_add(1);
    {
      std::lock_guard lock(conns_mu_);
      conns_.push_back(std::move(conn));
    }
    try {
      raw->thread = std::thread([this, raw] { serve(raw); });
    } catch (const std::exception& e) {
      spdlog::warn("http: cannot start a connection thread: {}", e.what());
      std::lock_guard lock(conns_mu_);
      ::close(raw->fd);
      raw->fd = -1;
      raw->done = true;
      active_.fetch_sub(1);
    }
  }
}

namespace {

struct ParsedHead {
  std::string method;
  std::string target;
  std::map<std::string, std::string> headers;
};

// Parses the request line and headers (head excludes the blank line). 0 or an error status.
int parse_head(const std::string& head, ParsedHead& out) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= head.size()) {
    std::size_t nl = head.find('\n', start);
    std::string line = head.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  if (lines.empty()) return 400;

  const std::string& rl = lines[0];
  auto sp1 = rl.find(' ');
  if (sp1 == std::string::npos) return 400;
  auto sp2 = rl.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || rl.find(' ', sp2 + 1) != std::string::npos) return 400;
  out.method = rl.substr(0, sp1);
  out.target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string version = rl.substr(sp2 + 1);
  if (out.method.empty() || out.method.size() > kMaxMethod) return 400;
  for (char c : out.method) {
    if (c < 'A' || c > 'Z') return 400;
  }
  if (out.target.empty() || out.target[0] != '/') return 400;
  for (char c : out.target) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return 400;
  }
  if (version.size() != 8 || version.compare(0, 5, "HTTP/") != 0 || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7]))) {
    return 400;
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return 505;

  for (std::size_t i = 1; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.empty()) return 400;
    if (l[0] == ' ' || l[0] == '\t') return 400;  // obsolete line folding
    auto colon = l.find(':');
    if (colon == std::string::npos || colon == 0) return 400;
    std::string name = l.substr(0, colon);
    for (char c : name) {
      if (!is_tchar(c)) return 400;
    }
    std::string value = trim_ows(l.substr(colon + 1));
    for (char c : value) {
      auto u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\t') || u == 0x7f) return 400;
    }
    name = lower(name);
    auto it = out.headers.find(name);
    if (it == out.headers.end()) {
      out.headers.emplace(std::move(name), std::move(value));
    } else {
      it->second += ", " + value;
    }
  }
  return 0;
}

// Status line, headers and (unless head_only) the body. Content-Length is always the
// body's length, so a HEAD answer tells what a GET would send.
std::string serialize_response(const HttpResponse& resp, bool head_only) {
  std::string out;
  out.reserve(256 + (head_only ? 0 : resp.body.size()));
  out += "HTTP/1.1 " + std::to_string(resp.status) + " " + http_reason_phrase(resp.status) + "\r\n";
  auto clean = [](const std::string& s) { return s.find_first_of("\r\n") == std::string::npos; };
  if (clean(resp.content_type) && !resp.content_type.empty()) {
    out += "Content-Type: " + resp.content_type + "\r\n";
  }
  out += "Content-Length: " + std::to_string(resp.body.size()) + "\r\n";
  out += "Connection: close\r\n";
  for (const auto& [k, v] : resp.headers) {
    // A handler's header must not smuggle in lines or contradict our framing.
    if (k.empty() || !clean(k) || !clean(v) || k.find(':') != std::string::npos) continue;
    std::string lk = lower(k);
    if (lk == "content-length" || lk == "connection" || lk == "transfer-encoding") continue;
    out += k + ": " + v + "\r\n";
  }
  out += "\r\n";
  if (!head_only) out += resp.body;
  return out;
}

}  // namespace

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

void HttpServer::serve(Connection* conn) {
  const int fd = conn->fd;
  const auto read_deadline = Clock::now() + opts_.read_timeout;
  std::string buf;
  bool lingering = true;  // after a response: drain what the client still sends, then close

  auto respond = [&](const HttpResponse& resp, bool head_only) {
    std::string wire = serialize_response(resp, head_only);
    send_all(fd, wire.data(), wire.size(), Clock::now() + opts_.write_timeout);
  };
  auto fail = [&](int status, const std::string& msg) { respond(HttpResponse::text(status, msg + "\n"), false); };

  auto handle = [&] {
    // 1. Request line and headers.
    std::size_t head_end = std::string::npos, body_start = 0;
    for (;;) {
      if (!plausible_prefix(buf)) {
        fail(400, "malformed request");
        return;
      }
      auto nl = buf.find('\n');
      if (nl != std::string::npos) {
        // Reject a broken request line at once, not after the whole header block.
        ParsedHead probe;
        int st = parse_head(buf.substr(0, nl), probe);
        if (st != 0) {
          fail(st, st == 505 ? "HTTP version not supported" : "malformed request line");
          return;
        }
      }
      std::size_t p = buf.find("\r\n\r\n");
      std::size_t q = buf.find("\n\n");
      if (p != std::string::npos && (q == std::string::npos || p < q)) {
        head_end = p;
        body_start = p + 4;
      } else if (q != std::string::npos) {
        head_end = q;
        body_start = q + 2;
      }
      if (head_end != std::string::npos) {
        if (body_start > opts_.max_header_bytes) {
          fail(431, "request header fields too large");
          return;
        }
        break;
      }
      if (buf.size() >= opts_.max_header_bytes) {
        fail(431, "request header fields too large");
        return;
      }
      auto st = read_some(fd, buf, opts_.max_header_bytes + 4 - buf.size(), read_deadline);
      if (st != ReadStatus::kData) {  // closed early, too slow, or broken: just drop it
        lingering = false;
        return;
      }
    }

    ParsedHead head;
    int st = parse_head(buf.substr(0, head_end), head);
    if (st != 0) {
      fail(st, st == 505 ? "HTTP version not supported" : "malformed request");
      return;
    }

    // 2. A body, if any: read and ignored.
    if (head.headers.count("transfer-encoding")) {
      fail(501, "Transfer-Encoding in requests is not supported");
      return;
    }
    std::size_t content_length = 0;
    if (auto it = head.headers.find("content-length"); it != head.headers.end()) {
      // Repeated headers were joined with ", ": all copies must agree.
      std::string first;
      std::size_t start = 0;
      bool valid = true;
      for (;;) {
        auto comma = it->second.find(',', start);
        std::string part = trim_ows(it->second.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (part.empty() || part.size() > 15 ||
            !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          valid = false;
        }
        if (first.empty()) first = part;
        else if (part != first) valid = false;
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (!valid) {
        fail(400, "bad Content-Length");
        return;
      }
      content_length = std::stoull(first);
      if (content_length > opts_.max_body_bytes) {
        fail(413, "request body too large");
        return;
      }
    }
    std::size_t have = buf.size() - body_start;
    while (have < content_length) {
      std::string chunk;
      auto rs = read_some(fd, chunk, content_length - have, read_deadline);
      if (rs != ReadStatus::kData) {
        lingering = false;
        return;
      }
      have += chunk.size();
    }
    buf.clear();

    // 3. Route.
    HttpRequest req;
    req.method = head.method;
    std::string target = head.target;
    if (auto hash = target.find('#'); hash != std::string::npos) target.resize(hash);
    auto qm = target.find('?');
    req.path = target.substr(0, qm);
    if (qm != std::string::npos) req.raw_query = target.substr(qm + 1);
    req.headers = std::move(head.headers);
    std::size_t start = 0;
    while (qm != std::string::npos && start <= req.raw_query.size()) {
      auto amp = req.raw_query.find('&', start);
      std::string part = req.raw_query.substr(start, amp == std::string::npos ? std::string::npos : amp - start);
      if (!part.empty()) {
        auto eq = part.find('=');
        auto k = percent_decode(part.substr(0, eq), true);
        auto v = percent_decode(eq == std::string::npos ? "" : part.substr(eq + 1), true);
        if (!k || !v) {
          fail(400, "bad percent-encoding in the query");
          return;
        }
        req.query[*k] = *v;
      }
      if (amp == std::string::npos) break;
      start = amp + 1;
    }
    HttpResponse resp = dispatch(req);
    respond(resp, req.method == "HEAD");
  };
  try {
    handle();
  } catch (const std::exception& e) {  // out of memory and the like: drop this connection only
    spdlog::warn("http: connection failed: {}", e.what());
    lingering = false;
  }

  if (lingering) {
    // Tell the client we are done and read what it still sends, so that closing with
    // unread data does not reset the connection before it read our answer.
    ::shutdown(fd, SHUT_WR);
    auto drain_deadline = Clock::now() + std::min<std::chrono::milliseconds>(opts_.read_timeout, std::chrono::milliseconds(1000));
    std::size_t drained = 0;
    while (drained < 1024 * 1024) {
      std::string sink;
      if (read_some(fd, sink, 4096, drain_deadline) != ReadStatus::kData) break;
      drained += sink.size();
    }
  }
  {
    std::lock_guard lock(conns_mu_);
    ::close(conn->fd);
    conn->fd = -1;
  }
  active_.fetch_sub(1);
  conn->done = true;
}

}  // namespace argus
