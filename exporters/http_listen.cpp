#include "exporters/http_listen.h"
#include "exporters/http_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace argus {

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

namespace httpd {

namespace {

std::string host_for_message(const std::string& host) {
  if (host.find(':') != std::string::npos) return "[" + host + "]";
  return host;
}

}  // namespace

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

}  // namespace httpd

}  // namespace argus
