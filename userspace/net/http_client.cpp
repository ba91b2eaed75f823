#include "userspace/net/http_client.h"

#include "userspace/net/http_headers.h"

#if !defined(CPPHTTPLIB_OPENSSL_SUPPORT) || !defined(CPPHTTPLIB_ZLIB_SUPPORT) || !defined(CPPHTTPLIB_BROTLI_SUPPORT)
#error "compile with the cpp-httplib defines from pkg-config (OPENSSL, ZLIB and BROTLI support)"
#endif
#include <httplib.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <memory>

#ifndef ARGUS_VERSION
#define ARGUS_VERSION "dev"
#endif

namespace argus::cli {

namespace {

using Clock = std::chrono::steady_clock;

using net::lower;

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string percent_encode(const std::string& s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

Result<ParsedUrl> parse_http_url(const std::string& url) {
  auto bad = [&](const std::string& why) { return make_error("invalid URL '" + url + "': " + why); };
  auto sep = url.find("://");
  if (sep == std::string::npos) return bad("expected http://HOST[:PORT][/PATH]");
  const std::string scheme = lower(url.substr(0, sep));
  if (scheme != "http" && scheme != "https") return bad("only http:// and https:// are supported");
  ParsedUrl out;
  out.https = scheme == "https";
  out.port = out.https ? 443 : 80;
  std::string rest = url.substr(sep + 3);
  auto auth_end = rest.find_first_of("/?#");
  std::string authority = rest.substr(0, auth_end);
  std::string target = auth_end == std::string::npos ? std::string() : rest.substr(auth_end);
  if (auto hash = target.find('#'); hash != std::string::npos) target.resize(hash);
  if (target.empty() || target[0] != '/') target = "/" + target;
  for (char c : target) {
    auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return bad("the path has spaces or control characters (percent-encode them)");
  }
  if (authority.find('@') != std::string::npos) return bad("user names and passwords are not supported");

  out.target = target;
  std::string port_str;
  bool has_port = false;
  if (!authority.empty() && authority[0] == '[') {
    auto close = authority.find(']');
    if (close == std::string::npos) return bad("unclosed '[' in the host");
    out.host = authority.substr(1, close - 1);
    in6_addr a6{};
    if (::inet_pton(AF_INET6, out.host.c_str(), &a6) != 1) return bad("'" + out.host + "' is not an IPv6 address");
    std::string after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return bad("expected ':PORT' after ']'");
      port_str = after.substr(1);
      has_port = true;
    }
  } else {
    auto colon = authority.find(':');
    out.host = authority.substr(0, colon);
    if (colon != std::string::npos) {
      port_str = authority.substr(colon + 1);
      has_port = true;
    }
    for (char c : out.host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        return bad("'" + out.host + "' is not a host name or address");
      }
    }
  }
  if (out.host.empty()) return bad("empty host");
  if (has_port) {
    if (!all_digits(port_str) || port_str.size() > 5) return bad("bad port '" + port_str + "'");
    unsigned long p = std::stoul(port_str);
    if (p == 0 || p > 65535) return bad("bad port '" + port_str + "'");
    out.port = static_cast<uint16_t>(p);
  }
  return out;
}

Result<HttpResponse> http_get(const std::string& url, std::chrono::milliseconds timeout, std::size_t max_response_bytes) {
  ClientOptions o;
  o.timeout = timeout;
  o.max_response_bytes = max_response_bytes;
  return http_get(url, o);
}

Result<HttpResponse> http_get(const std::string& url, const ClientOptions& options) {
  auto parsed = parse_http_url(url);
  if (!parsed) return make_error(parsed.error());
  const ParsedUrl& u = *parsed;
  const bool v6 = u.host.find(':') != std::string::npos;
  const std::string where = (v6 ? "[" + u.host + "]" : u.host) + ":" + std::to_string(u.port);
  const auto timeout = options.timeout;

  std::unique_ptr<httplib::ClientImpl> client;
  if (u.https) {
    auto tls = std::make_unique<httplib::SSLClient>(u.host, u.port);
    tls->enable_server_certificate_verification(!options.insecure);
    if (!options.ca_cert_file.empty()) tls->set_ca_cert_path(options.ca_cert_file.c_str());
    client = std::move(tls);
  } else {
    client = std::make_unique<httplib::ClientImpl>(u.host, u.port);
  }
  client->set_connection_timeout(timeout);
  client->set_read_timeout(timeout);
  client->set_write_timeout(timeout);
  client->set_keep_alive(false);
  client->set_url_encode(false);  // the target is sent as given (parse_http_url checked it)
  if (!options.bearer_token.empty()) client->set_bearer_token_auth(options.bearer_token.c_str());

  HttpResponse out;
  bool too_large = false;
  bool too_slow = false;
  const auto deadline = Clock::now() + timeout;
  const httplib::Headers headers = {{"User-Agent", "argusctl/" ARGUS_VERSION}, {"Accept", "*/*"}};
  const auto start = Clock::now();
  auto res = client->Get(
      u.target, headers,
      [&](const httplib::Response& r) {
        out.status = r.status;
        for (const auto& [k, v] : r.headers) net::add_header(out.headers, k, v);
        return true;
      },
      [&](const char* data, size_t len) {
        if (out.body.size() + len > options.max_response_bytes) {
          too_large = true;
          return false;
        }
        if (Clock::now() > deadline) {  // one deadline for the whole body, however it trickles
          too_slow = true;
          return false;
        }
        out.body.append(data, len);
        return true;
      });
  if (res) return out;
  const auto ms = std::to_string(timeout.count()) + " ms";
  const bool late = too_slow || Clock::now() - start >= timeout;
  if (too_large)
    return make_error("response from " + where + " is larger than " + std::to_string(options.max_response_bytes) +
                      " bytes");
  switch (res.error()) {
    case httplib::Error::Connection:
      return make_error("cannot connect to " + where + " (connection refused or unreachable)");
    case httplib::Error::ConnectionTimeout:
      return make_error("timed out after " + ms + " connecting to " + where);
    case httplib::Error::SSLLoadingCerts:
      return make_error("cannot load CA certificates" +
                        (options.ca_cert_file.empty() ? std::string() : " from " + options.ca_cert_file));
    case httplib::Error::SSLServerVerification:
      return make_error("cannot verify the TLS certificate of " + where + " (pass --ca-cert FILE, or --insecure)");
    case httplib::Error::SSLConnection:
      return make_error("TLS handshake with " + where + " failed (is it an https:// agent?)");
    case httplib::Error::Write:
      return make_error("cannot send the request to " + where);
    default:
      if (late) return make_error("timed out after " + ms + " waiting for " + where);
      return make_error("bad or truncated HTTP response from " + where + " (" + httplib::to_string(res.error()) + ")");
  }
}

}  // namespace argus::cli
