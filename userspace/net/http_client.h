// argusctl's HTTP(S) GET, on cpp-httplib's client: http:// and https:// (verified
// against the system's CAs, a --ca-cert file, or not at all with --insecure), an
// optional bearer token, a bounded response, one-line errors.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "userspace/common/result.h"

namespace argus::cli {

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased; repeats joined with ", "
};

struct ParsedUrl {
  bool https = false;
  std::string host;          // without brackets for IPv6
  uint16_t port = 80;        // 443 for https unless given
  std::string target = "/";  // path and query, as sent in the request line
};

inline constexpr std::size_t kDefaultMaxResponseBytes = 64ull * 1024 * 1024;

struct ClientOptions {
  std::chrono::milliseconds timeout{5000};  // connect, and each wait for the server
  std::size_t max_response_bytes = kDefaultMaxResponseBytes;
  std::string bearer_token;  // sent as "Authorization: Bearer ..." when set
  std::string ca_cert_file;  // https: trust these CAs instead of the system's
  bool insecure = false;     // https: do not verify the server's certificate
};

// A query value (or path segment) with every byte but RFC 3986's unreserved
// ones (ALPHA DIGIT - . _ ~) as %XX.
std::string percent_encode(const std::string& s);

// "http[s]://host[:port][/path][?query]"; host a name, IPv4 or [IPv6].
// Errors: "invalid URL 'x': expected http://HOST[:PORT][/PATH]", "... only http:// and https:// ...".
Result<ParsedUrl> parse_http_url(const std::string& url);

// GET url. A non-2xx status is not an error (the caller reads .status); errors are
// failures to get any HTTP answer: "cannot connect to 127.0.0.1:9745", "timed out after
// 5000 ms waiting for 127.0.0.1:9745", "response from ... is larger than N bytes",
// "cannot verify the TLS certificate of ... (pass --ca-cert FILE, or --insecure)".
Result<HttpResponse> http_get(const std::string& url, const ClientOptions& options);
Result<HttpResponse> http_get(const std::string& url, std::chrono::milliseconds timeout,
                              std::size_t max_response_bytes = kDefaultMaxResponseBytes);

}  // namespace argus::cli
