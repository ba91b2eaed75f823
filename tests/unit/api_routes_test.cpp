// The agent's HTTP routes against a hand-made source: what each route answers,
// and how it refuses bad input, with no BPF, runtime or root.
#include "exporters/api_routes.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "userspace/net/http_client.h"

namespace argus {
namespace {

using namespace std::chrono_literals;

struct FakeSource : ApiSource {
  Snapshot snap;
  std::vector<DetectedEvent> events;
  double heartbeat_age = 0.1;
  Snapshot snapshot() const override { return snap; }
  std::vector<DetectedEvent> events_since(double t) const override {
    std::vector<DetectedEvent> out;
    for (const auto& e : events)
      if (e.time >= t) out.push_back(e);
    return out;
  }
  std::vector<TraceRank> trace(double, uint64_t* end_ns) const override {
    if (end_ns) *end_ns = 5'000'000'000ULL;
    return {};
  }
  StepHistory gpu_steps(int, size_t) const override { return {}; }
  double seconds_since_heartbeat() const override { return heartbeat_age; }
  uint64_t monotonic_ns() const override { return 5'000'000'000ULL; }
  Result<std::string> python_profile(int pid, double seconds) const override {
    if (pid != 42) return make_error("no Python interpreter located in pid " + std::to_string(pid));
    last_profile_seconds = seconds;
    return std::string("<module> (a.py:3);f (a.py:1) 7\n");
  }
  mutable double last_profile_seconds = 0;
};

class ApiRoutes : public ::testing::Test {
 protected:
  void SetUp() override { start(false); }
  void start(bool debug_routes) {
    RankSnapshot r;
    r.pid = 42;
    r.job_id = "j";
    r.rank = 3;
    r.sync_wait_ratio = 0.25;
    src.snap.ranks = {r};
    src.snap.agent.window_seconds = 10;
    DetectedEvent link;
    link.time = 1'700'000'100;
    link.kind = EventKind::kLinkDegraded;
    link.device = "mlx5_0";
    link.port = 1;
    link.summary = "mlx5_0 port 1 degraded (errors)";
    DetectedEvent strag;
    strag.time = 1'700'000'000;
    strag.kind = EventKind::kStraggler;
    strag.job_id = "j";
    strag.rank = 3;
    src.events = {strag, link};
    ApiOptions opts;
    opts.debug_routes = debug_routes;
    opts.extra_metrics = [](const Snapshot&) { return std::vector<prometheus::MetricFamily>{}; };
    http = std::make_unique<HttpServer>();
    register_api_routes(*http, src, opts);
    auto port = http->start("127.0.0.1:0");
    ASSERT_TRUE(port.ok()) << port.error();
    base = "http://127.0.0.1:" + std::to_string(*port);
  }
  void TearDown() override { http->stop(); }
  cli::HttpResponse get(const std::string& path) {
    auto r = cli::http_get(base + path, 2000ms);
    EXPECT_TRUE(r.ok()) << path;
    return r.ok() ? *r : cli::HttpResponse{};
  }
  FakeSource src;
  std::unique_ptr<HttpServer> http;
  std::string base;
};

TEST_F(ApiRoutes, MetricsRanksAndEventsFromTheSource) {
  const auto m = get("/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("argus_sync_wait_ratio{job_id=\"j\",rank=\"3\"} 0.25"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("argus_agent_window_seconds 10"), std::string::npos);
  const auto ranks = nlohmann::json::parse(get("/api/v1/ranks").body);
  ASSERT_EQ(ranks["ranks"].size(), 1u);
  EXPECT_EQ(ranks["ranks"][0]["pid"], 42);
  // Link events come through the same log as the others, with device and port.
  const auto evs = nlohmann::json::parse(get("/api/v1/events?since=1700000050").body)["events"];
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0]["kind"], "link_degraded");
  EXPECT_EQ(evs[0]["device"], "mlx5_0");
  EXPECT_EQ(evs[0]["port"], 1);
  EXPECT_TRUE(evs[0]["job_id"].is_null());
  EXPECT_EQ(nlohmann::json::parse(get("/api/v1/events").body)["events"].size(), 2u);
}

TEST_F(ApiRoutes, DebugRoutesAreOffUnlessEnabled) {
  for (const char* path : {"/api/v1/trace?seconds=2", "/api/v1/comms", "/api/v1/ranks/j/3/python-stacks",
                           "/api/v1/ranks/j/3/profile"}) {
    const auto r = get(path);
    EXPECT_EQ(r.status, 404) << path;
    const auto body = nlohmann::json::parse(r.body);
    EXPECT_EQ(body["disabled"], true) << path;
    EXPECT_NE(body["error"].get<std::string>().find("--debug-routes"), std::string::npos) << r.body;
  }
  http->stop();
  start(true);
  EXPECT_EQ(get("/api/v1/trace?seconds=2").status, 200);
  EXPECT_EQ(get("/api/v1/comms").status, 200);
  EXPECT_EQ(get("/api/v1/trace?seconds=-1").status, 400);
}

TEST_F(ApiRoutes, ProfileAnswersFoldedTextAndRefusesBadSeconds) {
  http->stop();
  start(true);
  const auto r = get("/api/v1/ranks/j/3/profile?seconds=20");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "<module> (a.py:3);f (a.py:1) 7\n");
  EXPECT_DOUBLE_EQ(src.last_profile_seconds, 20);
  EXPECT_EQ(get("/api/v1/ranks/j/3/profile").status, 200);
  EXPECT_DOUBLE_EQ(src.last_profile_seconds, 60);  // the default
  for (const char* bad : {"abc", "0", "-5", "3601", "5x", "nan"}) {
    const auto b = get(std::string("/api/v1/ranks/j/3/profile?seconds=") + bad);
    EXPECT_EQ(b.status, 400) << bad;
    EXPECT_NE(b.body.find("seconds must be"), std::string::npos) << b.body;
  }
  EXPECT_EQ(get("/api/v1/ranks/j/9/profile").status, 404);
  EXPECT_EQ(get("/api/v1/ranks/j/x/profile").status, 400);
}

TEST_F(ApiRoutes, MetricsCountHttpRejections) {
  EXPECT_EQ(get("/api/v1/events?since=x").status, 400);  // a handler's 400 is not a rejection
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(http->port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const std::string bad = "NOT HTTP\r\n\r\n";
  ASSERT_EQ(::send(fd, bad.data(), bad.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bad.size()));
  char buf[512];
  while (::recv(fd, buf, sizeof(buf), 0) > 0) {
  }
  ::close(fd);
  const auto m = get("/metrics");
  EXPECT_NE(m.body.find("# TYPE argus_agent_http_rejections_total counter"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("argus_agent_http_rejections_total{reason=\"bad_request\"} 1"), std::string::npos) << m.body;
}

// The finding of issue 10: slow clients that hold connections open must not starve
// Prometheus or the kubelet. 500 of them each send half a request line and sit idle.
TEST_F(ApiRoutes, ScrapesAndHealthzWorkWhile500SlowClientsHoldConnections) {
  constexpr int kSlow = 500;
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_cur < 2 * kSlow + 200) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < 2 * kSlow + 200) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << lim.rlim_max << " is too low";
  std::vector<int> slow;
  for (int i = 0; i < kSlow; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(http->port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << i;
    ASSERT_EQ(::send(fd, "GET /metr", 9, MSG_NOSIGNAL), 9);
    slow.push_back(fd);
  }
  for (int i = 0; i < 500 && http->active_connections() < kSlow; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(http->active_connections(), static_cast<size_t>(kSlow)) << "every slow client holds a connection";
  const auto m = get("/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("argus_agent_window_seconds 10"), std::string::npos);
  const auto h = get("/healthz");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(http->rejections().count("over_capacity"), 0u);
  for (int fd : slow) ::close(fd);
}

TEST_F(ApiRoutes, BadInputIsA400WithAReason) {
  for (const char* path : {"/api/v1/events?since=yesterday", "/api/v1/events?since=", "/api/v1/events?since=nan",
                           "/api/v1/ranks/j/x/gpu-steps", "/api/v1/ranks/j/3/gpu-steps?last=0",
                           "/api/v1/ranks/j/3/gpu-steps?last=601"}) {
    const auto r = get(path);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_TRUE(nlohmann::json::parse(r.body).contains("error")) << path;
  }
  EXPECT_EQ(get("/api/v1/ranks/j/4/gpu-steps").status, 404);
  EXPECT_EQ(get("/api/v1/ranks/j/3/gpu-steps").status, 200);
}

// Query values are percent-decoded, so a NUL can sit inside one: the value is
// the whole text, never the part before the NUL (found by fuzz/fuzz_http_query).
TEST_F(ApiRoutes, EmbeddedNulInAQueryValueIsA400) {
  for (const char* path : {"/api/v1/ranks/j/3/gpu-steps?last=5%00junk", "/api/v1/ranks/j/3%00x/gpu-steps",
                           "/api/v1/events?since=1700000050%00x"}) {
    EXPECT_EQ(get(path).status, 400) << path;
  }
  http->stop();
  start(true);  // the trace is a debug route
  EXPECT_EQ(get("/api/v1/trace?seconds=2%00x").status, 400);
  EXPECT_EQ(get("/api/v1/trace?seconds=2").status, 200);
}

TEST_F(ApiRoutes, HealthzFollowsTheHeartbeat) {
  EXPECT_EQ(get("/healthz").status, 200);
  src.heartbeat_age = 6;
  const auto r = get("/healthz");
  EXPECT_EQ(r.status, 503);
  EXPECT_NE(r.body.find("event loop stalled"), std::string::npos);
}

}  // namespace
}  // namespace argus
