// cpp-httplib for the server's own files; exporters/http_server.h, its API, does not
// expose it.
#pragma once

// cpp-httplib is built by Debian with OpenSSL, zlib and brotli support; its Request
// layout depends on those defines, which pkg-config (cpp-httplib) hands to the compiler.
#if !defined(CPPHTTPLIB_OPENSSL_SUPPORT) || !defined(CPPHTTPLIB_ZLIB_SUPPORT) || !defined(CPPHTTPLIB_BROTLI_SUPPORT)
#error "compile with the cpp-httplib defines from pkg-config (OPENSSL, ZLIB and BROTLI support)"
#endif
#include <httplib.h>
