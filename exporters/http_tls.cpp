#include "exporters/http_tls.h"
#include "exporters/http_server.h"

#include <openssl/err.h>
#include <openssl/x509.h>
#include <poll.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

namespace argus {

namespace httpd {

namespace {

std::string openssl_error() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown TLS error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using SslCtx = std::unique_ptr<SSL_CTX, SslCtxFree>;

}  // namespace

Result<std::shared_ptr<SSL_CTX>> load_tls(const std::string& cert, const std::string& key) {
  if (cert.empty() != key.empty())
    return make_error(cert.empty() ? "--tls-key needs --tls-cert" : "--tls-cert needs --tls-key");
  for (const auto& [flag, path] : {std::pair{"--tls-cert", cert}, std::pair{"--tls-key", key}}) {
    FILE* f = std::fopen(path.c_str(), "r");
    if (!f) return make_error(std::string("cannot read ") + flag + " " + path + ": " + std::strerror(errno));
    std::fclose(f);
  }
  ERR_clear_error();
  SslCtx ctx(SSL_CTX_new(TLS_server_method()));
  if (!ctx) return make_error("cannot create a TLS context: " + openssl_error());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(ctx.get(), cert.c_str()) != 1)
    return make_error("--tls-cert " + cert + " is not a usable PEM certificate: " + openssl_error());
  if (SSL_CTX_use_PrivateKey_file(ctx.get(), key.c_str(), SSL_FILETYPE_PEM) != 1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      ERR_clear_error();
      return make_error("--tls-key " + key + " does not match --tls-cert " + cert);
    }
    return make_error("--tls-key " + key + " is not a usable PEM private key: " + openssl_error());
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1)
    return make_error("--tls-key " + key + " does not match --tls-cert " + cert);
  return std::shared_ptr<SSL_CTX>(ctx.release(), SslCtxFree{});
}

bool tls_handshake(SSL* ssl, int fd, Clock::time_point deadline) {
  for (;;) {
    ERR_clear_error();
    int r = SSL_accept(ssl);
    if (r == 1) return true;
    int err = SSL_get_error(ssl, r);
    short ev = err == SSL_ERROR_WANT_READ ? POLLIN : err == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
    if (ev == 0) {
      spdlog::debug("http: TLS handshake failed: {}", openssl_error());
      return false;
    }
    if (wait_fd(fd, ev, deadline) <= 0) return false;
  }
}

}  // namespace httpd

Result<bool> check_tls_files(const std::string& cert_file, const std::string& key_file) {
  auto ctx = httpd::load_tls(cert_file, key_file);
  if (!ctx) return make_error(ctx.error());
  return true;
}

}  // namespace argus
