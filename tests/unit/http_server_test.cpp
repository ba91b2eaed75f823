// HttpServer (on cpp-httplib): routing, HEAD, limits, timeouts, hostile clients,
// the connection cap and queue, and bearer tokens. TLS: http_server_tls_test.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "exporters/http_server.h"
#include "userspace/net/http_client.h"

namespace argus {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int connect_local(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void send_str(int fd, const std::string& s) {
  std::size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

// Reads until EOF (or an error, or the timeout). *eof tells whether EOF was seen.
std::string read_all(int fd, std::chrono::milliseconds timeout, bool* eof = nullptr) {
  std::string out;
  auto deadline = Clock::now() + timeout;
  if (eof) *eof = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return out;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return out;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (eof) *eof = true;
      return out;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

// True once buf holds a whole response (head, and Content-Length bytes of body unless HEAD).
bool complete_response(const std::string& buf, bool head) {
  auto end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  if (head) return true;
  auto cl = buf.find("Content-Length: ");
  if (cl == std::string::npos || cl > end) return true;
  return buf.size() >= end + 4 + std::stoul(buf.substr(cl + 16));
}

// Sends raw bytes on a fresh connection and returns the server's answer: up to EOF or
// one whole response (the server may keep the connection open for another request).
std::string raw(uint16_t port, const std::string& request, std::chrono::milliseconds timeout = 2000ms) {
  int fd = connect_local(port);
  if (fd < 0) return "<connect failed>";
  send_str(fd, request);
  std::string out;
  auto deadline = Clock::now() + timeout;
  const bool head = request.rfind("HEAD ", 0) == 0;
  while (!complete_response(out, head)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

std::string status_line(const std::string& response) { return response.substr(0, response.find("\r\n")); }

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }

  void start(HttpServerOptions opts) {
    server_ = std::make_unique<HttpServer>(opts);
    server_->route("GET", "/hello", [](const HttpRequest&) { return HttpResponse::text(200, "hello world\n"); });
    server_->route("GET", "/echo", [](const HttpRequest& req) {
      std::string body;
      for (const auto& [k, v] : req.query) body += k + "=" + v + ";";
      return HttpResponse::text(200, body);
    });
    server_->route("GET", "/api/v1/ranks/{job_id}/{rank}/python-stacks", [](const HttpRequest& req) {
      return HttpResponse::json(200, "{\"job_id\":\"" + req.params.at("job_id") + "\",\"rank\":\"" +
                                         req.params.at("rank") + "\"}");
    });
    server_->route("GET", "/throw", [](const HttpRequest&) -> HttpResponse { throw std::runtime_error("boom"); });
    server_->route("GET", "/throw-int", [](const HttpRequest&) -> HttpResponse { throw 42; });
    server_->route("POST", "/post", [](const HttpRequest& req) {
      return HttpResponse::text(201, "posted " + req.headers.at("content-length"));
    });
    server_->route("GET", "/hdr", [](const HttpRequest&) {
      auto r = HttpResponse::text(200, "h");
      r.headers = {{"X-Ok", "1"}, {"X-Bad", "a\r\nInjected: 1"}, {"Content-Length", "999"}};
      return r;
    });
    server_->route("GET", "/big", [](const HttpRequest&) { return HttpResponse::text(200, std::string(8 << 20, 'x')); });
    auto port = server_->start("127.0.0.1:0");
    ASSERT_TRUE(port.ok()) << port.error();
    port_ = *port;
    ASSERT_NE(port_, 0);
    ASSERT_EQ(server_->port(), port_);
  }

  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

  void expect_alive() {
    auto r = cli::http_get(url("/hello"), 2000ms);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello world\n");
  }

  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
};

TEST_F(HttpServerTest, GetReturnsBodyAndHeaders) {
  auto r = cli::http_get(url("/hello"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hello world\n");
  EXPECT_EQ(r->headers["content-type"], "text/plain; charset=utf-8");
  EXPECT_EQ(r->headers["content-length"], "12");
  EXPECT_EQ(r->headers["connection"], "close");
}

TEST_F(HttpServerTest, HandlerHeadersCannotBreakFraming) {
  std::string resp = raw(port_, "GET /hdr HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 200 OK");
  EXPECT_NE(resp.find("\r\nX-Ok: 1\r\n"), std::string::npos) << resp;
  EXPECT_EQ(resp.find("Injected"), std::string::npos) << resp;
  EXPECT_EQ(resp.find("999"), std::string::npos) << resp;
  EXPECT_NE(resp.find("\r\nContent-Length: 1\r\n"), std::string::npos) << resp;
}

TEST_F(HttpServerTest, UnknownPathIs404) {
  auto r = cli::http_get(url("/nope"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 404);
  r = cli::http_get(url("/hello/"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 404);
}

TEST_F(HttpServerTest, WrongMethodIs405WithAllow) {
  std::string resp = raw(port_, "DELETE /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_NE(resp.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos) << resp;
  resp = raw(port_, "GET /post HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_NE(resp.find("\r\nAllow: POST\r\n"), std::string::npos) << resp;
}

TEST_F(HttpServerTest, HeadIsGetWithoutBody) {
  std::string resp = raw(port_, "HEAD /hello HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 200 OK");
  EXPECT_NE(resp.find("\r\nContent-Length: 12\r\n"), std::string::npos) << resp;
  ASSERT_GE(resp.size(), 4u);
  EXPECT_EQ(resp.substr(resp.size() - 4), "\r\n\r\n") << "HEAD must not send a body";
}

TEST_F(HttpServerTest, OversizedHeadersAre431) {
  std::string req = "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(17 * 1024, 'a') + "\r\n\r\n";
  EXPECT_EQ(status_line(raw(port_, req)), "HTTP/1.1 431 Request Header Fields Too Large");
  // Many small headers add up too.
  std::string many = "GET /hello HTTP/1.1\r\n";
  for (int i = 0; i < 2000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
  many += "\r\n";
  EXPECT_EQ(status_line(raw(port_, many)), "HTTP/1.1 431 Request Header Fields Too Large");
  // An endless stream of headers: answered and closed, not buffered.
  int fd = connect_local(port_);
  ASSERT_GE(fd, 0);
  send_str(fd, "GET /hello HTTP/1.1\r\n");
  std::string line = "X-Flood: " + std::string(100, 'f') + "\r\n";
  for (int i = 0; i < 300; ++i) send_str(fd, line);  // 33 KB, twice the limit
  bool eof = false;
  std::string resp = read_all(fd, 2000ms, &eof);
  ::close(fd);
  EXPECT_EQ(status_line(resp), "HTTP/1.1 431 Request Header Fields Too Large");
  EXPECT_TRUE(eof);
  // A URI over httplib's 8 KiB is a 414.
  EXPECT_EQ(status_line(raw(port_, "GET /" + std::string(9000, 'u') + " HTTP/1.1\r\n\r\n")), "HTTP/1.1 414 URI Too Long");
  EXPECT_EQ(server_->rejections()["header_too_large"], 4u);
  expect_alive();
}

TEST_F(HttpServerTest, GarbageIs400AndServerSurvives) {
  // httplib's parser: a bad request line is a 400 (an unknown HTTP version too), and
  // the connection closes. (It skips header lines without a colon, as many servers do.)
  for (const std::string& bad : {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 15),
                                 std::string("hello there\r\n\r\n"), std::string("GET\r\n\r\n"),
                                 std::string("GET /hello\r\n\r\n"), std::string("GET hello HTTP/1.1\r\n\r\n"),
                                 std::string("GET /hello FOO/1.1\r\n\r\n"), std::string("GET /hello HTTP/2.0\r\n\r\n"),
                                 std::string("BREW /hello HTTP/1.1\r\n\r\n")}) {
    int fd = connect_local(port_);
    ASSERT_GE(fd, 0);
    send_str(fd, bad);
    bool eof = false;
    std::string resp = read_all(fd, 2000ms, &eof);
    ::close(fd);
    EXPECT_EQ(status_line(resp), "HTTP/1.1 400 Bad Request") << bad;
    EXPECT_TRUE(eof) << "the server closes after a malformed request: " << bad;
  }
  std::string binary(3000, '\0');
  for (std::size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>((i * 7919) & 0xff);
  binary += "\r\n\r\n";
  std::string resp = raw(port_, binary);
  EXPECT_TRUE(resp.empty() || status_line(resp) == "HTTP/1.1 400 Bad Request") << status_line(resp);
  EXPECT_GE(server_->rejections()["bad_request"], 8u);
  expect_alive();
}

TEST_F(HttpServerTest, ClientClosingEarlyIsHarmless) {
  for (const char* partial : {"", "GET /hel", "GET /hello HTTP/1.1\r\nHost:"}) {
    int fd = connect_local(port_);
    ASSERT_GE(fd, 0);
    send_str(fd, partial);
    ::close(fd);
  }
  // A client that sends a full request for a big answer and goes away without reading:
  // the server's writes fail (EPIPE/ECONNRESET) and must not raise SIGPIPE.
  for (int i = 0; i < 3; ++i) {
    int fd = connect_local(port_);
    ASSERT_GE(fd, 0);
    send_str(fd, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n");
    std::this_thread::sleep_for(20ms);
    ::close(fd);
  }
  expect_alive();
}

TEST_F(HttpServerTest, SlowClientIsDroppedAfterTheReadTimeout) {
  server_.reset();
  HttpServerOptions opts;
  opts.read_timeout = 300ms;
  start(opts);
  int fd = connect_local(port_);
  ASSERT_GE(fd, 0);
  auto t0 = Clock::now();
  send_str(fd, "GET /hello HTTP/1.1\r\n");  // slowloris: never finishes the headers
  bool eof = false;
  std::thread dribble([fd] {
    for (int i = 0; i < 20; ++i) {  // keeps sending for 1 s
      std::this_thread::sleep_for(50ms);
      send_str(fd, "X");
    }
  });
  // A deadline per recv would never fire here (a byte every 50 ms): one per request does.
  std::string resp = read_all(fd, 1500ms, &eof);
  auto elapsed = Clock::now() - t0;
  dribble.join();
  ::close(fd);
  EXPECT_TRUE(eof) << "the server should have closed the connection";
  EXPECT_GE(elapsed, 250ms);
  EXPECT_EQ(status_line(resp), "HTTP/1.1 408 Request Timeout");
  EXPECT_EQ(server_->rejections()["read_timeout"], 1u);
  expect_alive();
}

TEST_F(HttpServerTest, ThrowingHandlerIs500AndServerGoesOn) {
  auto r = cli::http_get(url("/throw"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 500);
  r = cli::http_get(url("/throw-int"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 500);
  expect_alive();
}

TEST_F(HttpServerTest, ManySequentialAndConcurrentRequests) {
  for (int i = 0; i < 100; ++i) {
    auto r = cli::http_get(url("/hello"), 2000ms);
    ASSERT_TRUE(r.ok()) << i << ": " << r.error();
    ASSERT_EQ(r->status, 200);
  }
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        auto r = cli::http_get(url("/echo?t=" + std::to_string(t) + "&i=" + std::to_string(i)), 2000ms);
        if (r.ok() && r->status == 200 && r->body == "i=" + std::to_string(i) + ";t=" + std::to_string(t) + ";") ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 80);
}

TEST_F(HttpServerTest, QueryIsPercentDecoded) {
  auto r = cli::http_get(url("/echo?a=1&b=x%2Fy+z&c&d=%C3%A9&e="), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "a=1;b=x/y z;c=;d=\xC3\xA9;e=;");
  for (const char* bad : {"/echo?a=%zz", "/echo?a=%4", "/echo?a=%", "/echo?%g1=1"}) {
    r = cli::http_get(url(bad), 2000ms);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->status, 400) << bad;
  }
}

TEST_F(HttpServerTest, RouteParams) {
  auto r = cli::http_get(url("/api/v1/ranks/job%2D1/3/python-stacks"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-type"], "application/json");
  EXPECT_EQ(r->body, R"({"job_id":"job-1","rank":"3"})");
  r = cli::http_get(url("/api/v1/ranks/job1//python-stacks"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 404);
  r = cli::http_get(url("/api/v1/ranks/job1/3/other"), 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 404);
}

TEST_F(HttpServerTest, RequestBodyIsReadAndLimited) {
  std::string resp = raw(port_, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 201 Created");
  EXPECT_NE(resp.find("posted 10"), std::string::npos);
  resp = raw(port_, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n0123456789");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 413 Payload Too Large");
  EXPECT_EQ(server_->rejections()["body_too_large"], 1u);
  resp = raw(port_, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 400 Bad Request");
  resp = raw(port_, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nabcd");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 415 Unsupported Media Type");
  // No Content-Length: no body (httplib alone would read to EOF).
  resp = raw(port_, "POST /post HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 500 Internal Server Error") << "the handler reads a header that is absent";
  resp = raw(port_, "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 400 Bad Request");
  resp = raw(port_, "POST /post HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 501 Not Implemented");
  expect_alive();
}

TEST_F(HttpServerTest, TooManyConnectionsGet503) {
  server_.reset();
  HttpServerOptions opts;
  opts.max_connections = 2;
  opts.max_queued = 0;
  opts.read_timeout = 1500ms;
  start(opts);
  int a = connect_local(port_);
  int b = connect_local(port_);
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  for (int i = 0; i < 100 && server_->active_connections() < 2; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server_->active_connections(), 2u);
  // Read without sending: closing a socket with unread input would reset the connection.
  int c = connect_local(port_);
  ASSERT_GE(c, 0);
  std::string resp = read_all(c, 1000ms);
  ::close(c);
  EXPECT_EQ(status_line(resp), "HTTP/1.1 503 Service Unavailable");
  EXPECT_EQ(server_->rejections()["over_capacity"], 1u);
  ::close(a);
  ::close(b);
  for (int i = 0; i < 200 && server_->active_connections() > 0; ++i) std::this_thread::sleep_for(5ms);
  expect_alive();
}

TEST_F(HttpServerTest, OverTheCapAConnectionWaitsForAThread) {
  server_.reset();
  HttpServerOptions opts;
  opts.max_connections = 1;
  opts.max_queued = 4;
  start(opts);
  int a = connect_local(port_);
  ASSERT_GE(a, 0);
  for (int i = 0; i < 200 && server_->active_connections() < 1; ++i) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server_->active_connections(), 1u);
  Result<cli::HttpResponse> r = make_error("not run");
  std::thread client([&] { r = cli::http_get(url("/hello"), 5000ms); });
  for (int i = 0; i < 200 && server_->queued_total() < 1; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(server_->queued_total(), 1u);
  ::close(a);  // frees the only thread: the queued connection gets it
  client.join();
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(server_->rejections().count("over_capacity"), 0u);
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  int fd = connect_local(port_);
  ASSERT_GE(fd, 0);
  send_str(fd, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\nGET /echo?a=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  bool eof = false;
  std::string resp = read_all(fd, 2000ms, &eof);
  ::close(fd);
  EXPECT_TRUE(eof);
  EXPECT_NE(resp.find("hello world\n"), std::string::npos) << resp;
  EXPECT_NE(resp.find("a=1;"), std::string::npos) << resp;
}

TEST_F(HttpServerTest, StopWithOpenConnectionsIsQuick) {
  int fd = connect_local(port_);
  ASSERT_GE(fd, 0);
  send_str(fd, "GET /hel");
  for (int i = 0; i < 100 && server_->active_connections() < 1; ++i) std::this_thread::sleep_for(5ms);
  auto t0 = Clock::now();
  server_->stop();
  EXPECT_LT(Clock::now() - t0, 1000ms);
  EXPECT_FALSE(server_->running());
  server_->stop();  // idempotent
  ::close(fd);
  EXPECT_LT(connect_local(port_), 0) << "nothing listens after stop()";
}

TEST(HttpServer, ListenAddressValidation) {
  struct Case {
    const char* listen;
    const char* message;
  };
  for (const Case& c : {
           Case{"foo", "invalid --listen address 'foo': expected ADDR:PORT"},
           Case{"", "invalid --listen address '': expected ADDR:PORT"},
           Case{"127.0.0.1", "invalid --listen address '127.0.0.1': expected ADDR:PORT"},
           Case{"127.0.0.1:99999", "invalid --listen address '127.0.0.1:99999': port must be a number 0-65535"},
           Case{"127.0.0.1:abc", "invalid --listen address '127.0.0.1:abc': port must be a number 0-65535"},
           Case{"127.0.0.1:", "invalid --listen address '127.0.0.1:': port must be a number 0-65535"},
           Case{"::1:9745", "invalid --listen address '::1:9745': put an IPv6 address in brackets"},
           Case{"[zz]:9745", "invalid --listen address '[zz]:9745': 'zz' is not an IPv6 address"},
           Case{"[::1]9745", "invalid --listen address '[::1]9745': expected ADDR:PORT"},
           Case{"a b:80", "invalid --listen address 'a b:80': 'a b' is not an address or host name"},
       }) {
    HttpServer s;
    auto r = s.start(c.listen);
    ASSERT_FALSE(r.ok()) << c.listen;
    EXPECT_EQ(r.error().rfind(c.message, 0), 0u) << r.error();
    EXPECT_EQ(r.error().find('\n'), std::string::npos);
  }
  auto ok = parse_listen_address("0.0.0.0:9745");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->host, "0.0.0.0");
  EXPECT_EQ(ok->port, 9745);
  ok = parse_listen_address("[::1]:0");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->host, "::1");
  ok = parse_listen_address(":9745");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->host, "");
}

TEST(HttpServer, PortInUseIsAClearError) {
  HttpServer a;
  auto pa = a.start("127.0.0.1:0");
  ASSERT_TRUE(pa.ok()) << pa.error();
  HttpServer b;
  auto pb = b.start("127.0.0.1:" + std::to_string(*pa));
  ASSERT_FALSE(pb.ok());
  EXPECT_EQ(pb.error(), "cannot listen on 127.0.0.1:" + std::to_string(*pa) + ": Address already in use");
  auto again = a.start("127.0.0.1:0");
  EXPECT_FALSE(again.ok());
}

TEST(HttpServer, ListensOnIpv6Loopback) {
  HttpServer s;
  s.route("GET", "/x", [](const HttpRequest&) { return HttpResponse::text(200, "v6"); });
  auto p = s.start("[::1]:0");
  if (!p.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << p.error();
  auto r = cli::http_get("http://[::1]:" + std::to_string(*p) + "/x", 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->body, "v6");
}

TEST(HttpServer, RoutesAddedAfterStartAndRestart) {
  HttpServer s;
  auto p = s.start("127.0.0.1:0");
  ASSERT_TRUE(p.ok()) << p.error();
  s.route("GET", "/late", [](const HttpRequest&) { return HttpResponse::text(200, "late"); });
  auto r = cli::http_get("http://127.0.0.1:" + std::to_string(*p) + "/late", 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->body, "late");
  s.stop();
  p = s.start("127.0.0.1:0");
  ASSERT_TRUE(p.ok()) << p.error();
  r = cli::http_get("http://127.0.0.1:" + std::to_string(*p) + "/late", 2000ms);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->body, "late");
}

TEST(HttpServer, PercentDecode) {
  EXPECT_EQ(*percent_decode("a%20b+c", true), "a b c");
  EXPECT_EQ(*percent_decode("a%20b+c", false), "a b+c");
  EXPECT_FALSE(percent_decode("%", false).ok());
  EXPECT_FALSE(percent_decode("%a", false).ok());
  EXPECT_FALSE(percent_decode("%zz", false).ok());
  EXPECT_EQ(*percent_decode("%41%42", false), "AB");
}

TEST(HttpServer, BearerTokenGuardsEverythingButHealthz) {
  HttpServerOptions opts;
  opts.auth_token = "s3cret-token";
  HttpServer s(opts);
  s.route("GET", "/metrics", [](const HttpRequest&) { return HttpResponse::text(200, "m"); });
  s.route("GET", "/healthz", [](const HttpRequest&) { return HttpResponse::text(200, "ok\n"); });
  auto p = s.start("127.0.0.1:0");
  ASSERT_TRUE(p.ok()) << p.error();
  const std::string base = "http://127.0.0.1:" + std::to_string(*p);
  cli::ClientOptions none;
  auto r = cli::http_get(base + "/metrics", none);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->headers["www-authenticate"].rfind("Bearer", 0), 0u) << r->headers["www-authenticate"];
  cli::ClientOptions wrong;
  wrong.bearer_token = "s3cret-tokem";
  r = cli::http_get(base + "/metrics", wrong);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 401);
  r = cli::http_get(base + "/nope", none);  // unknown routes do not tell they are unknown
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 401);
  cli::ClientOptions right;
  right.bearer_token = "s3cret-token";
  r = cli::http_get(base + "/metrics", right);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "m");
  r = cli::http_get(base + "/healthz", none);  // the kubelet's probe sends no token
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  // Only GET/HEAD /healthz is open.
  std::string resp = raw(*p, "POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 401 Unauthorized");
  resp = raw(*p, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: bearer   s3cret-token \r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 200 OK") << "the scheme is case-insensitive";
  resp = raw(*p, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic czNjcmV0LXRva2Vu\r\n\r\n");
  EXPECT_EQ(status_line(resp), "HTTP/1.1 401 Unauthorized");
  EXPECT_EQ(s.rejections()["unauthorized"], 5u);
}

}  // namespace
}  // namespace argus
