// The agent's HTTP(S) server for /metrics and the JSON API, on cpp-httplib (Debian's
// libcpp-httplib, 0.11).
//
// httplib parses requests and writes responses; this class adds what a root daemon on
// a shared node needs on top:
//  - Each connection runs on its own thread, up to max_connections (a generous cap:
//    a few hundred idle clients must not starve Prometheus or the kubelet's /healthz).
//    Beyond it connections wait in a bounded queue; beyond that they get 503.
//  - One deadline per request (line, headers, body: read_timeout), not per recv, so a
//    client that trickles bytes is dropped; headers over max_header_bytes get 431, a
//    body over max_body_bytes 413; keep-alive is bounded in count and idle time.
//  - A handler that throws gets the client a 500; the server goes on.
//  - Optional TLS (cert and key files) and a bearer token that every route except
//    GET /healthz requires (compared in constant time).
// Every rejection is counted by reason (rejections()), for argus_agent_http_rejections_total.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
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
  std::chrono::milliseconds read_timeout{5000};    // whole request (line, headers, body)
  std::chrono::milliseconds write_timeout{10000};  // whole response
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle wait for the next request
  std::size_t keep_alive_max_requests = 100;           // then the connection is closed
  std::size_t max_header_bytes = 16 * 1024;  // request line + headers -> else 431
  std::size_t max_body_bytes = 1024 * 1024;  // Content-Length above -> 413
  std::size_t max_connections = 1024;        // served at once, one thread each
  std::size_t max_queued = 1024;             // accepted and waiting for a thread; above -> 503
  // HTTPS when both are set (PEM files; the cert file may hold a chain).
  std::string tls_cert_file;
  std::string tls_key_file;
  // When set, every route but GET/HEAD /healthz needs "Authorization: Bearer <token>".
  std::string auth_token;
};

// Reasons rejections() counts (the label values of argus_agent_http_rejections_total).
inline constexpr const char* kRejectOverCapacity = "over_capacity";    // 503: no thread and the queue full
inline constexpr const char* kRejectReadTimeout = "read_timeout";      // request not complete in time
inline constexpr const char* kRejectHeaderTooLarge = "header_too_large";  // 431 / 414
inline constexpr const char* kRejectBodyTooLarge = "body_too_large";   // 413
inline constexpr const char* kRejectBadRequest = "bad_request";        // 400, 411, 415, 501, 505
inline constexpr const char* kRejectUnauthorized = "unauthorized";     // 401
inline constexpr const char* kRejectTls = "tls_handshake";             // TLS handshake failed

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

// Checks that cert and key load and match (what start() does with them), for a clear
// one-line error at the agent's start: "cannot read --tls-cert x.pem: No such file ...".
Result<bool> check_tls_files(const std::string& cert_file, const std::string& key_file);

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
  // "cannot listen on 0.0.0.0:9745: Address already in use", "cannot load --tls-cert ...".
  Result<uint16_t> start(const std::string& listen);
  uint16_t port() const { return port_.load(); }
  bool running() const { return running_.load(); }
  bool tls() const { return !opts_.tls_cert_file.empty(); }

  // Stops accepting, drops open connections and joins every thread. Idempotent.
  void stop();

  // Connections being served right now (for tests and the agent's own metrics).
  std::size_t active_connections() const;
  // Connections that had to wait for a thread, since construction.
  uint64_t queued_total() const;
  // Rejected requests and connections by reason (kReject*), since construction.
  std::map<std::string, uint64_t> rejections() const;

  struct Impl;  // the httplib side (http_server_impl.h)

 private:
  struct Route {
    std::string method;
    std::vector<std::string> segments;
    HttpHandler handler;
  };

  HttpResponse dispatch(HttpRequest& req);

  HttpServerOptions opts_;
  std::shared_mutex routes_mu_;
  std::vector<Route> routes_;
  std::shared_ptr<Impl> impl_;  // counters and the connection registry outlive one start()
  std::atomic<uint16_t> port_{0};
  std::atomic<bool> running_{false};
  std::mutex lifecycle_mu_;
};

}  // namespace argus
