// The server's TLS: the context from --tls-cert and --tls-key (check_tls_files in
// exporters/http_server.h runs the same checks), and the handshake under a deadline.
#pragma once
#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "exporters/http_conn.h"
#include "userspace/common/result.h"

namespace argus::httpd {

// Cert and key as one SSL_CTX, or one line saying which file is wrong and why.
Result<std::shared_ptr<SSL_CTX>> load_tls(const std::string& cert, const std::string& key);

// The server's side of the handshake on fd; false when it failed or the deadline passed.
bool tls_handshake(SSL* ssl, int fd, Clock::time_point deadline);

}  // namespace argus::httpd
