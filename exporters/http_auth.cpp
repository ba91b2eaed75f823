#include "exporters/http_auth.h"
#include "exporters/http_message.h"

#include <openssl/crypto.h>

namespace argus::httpd {

namespace {

// SHA-256 of s: tokens are compared as digests, in constant time and length.
std::array<unsigned char, SHA256_DIGEST_LENGTH> sha256(const std::string& s) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> d{};
  SHA256(reinterpret_cast<const unsigned char*>(s.data()), s.size(), d.data());
  return d;
}

// The token of an "Authorization: Bearer TOKEN" value; "" if it is not one.
std::string bearer_token(const std::string& value) {
  std::size_t sp = value.find_first_of(" \t");
  if (sp == std::string::npos || lower(value.substr(0, sp)) != "bearer") return "";
  std::size_t b = value.find_first_not_of(" \t", sp);
  if (b == std::string::npos) return "";
  std::size_t e = value.find_last_not_of(" \t");
  return value.substr(b, e - b + 1);
}

}  // namespace

BearerAuth::BearerAuth(const std::string& token) : enabled_(!token.empty()) {
  if (enabled_) token_digest_ = sha256(token);
}

bool BearerAuth::authorized(const std::string& authorization) const {
  if (!enabled_) return true;
  const auto got = sha256(bearer_token(authorization));
  return CRYPTO_memcmp(got.data(), token_digest_.data(), got.size()) == 0;
}

bool needs_token(const HttpRequest& req) {
  const bool health = (req.method == "GET" || req.method == "HEAD") && req.path == "/healthz";
  return !health;
}

HttpResponse token_refused() {
  auto deny = HttpResponse::json(401, "{\"error\":\"missing or wrong bearer token (Authorization: Bearer ...)\"}");
  deny.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"argus\"");
  return deny;
}

}  // namespace argus::httpd
