#include "userspace/cli/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#ifndef ARGUS_VERSION
#define ARGUS_VERSION "dev"
#endif

namespace argus::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return s.substr(b, e - b);
}

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  if (left > 60'000) return 60'000;
  return static_cast<int>(left);
}

// 1: ready, 0: timed out, -1: poll failed.
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int left = ms_left(deadline);
    if (left == 0) return 0;
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, left);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
    // r == 0: poll may wake a little early; loop until the deadline really passed
  }
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

enum class Parse { kIncomplete, kComplete, kError };

// Splits header lines [start, end) into out.headers. False on a malformed line.
bool parse_header_lines(const std::string& buf, std::size_t start, std::size_t end,
                        std::map<std::string, std::string>& headers) {
  while (start < end) {
    std::size_t nl = buf.find('\n', start);
    if (nl == std::string::npos || nl > end) nl = end;
    std::string line = buf.substr(start, nl - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    start = nl + 1;
    if (line.empty()) continue;
    auto colon = line.find(':');
    if (colon == std::string::npos || colon == 0) return false;
    std::string name = lower(trim(line.substr(0, colon)));
    std::string value = trim(line.substr(colon + 1));
    auto it = headers.find(name);
    if (it == headers.end()) headers.emplace(std::move(name), std::move(value));
    else it->second += ", " + value;
  }
  return true;
}

// Finds the blank line ending a header block that starts at from. Sets end (start of the
// blank line) and next (first byte after it).
bool find_blank_line(const std::string& buf, std::size_t from, std::size_t& end, std::size_t& next) {
  std::size_t p = buf.find("\r\n\r\n", from);
  std::size_t q = buf.find("\n\n", from);
  if (p == std::string::npos && q == std::string::npos) return false;
  if (p != std::string::npos && (q == std::string::npos || p < q)) {
    end = p;
    next = p + 4;
  } else {
    end = q;
    next = q + 2;
  }
  return true;
}

constexpr std::size_t kMaxHeadBytes = 64 * 1024;

// Incremental response parser: feed() it the whole buffer received so far after each read.
class ResponseParser {
 public:
  Parse feed(const std::string& buf, bool eof, HttpResponse& out, std::string& err) {
    while (!head_done_) {
      std::size_t head_end = 0, body_start = 0;
      if (!find_blank_line(buf, start_, head_end, body_start)) {
        if (buf.size() - start_ > kMaxHeadBytes) {
          err = "response headers larger than " + std::to_string(kMaxHeadBytes) + " bytes";
          return Parse::kError;
        }
        if (eof) {
          err = buf.size() == start_ ? "empty reply" : "connection closed before a complete HTTP response";
          return Parse::kError;
        }
        return Parse::kIncomplete;
      }
      std::size_t nl = buf.find('\n', start_);
      std::string status_line = buf.substr(start_, nl - start_);
      if (!status_line.empty() && status_line.back() == '\r') status_line.pop_back();
      // "HTTP/1.1 200 OK"
      if (status_line.size() < 12 || status_line.compare(0, 5, "HTTP/") != 0 || status_line[8] != ' ' ||
          !all_digits(status_line.substr(9, 3)) || (status_line.size() > 12 && status_line[12] != ' ')) {
        err = "not an HTTP response";
        return Parse::kError;
      }
      out.status = std::stoi(status_line.substr(9, 3));
      out.headers.clear();
      if (!parse_header_lines(buf, nl + 1, head_end, out.headers)) {
        err = "malformed header in HTTP response";
        return Parse::kError;
      }
      start_ = body_start;
      if (out.status >= 100 && out.status < 200 && out.status != 101) continue;  // 100 Continue: more follows
      head_done_ = true;
      pos_ = body_start;
      out.body.clear();
      if (out.status == 204 || out.status == 304) {
        mode_ = Mode::kNone;
      } else if (auto te = out.headers.find("transfer-encoding"); te != out.headers.end()) {
        if (lower(te->second).find("chunked") == std::string::npos) {
          err = "unsupported Transfer-Encoding '" + te->second + "'";
          return Parse::kError;
        }
        mode_ = Mode::kChunked;
      } else if (auto cl = out.headers.find("content-length"); cl != out.headers.end()) {
        std::string v = cl->second;
        if (auto comma = v.find(','); comma != std::string::npos) v = trim(v.substr(0, comma));
        if (!all_digits(v) || v.size() > 15) {
          err = "bad Content-Length '" + cl->second + "'";
          return Parse::kError;
        }
        mode_ = Mode::kLength;
        length_ = std::stoull(v);
      } else {
        mode_ = Mode::kEof;
      }
    }

    switch (mode_) {
      case Mode::kNone:
        return Parse::kComplete;
      case Mode::kLength:
        if (buf.size() - pos_ >= length_) {
          out.body = buf.substr(pos_, length_);
          return Parse::kComplete;
        }
        if (eof) {
          err = "response truncated: got " + std::to_string(buf.size() - pos_) + " of " + std::to_string(length_) +
                " bytes";
          return Parse::kError;
        }
        return Parse::kIncomplete;
      case Mode::kEof:
        if (!eof) return Parse::kIncomplete;
        out.body = buf.substr(pos_);
        return Parse::kComplete;
      case Mode::kChunked: {
        Parse p = chunks(buf, out.body, err);
        if (p == Parse::kIncomplete && eof) {
          err = "connection closed in the middle of a chunked response";
          return Parse::kError;
        }
        return p;
      }
    }
    return Parse::kError;
  }

 private:
  enum class Mode { kNone, kLength, kChunked, kEof };

  // Decodes the chunks that arrived completely since the last call.
  Parse chunks(const std::string& buf, std::string& body, std::string& err) {
    for (;;) {
      std::size_t nl = buf.find('\n', pos_);
      if (nl == std::string::npos) {
        if (buf.size() - pos_ > 1024) {
          err = "malformed chunked response";
          return Parse::kError;
        }
        return Parse::kIncomplete;
      }
      std::string line = buf.substr(pos_, nl - pos_);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (in_trailers_) {
        pos_ = nl + 1;
        if (line.empty()) return Parse::kComplete;
        continue;
      }
      std::string size_str = trim(line.substr(0, line.find(';')));
      if (size_str.empty() || size_str.size() > 15 ||
          !std::all_of(size_str.begin(), size_str.end(),
                       [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; })) {
        err = "bad chunk size '" + size_str.substr(0, 20) + "' in chunked response";
        return Parse::kError;
      }
      std::size_t size = std::stoull(size_str, nullptr, 16);
      if (size == 0) {
        in_trailers_ = true;
        pos_ = nl + 1;
        continue;
      }
      std::size_t data = nl + 1;
      // The chunk's data, then CRLF (or a bare LF).
      if (buf.size() < data + size + 1) return Parse::kIncomplete;
      std::size_t after = data + size;
      if (buf[after] == '\r') {
        if (buf.size() < after + 2) return Parse::kIncomplete;
        ++after;
      }
      if (buf[after] != '\n') {
        err = "malformed chunked response";
        return Parse::kError;
      }
      body.append(buf, data, size);
      pos_ = after + 1;
    }
  }

  bool head_done_ = false;
  std::size_t start_ = 0;  // where the (next) status line starts
  std::size_t pos_ = 0;    // body parse position
  Mode mode_ = Mode::kEof;
  std::size_t length_ = 0;
  bool in_trailers_ = false;
};

}  // namespace

Result<ParsedUrl> parse_http_url(const std::string& url) {
  auto bad = [&](const std::string& why) { return make_error("invalid URL '" + url + "': " + why); };
  auto sep = url.find("://");
  if (sep == std::string::npos) return bad("expected http://HOST[:PORT][/PATH]");
  std::string scheme = lower(url.substr(0, sep));
  if (scheme == "https") return make_error("https is not supported (in '" + url + "'): use http://");
  if (scheme != "http") return bad("only http:// is supported");
  std::string rest = url.substr(sep + 3);
  auto auth_end = rest.find_first_of("/?#");
  std::string authority = rest.substr(0, auth_end);
  std::string target = auth_end == std::string::npos ? std::string() : rest.substr(auth_end);
  if (auto hash = target.find('#'); hash != std::string::npos) target.resize(hash);
  if (target.empty() || target[0] != '/') target = "/" + target;
  for (char c : target) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return bad("the path has spaces or control characters (percent-encode them)");
  }
  if (authority.find('@') != std::string::npos) return bad("user names and passwords are not supported");

  ParsedUrl out;
  out.target = target;
  std::string port_str;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) return bad("unclosed '[' in the host");
    out.host = authority.substr(1, close - 1);
    in6_addr a6{};
    if (::inet_pton(AF_INET6, out.host.c_str(), &a6) != 1) return bad("'" + out.host + "' is not an IPv6 address");
    std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("expected ':PORT' after ']'");
      port_str = after.substr(1);
      has_port = true;
    }
  } else {
    auto colon = authority.find(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      port_str = authority.substr(colon + 1);
      has_port = true;
    }
    for (char c : out.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return bad("'" + out.host + "' is not a host name or address");
      }
    }
  }
  if (out.host.empty()) return bad("empty host");
  if (has_port) {
    if (!all_digits(port_str) || port_str.size() > 5) return bad("bad port '" + port_str + "'");
    unsigned long p = std::stoul(port_str);
    if (p == 0 || p > 65535) return bad("bad port '" + port_str + "'");
    out.port = static_cast<uint16_t>(p);
  }
  return out;
}

Result<HttpResponse> http_get(const std::string& url, std::chrono::milliseconds timeout, std::size_t max_response_bytes) {
  auto parsed = parse_http_url(url);
  if (!parsed) return make_error(parsed.error());
  const ParsedUrl& u = *parsed;
  const auto deadline = Clock::now() + timeout;
  const bool v6 = u.host.find(':') != std::string::npos;
  const std::string where = (v6 ? "[" + u.host + "]" : u.host) + ":" + std::to_string(u.port);
  auto timed_out = [&](const std::string& what) {
    return make_error("timed out after " + std::to_string(timeout.count()) + " ms " + what + " " + where);
  };

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  std::string port_str = std::to_string(u.port);
  int gai = ::getaddrinfo(u.host.c_str(), port_str.c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    return make_error("cannot resolve '" + u.host + "': " + (gai == EAI_SYSTEM ? std::strerror(errno) : ::gai_strerror(gai)));
  }

  Fd sock;
  std::string connect_error;
  bool connect_timed_out = false;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (fd.get() < 0) {
      connect_error = std::strerror(errno);
      continue;
    }
    int rc = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno != EINPROGRESS) {
      connect_error = std::strerror(errno);
      continue;
    }
    if (rc != 0) {
      int w = wait_fd(fd.get(), POLLOUT, deadline);
      if (w == 0) {
        connect_timed_out = true;
        break;
      }
      int so_error = 0;
      socklen_t len = sizeof(so_error);
      if (w < 0 || ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &so_error, &len) != 0) so_error = errno;
      if (so_error != 0) {
        connect_error = std::strerror(so_error);
        continue;
      }
    }
    sock = std::move(fd);
    break;
  }
  ::freeaddrinfo(res);
  if (sock.get() < 0) {
    if (connect_timed_out) return timed_out("connecting to");
    return make_error("cannot connect to " + where + ": " + (connect_error.empty() ? "no address" : connect_error));
  }

  std::string host_header = v6 ? "[" + u.host + "]" : u.host;
  if (u.port != 80) host_header += ":" + port_str;
  const std::string request = "GET " + u.target + " HTTP/1.1\r\nHost: " + host_header +
                              "\r\nUser-Agent: argusctl/" ARGUS_VERSION "\r\nAccept: */*\r\nConnection: close\r\n\r\n";
  std::size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = ::send(sock.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (wait_fd(sock.get(), POLLOUT, deadline) != 1) return timed_out("sending to");
      continue;
    }
    return make_error("cannot send to " + where + ": " + std::strerror(errno));
  }

  std::string buf;
  HttpResponse out;
  std::string err;
  ResponseParser parser;
  const std::size_t limit = max_response_bytes + 64 * 1024;  // the body plus room for headers
  char tmp[16384];
  for (;;) {
    ssize_t n = ::recv(sock.get(), tmp, sizeof(tmp), 0);
    if (n > 0) {
      buf.append(tmp, static_cast<std::size_t>(n));
      if (buf.size() > limit) {
        return make_error("response from " + where + " is larger than " + std::to_string(max_response_bytes) + " bytes");
      }
      Parse p = parser.feed(buf, false, out, err);
      if (p == Parse::kComplete) break;
      if (p == Parse::kError) return make_error("bad response from " + where + ": " + err);
      continue;
    }
    if (n == 0) {
      Parse p = parser.feed(buf, true, out, err);
      if (p == Parse::kComplete) break;
      return make_error("bad response from " + where + ": " + err);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int w = wait_fd(sock.get(), POLLIN, deadline);
      if (w == 0) return timed_out("waiting for");
      if (w < 0) return make_error("cannot read from " + where + ": " + std::strerror(errno));
      continue;
    }
    return make_error("cannot read from " + where + ": " + std::strerror(errno));
  }
  if (out.body.size() > max_response_bytes) {
    return make_error("response from " + where + " is larger than " + std::to_string(max_response_bytes) + " bytes");
  }
  return out;
}

}  // namespace argus::cli
