// What the server lets in, and the count of what it turns away by reason (rejections()
// in exporters/http_server.h): connections beyond its threads and queue, requests whose
// framing or size it does not take, and requests httplib refused before routing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "exporters/http_conn.h"
#include "exporters/http_httplib.h"
#include "exporters/http_server.h"

namespace argus::httpd {

// What one connection's request left for the code after httplib: whether our
// handler ran, why it was refused, whether the connection must close.
struct ConnState {
  ConnStream* stream = nullptr;
  bool dispatched = false;
  const char* reject = nullptr;  // counted when set (Rejections::note), once per request
  bool close_after = false;
};

// httplib calls our hooks on the connection's own thread: they find its state here.
extern thread_local ConnState* tl_conn;

// Rejected requests and connections by reason (kReject*), since the server was made.
class Rejections {
 public:
  void count(const char* reason);
  // A request refused: counted at once (before the answer goes out), once.
  void note(ConnState* st, const char* reason);
  std::map<std::string, uint64_t> snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> counts_;
};

// httplib's task queue for impl's server: a thread per connection up to
// max_connections, then up to max_queued waiting; a connection beyond those is run
// on the accepting thread, where refuse_over_capacity answers it.
httplib::TaskQueue* new_conn_queue(std::shared_ptr<HttpServer::Impl> impl);

// On the connection's thread, before anything else: true (and the connection answered
// 503 and counted) when the queue had no room for it.
bool refuse_over_capacity(int fd, Rejections& rejections);

// When the connection being served was accepted (its first request's deadline counts
// from there).
Clock::time_point accepted_at();

// Before httplib reads a body: refuses what we do not take (Transfer-Encoding,
// Content-Encoding, a bad or too large Content-Length), and answers every request
// without a body through `handle` at once (httplib would read a body-less POST until EOF).
httplib::Server::HandlerResponse admit(const httplib::Request& req, httplib::Response& res, std::size_t max_body_bytes,
                                       Rejections& rejections, const httplib::Server::Handler& handle);

// A request httplib refused before routing (bad request line or header, URI too
// long, cut short): says why in one line, counts it, and closes the connection.
httplib::Server::HandlerResponse explain_refusal(httplib::Response& res, Rejections& rejections);

}  // namespace argus::httpd
