// The server's listening socket, for an address that parse_listen_address
// (exporters/http_server.h) accepted.
#pragma once
#include <cstdint>
#include <string>

#include "userspace/common/result.h"

namespace argus::httpd {

// A listening socket on host:port (host "" for any), or one line saying why not;
// `listen` is the --listen value as given, for that line. Blocking (httplib's accept
// loop blocks), with a generous backlog so a burst of clients is not refused before
// our own caps apply.
Result<int> bind_listen(const std::string& listen, const std::string& host, uint16_t port);

// The port fd is bound to (the one the kernel chose for port 0); fallback if unknown.
uint16_t bound_port(int fd, uint16_t fallback);

}  // namespace argus::httpd
