// Text helpers shared by the server's files. http_message.cpp also defines what
// exporters/http_server.h declares about messages: HttpResponse's shorthands, the
// reason phrases and percent-decoding.
#pragma once
#include <string>

#include "userspace/net/http_headers.h"

namespace argus::httpd {

// ASCII lower case (header names, the "Bearer" scheme, reason phrases in bodies).
using net::lower;

}  // namespace argus::httpd
