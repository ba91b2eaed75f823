// HttpServer::Impl, the httplib side of exporters/http_server.h's HttpServer, shared
// by the server's files.
#pragma once
#include <openssl/ssl.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "exporters/http_admission.h"
#include "exporters/http_auth.h"
#include "exporters/http_httplib.h"
#include "exporters/http_server.h"

namespace argus {

// Counters and live connections, shared by every start() of one HttpServer.
struct HttpServer::Impl {
  HttpServerOptions opts;
  std::shared_ptr<SSL_CTX> tls;  // null: plain HTTP
  httpd::BearerAuth auth;

  std::atomic<bool> stopping{false};
  std::atomic<std::size_t> active{0};
  std::atomic<uint64_t> queued{0};
  httpd::Rejections rejections;
  std::mutex conns_mu;
  std::set<int> conns;

  // The running httplib server and its accept thread (one per start()).
  std::unique_ptr<httplib::Server> backend;
  std::thread listener;
  std::atomic<bool> listener_done{true};

  // Registers a connection; false when the server is stopping (then close it at once).
  bool add_conn(int fd);
  void remove_conn(int fd);
  // Wakes every connection thread out of its poll: they see EOF and end.
  void drop_conns();
};

}  // namespace argus
