// A minimal blocking HTTP/1.1 GET client for argusctl (no libcurl): http:// only,
// Connection: close, Content-Length / chunked / read-to-EOF bodies, bounded size,
// one deadline for the whole exchange, one-line errors.
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
  std::string host;         // without brackets for IPv6
  uint16_t port = 80;
  std::string target = "/";  // path and query, as sent in the request line
};

inline constexpr std::size_t kDefaultMaxResponseBytes = 64ull * 1024 * 1024;

// "http://host[:port][/path][?query]"; host a name, IPv4 or [IPv6].
// Errors: "invalid URL 'x': expected http://HOST[:PORT][/PATH]", "https is not supported ...".
Result<ParsedUrl> parse_http_url(const std::string& url);

// GET url. A non-2xx status is not an error (the caller reads .status); errors are
// failures to get any HTTP answer: "cannot connect to 127.0.0.1:9745: Connection refused",
// "timed out after 5000 ms waiting for 127.0.0.1:9745", "response larger than 67108864 bytes".
Result<HttpResponse> http_get(const std::string& url, std::chrono::milliseconds timeout,
                              std::size_t max_response_bytes = kDefaultMaxResponseBytes);

}  // namespace argus::cli
