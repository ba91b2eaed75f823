// http_get (cpp-httplib's client) against hand-written servers: URL checks, errors,
// framing (chunked, length, EOF), bounds. Tokens: http_server_test.cpp; TLS:
// http_server_tls_test.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "userspace/net/http_client.h"

namespace argus::cli {
namespace {

using namespace std::chrono_literals;

// Accepts one connection, reads the request head, sends the pieces (with a pause
// between them), then closes (unless hold_open, then it waits for the client to go).
class OneShotServer {
 public:
  explicit OneShotServer(std::vector<std::string> pieces, bool hold_open = false)
      : pieces_(std::move(pieces)), hold_open_(hold_open) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(fd_, 4);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~OneShotServer() {
    thread_.join();
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  std::string url(const std::string& path = "/") const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  const std::string& request() const { return request_; }

 private:
  void run() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 3000) <= 0) return;
    int c = ::accept(fd_, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      pollfd q{c, POLLIN, 0};
      if (::poll(&q, 1, 3000) <= 0) break;
      ssize_t n = ::recv(c, buf, sizeof(buf), 0);
      if (n <= 0) break;
      request_.append(buf, static_cast<std::size_t>(n));
    }
    for (std::size_t i = 0; i < pieces_.size(); ++i) {
      if (i > 0) std::this_thread::sleep_for(10ms);
      ::send(c, pieces_[i].data(), pieces_[i].size(), MSG_NOSIGNAL);
    }
    if (hold_open_) {
      pollfd q{c, POLLIN, 0};
      ::poll(&q, 1, 3000);  // until the client gives up and closes
    }
    ::close(c);
  }

  std::vector<std::string> pieces_;
  bool hold_open_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::string request_;
  std::thread thread_;
};

TEST(HttpClient, PercentEncodeKeepsOnlyUnreservedBytes) {
  EXPECT_EQ(percent_encode("spec.nodeName=gpu-node-7"), "spec.nodeName%3Dgpu-node-7");
  EXPECT_EQ(percent_encode("a b,c/d?e&f~_"), "a%20b%2Cc%2Fd%3Fe%26f~_");
  EXPECT_EQ(percent_encode(std::string("\x00\xff", 2)), "%00%FF");
  EXPECT_EQ(percent_encode(""), "");
}

TEST(HttpClient, ParsesUrls) {
  auto u = parse_http_url("http://127.0.0.1:9745/api/v1/ranks?x=1#frag");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 9745);
  EXPECT_EQ(u->target, "/api/v1/ranks?x=1");
  u = parse_http_url("http://node-1.example");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "node-1.example");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->target, "/");
  u = parse_http_url("HTTP://[::1]:8080?q");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->target, "/?q");
  EXPECT_FALSE(u->https);
  u = parse_http_url("https://agent.example/metrics");
  ASSERT_TRUE(u.ok()) << u.error();
  EXPECT_TRUE(u->https);
  EXPECT_EQ(u->port, 443);
  EXPECT_EQ(u->target, "/metrics");
}

TEST(HttpClient, RejectsBadUrls) {
  struct Case {
    const char* url;
    const char* message;
  };
  for (const Case& c : {
           Case{"abc", "invalid URL 'abc': expected http://HOST[:PORT][/PATH]"},
           Case{"127.0.0.1:9745/x", "invalid URL '127.0.0.1:9745/x': expected http://HOST[:PORT][/PATH]"},
           Case{"ftp://h/", "invalid URL 'ftp://h/': only http:// and https:// are supported"},
           Case{"http:///x", "invalid URL 'http:///x': empty host"},
           Case{"http://:80/x", "invalid URL 'http://:80/x': empty host"},
           Case{"http://h:99999/", "invalid URL 'http://h:99999/': bad port '99999'"},
           Case{"http://h:abc/", "invalid URL 'http://h:abc/': bad port 'abc'"},
           Case{"http://h:0/", "invalid URL 'http://h:0/': bad port '0'"},
           Case{"http://[::1/", "invalid URL 'http://[::1/': unclosed '['"},
           Case{"http://u:p@h/", "invalid URL 'http://u:p@h/': user names and passwords are not supported"},
           Case{"http://h/a b", "invalid URL 'http://h/a b': the path has spaces"},
       }) {
    auto r = http_get(c.url, 500ms);
    ASSERT_FALSE(r.ok()) << c.url;
    EXPECT_EQ(r.error().rfind(c.message, 0), 0u) << r.error();
  }
}

TEST(HttpClient, RefusedConnectionIsOneClearLine) {
  // A port that nothing listens on: bind one, note it, close it.
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t port = ntohs(a.sin_port);
  ::close(fd);
  auto r = http_get("http://127.0.0.1:" + std::to_string(port) + "/", 1000ms);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "cannot connect to 127.0.0.1:" + std::to_string(port) + " (connection refused or unreachable)");
}

TEST(HttpClient, ChunkedResponse) {
  OneShotServer srv({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n",
                     "5\r\nhello\r\n", "7;ext=1\r\n, world\r\n1", "0\r\n" + std::string(16, 'z') + "\r\n",
                     "0\r\n\r\n"});  // (httplib 0.11 takes no trailers: the agent sends none)
  auto r = http_get(srv.url("/api/v1/ranks?x=1"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello, world" + std::string(16, 'z'));
  EXPECT_EQ(r->headers["content-type"], "text/plain");
  EXPECT_EQ(srv.request().rfind("GET /api/v1/ranks?x=1 HTTP/1.1\r\n", 0), 0u) << srv.request();
  EXPECT_NE(srv.request().find("\r\nConnection: close\r\n"), std::string::npos);
  EXPECT_NE(srv.request().find("\r\nHost: 127.0.0.1:" + std::to_string(srv.port()) + "\r\n"), std::string::npos);
}

TEST(HttpClient, SendsTheBearerToken) {
  OneShotServer srv({"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"});
  ClientOptions o;
  o.bearer_token = "tok-123";
  auto r = http_get(srv.url("/api/v1/ranks"), o);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->body, "ok");
  EXPECT_NE(srv.request().find("\r\nAuthorization: Bearer tok-123\r\n"), std::string::npos) << srv.request();
}

TEST(HttpClient, ChunkedResponseWithoutEofCompletes) {
  // A server that keeps the connection open: the last chunk ends the response.
  OneShotServer srv({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"}, true);
  auto t0 = std::chrono::steady_clock::now();
  auto r = http_get(srv.url(), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->body, "abc");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1000ms);
}

TEST(HttpClient, BrokenChunkedIsAnError) {
  OneShotServer srv({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"});
  auto r = http_get(srv.url(), 2000ms);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "bad or truncated HTTP response from 127.0.0.1:" + std::to_string(srv.port()) + " (Read)");
}

TEST(HttpClient, ContentLengthAndEofFraming) {
  {
    OneShotServer srv({"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope", "IGNORED"}, true);
    auto r = http_get(srv.url(), 2000ms);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->status, 404);
    EXPECT_EQ(r->body, "nope");
  }
  {
    OneShotServer srv({"HTTP/1.0 200 OK\r\n\r\nuntil ", "the end"});
    auto r = http_get(srv.url(), 2000ms);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->body, "until the end");
  }
  {
    OneShotServer srv({"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"});
    auto r = http_get(srv.url(), 2000ms);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "ok");
  }
}

TEST(HttpClient, TruncatedAndGarbageResponses) {
  {
    OneShotServer srv({"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"});
    auto r = http_get(srv.url(), 2000ms);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().rfind("bad or truncated HTTP response from 127.0.0.1:", 0), 0u) << r.error();
  }
  {
    OneShotServer srv({"SSH-2.0-OpenSSH_9.2\r\n\r\n"});
    auto r = http_get(srv.url(), 2000ms);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().rfind("bad or truncated HTTP response from 127.0.0.1:", 0), 0u) << r.error();
  }
  {
    OneShotServer srv({});
    auto r = http_get(srv.url(), 2000ms);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().rfind("bad or truncated HTTP response from 127.0.0.1:", 0), 0u) << r.error();
  }
}

TEST(HttpClient, TimesOut) {
  OneShotServer srv({"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial"}, true);
  auto t0 = std::chrono::steady_clock::now();
  auto r = http_get(srv.url(), 200ms);
  auto elapsed = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "timed out after 200 ms waiting for 127.0.0.1:" + std::to_string(srv.port()));
  EXPECT_LT(elapsed, 1000ms);
}

TEST(HttpClient, ResponseSizeIsBounded) {
  OneShotServer srv({"HTTP/1.1 200 OK\r\nContent-Length: 200000\r\n\r\n" + std::string(200000, 'x')});
  auto r = http_get(srv.url(), 2000ms, 1000);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("larger than 1000 bytes"), std::string::npos) << r.error();
}

}  // namespace
}  // namespace argus::cli
