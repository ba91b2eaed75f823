// A small, hardened HTTP/1.1 server for /metrics and the JSON API.
//
// One accept thread plus one thread per connection (capped; over the cap a client gets
// 503). Every response closes the connection. Requests are bounded in size and time:
// headers over the limit get 431, a body over the limit 413, a client too slow to send
// its request is dropped. A handler that throws gets the client a 500; the server goes on.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "userspace/common/result.h"

namespace argus {

struct HttpRequest {
  std::string method;  // "GET", "HEAD", ...
  std::string path;    // percent-decoded path, without the query
  std::string raw_query;
  std::map<std::string, std::string> params;   // from {name} segments of the route
  std::map<std::string, std::string> query;    // percent-decoded; '+' is a space; last one wins
  std::map<std::string, std::string> headers;  // names lower-cased; repeated ones joined with ", "
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers

  static HttpResponse text(int status, std::string body);
  static HttpResponse json(int status, std::string body);
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::chrono::milliseconds read_timeout{5000};   // whole request (line, headers, body)
  std::chrono::milliseconds write_timeout{10000};  // whole response
  std::size_t max_header_bytes = 16 * 1024;        // request line + headers -> else 431
  std::size_t max_body_bytes = 1024 * 1024;        // Content-Length above -> 413
  std::size_t max_connections = 64;                // concurrent; above -> 503
};

// A parsed "ADDR:PORT" / "[V6ADDR]:PORT" (ADDR may be a host name or "*" / "" for any).
struct ListenAddress {
  std::string host;  // as written, without brackets; "" for any
  uint16_t port = 0;
};
Result<ListenAddress> parse_listen_address(const std::string& listen);

// Reason phrase for a status code ("Not Found"); "Unknown" for codes it does not know.
const char* http_reason_phrase(int status);

// Percent-decodes s; plus_as_space for query strings. Error on a bad escape.
Result<std::string> percent_decode(const std::string& s, bool plus_as_space);

class HttpServer {
 public:
  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Pattern: an exact path ("/metrics") or one with "{name}" segments
  // ("/api/v1/ranks/{job_id}/{rank}/python-stacks"). A GET route also answers HEAD.
  // Routes may be added before or after start().
  void route(std::string method, std::string path_pattern, HttpHandler handler);

  // Binds and starts serving. Returns the bound port (useful with port 0).
  // Errors are one line: "invalid --listen address 'foo': expected ADDR:PORT",
  // "cannot listen on 0.0.0.0:9745: Address already in use".
  Result<uint16_t> start(const std::string& listen);
  uint16_t port() const { return port_.load(); }
  bool running() const { return running_.load(); }

  // Stops accepting, drops open connections and joins every thread. Idempotent.
  void stop();

  // Connections being served right now (for tests and the agent's own metrics).
  std::size_t active_connections() const { return active_.load(); }

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    HttpHandler handler;
  };
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void accept_loop();
  void serve(Connection* conn);
  HttpResponse dispatch(HttpRequest& req);
  void reap(bool all);

  HttpServerOptions opts_;
  std::shared_mutex routes_mu_;
  std::vector<Route> routes_;

  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<uint16_t> port_{0};
  std::atomic<bool> running_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<std::size_t> active_{0};
  std::thread accept_thread_;
  std::mutex conns_mu_;
  std::list<std::unique_ptr<Connection>> conns_;
  std::mutex lifecycle_mu_;
};

}  // namespace argus
