// The bearer token (--auth-token) that every route but GET/HEAD /healthz requires.
#pragma once
#include <openssl/sha.h>

#include <array>
#include <string>

#include "exporters/http_server.h"

namespace argus::httpd {

// Checks the token of "Authorization: Bearer TOKEN" values against the one it was
// made with (compared as SHA-256 digests, in constant time).
class BearerAuth {
 public:
  BearerAuth() = default;  // no token: every request is authorized
  explicit BearerAuth(const std::string& token);

  // Whether a request with this Authorization header value ("" if none) may pass.
  bool authorized(const std::string& authorization) const;

 private:
  std::array<unsigned char, SHA256_DIGEST_LENGTH> token_digest_{};
  bool enabled_ = false;
};

// Whether the request needs the token: all but GET and HEAD /healthz, which the
// kubelet's probe asks without one.
bool needs_token(const HttpRequest& req);

// The 401 for a missing or wrong token, with the challenge clients expect.
HttpResponse token_refused();

}  // namespace argus::httpd
