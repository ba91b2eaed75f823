// HttpServer over TLS: it serves with a certificate the client verifies, and a
// bad certificate or key is one clear line, from the check and from start().
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "exporters/http_server.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tls_cert.h"
#include "userspace/net/http_client.h"

namespace argus {
namespace {

using namespace std::chrono_literals;

class HttpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(testing_support::make_self_signed(dir_.str(), tls_)) << "openssl CLI missing (scripts/install-deps.sh)";
  }
  testing_support::TempDir dir_{"https"};
  testing_support::TlsFiles tls_;
};

TEST_F(HttpsTest, ServesTlsAndTheClientVerifies) {
  HttpServerOptions opts;
  opts.tls_cert_file = tls_.cert;
  opts.tls_key_file = tls_.key;
  HttpServer s(opts);
  s.route("GET", "/x", [](const HttpRequest&) { return HttpResponse::text(200, "over tls"); });
  auto p = s.start("127.0.0.1:0");
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_TRUE(s.tls());
  const std::string url = "https://127.0.0.1:" + std::to_string(*p) + "/x";
  cli::ClientOptions trust;
  trust.ca_cert_file = tls_.cert;
  auto r = cli::http_get(url, trust);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "over tls");
  r = cli::http_get(url, cli::ClientOptions{});  // the system's CAs do not know it
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().rfind("cannot verify the TLS certificate of 127.0.0.1:", 0), 0u) << r.error();
  cli::ClientOptions insecure;
  insecure.insecure = true;
  r = cli::http_get(url, insecure);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
  // Plain HTTP to the TLS port: no answer, counted; the server goes on.
  r = cli::http_get("http://127.0.0.1:" + std::to_string(*p) + "/x", 2000ms);
  EXPECT_TRUE(!r.ok() || r->status >= 400);
  for (int i = 0; i < 200 && s.rejections()["tls_handshake"] < 1; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(s.rejections()["tls_handshake"], 1u);
  r = cli::http_get(url, trust);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpsTest, BadCertOrKeyIsOneClearLine) {
  testing_support::TlsFiles other;
  ASSERT_TRUE(testing_support::make_self_signed(dir_.str(), other, "other"));
  const std::string junk = dir_.str() + "/junk.pem";
  { std::ofstream(junk) << "not a certificate\n"; }
  struct Case {
    std::string cert, key, message;
  };
  for (const Case& c : {
           Case{tls_.cert, "", "--tls-cert needs --tls-key"},
           Case{"", tls_.key, "--tls-key needs --tls-cert"},
           Case{dir_.str() + "/none.pem", tls_.key, "cannot read --tls-cert " + dir_.str() + "/none.pem: No such file"},
           Case{junk, tls_.key, "--tls-cert " + junk + " is not a usable PEM certificate"},
           Case{tls_.cert, junk, "--tls-key " + junk + " is not a usable PEM private key"},
           Case{tls_.cert, other.key, "--tls-key " + other.key + " does not match --tls-cert " + tls_.cert},
       }) {
    auto r = check_tls_files(c.cert, c.key);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.error().rfind(c.message, 0), 0u) << r.error();
    EXPECT_EQ(r.error().find('\n'), std::string::npos);
    HttpServerOptions opts;
    opts.tls_cert_file = c.cert;
    opts.tls_key_file = c.key;
    HttpServer s(opts);
    auto p = s.start("127.0.0.1:0");
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.error(), r.error());
  }
  EXPECT_TRUE(check_tls_files(tls_.cert, tls_.key).ok());
}

}  // namespace
}  // namespace argus
