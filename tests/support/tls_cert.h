// A throwaway self-signed certificate for 127.0.0.1/localhost, made with the openssl CLI
// (Debian package openssl) in a test's temp dir.
#pragma once
#include <cstdlib>
#include <string>

namespace argus::testing_support {

struct TlsFiles {
  std::string cert, key;
};

// Writes dir/NAME.pem and dir/NAME.key. False if openssl is missing or failed.
inline bool make_self_signed(const std::string& dir, TlsFiles& out, const std::string& name = "server") {
  out.cert = dir + "/" + name + ".pem";
  out.key = dir + "/" + name + ".key";
  const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
                          "-subj /CN=localhost -addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout '" +
                          out.key + "' -out '" + out.cert + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace argus::testing_support
