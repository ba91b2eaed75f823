// The apiserver pod watch against a local HTTPS server that answers as the
// apiserver does: a PodList, then a watch stream of ADDED/MODIFIED/DELETED events
// and an ERROR 410 Gone, then a relist. (Not tried against a real apiserver.)
#include "userspace/pods/apiserver_pods.h"

#include <httplib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/support/tls_cert.h"

namespace argus::pods {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::string kIdA = std::string(60, 'a') + "0001";
const std::string kIdSidecar = std::string(60, 'a') + "0002";
const std::string kIdB = std::string(60, 'b') + "0001";
const std::string kUidA = "aaaaaaaa-0000-4000-8000-000000000001";
const std::string kUidB = "bbbbbbbb-0000-4000-8000-000000000002";
const std::string kUidC = "cccccccc-0000-4000-8000-000000000003";
const std::string kUidD = "dddddddd-0000-4000-8000-000000000004";

json pod(const std::string& uid, const std::string& ns, const std::string& name, const std::string& rv,
         const std::vector<std::pair<std::string, std::string>>& containers) {
  json statuses = json::array();
  for (const auto& [cname, cid] : containers)
    statuses.push_back({{"name", cname}, {"containerID", cid}, {"ready", true}, {"restartCount", 0}});
  return {{"kind", "Pod"},
          {"apiVersion", "v1"},
          {"metadata", {{"uid", uid}, {"namespace", ns}, {"name", name}, {"resourceVersion", rv}}},
          {"spec", {{"nodeName", "node-1"}}},
          {"status", {{"phase", "Running"}, {"containerStatuses", statuses}}}};
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

// A fake apiserver: the first list and watch, a 410, the second list, then a quiet watch.
class FakeApiserver {
 public:
  explicit FakeApiserver(const testing_support::TlsFiles& tls) : svr_(tls.cert.c_str(), tls.key.c_str()) {
    svr_.Get("/api/v1/pods", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  ~FakeApiserver() {
    quiet_done_ = true;
    svr_.stop();
    thread_.join();
  }
  std::string url() const { return "https://127.0.0.1:" + std::to_string(port_); }

  struct Seen {
    std::string field_selector, watch, resource_version, authorization;
  };
  std::vector<Seen> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }
  std::atomic<int> list_status{200};  // what a list answers (500 to make it fail)

 private:
  void handle(const httplib::Request& req, httplib::Response& res) {
    const bool watch = req.get_param_value("watch") == "1";
    {
      std::lock_guard lock(mu_);
      seen_.push_back({req.get_param_value("fieldSelector"), req.get_param_value("watch"),
                       req.get_param_value("resourceVersion"), req.get_header_value("Authorization")});
    }
    if (!watch) {
      if (list_status != 200) {
        res.status = list_status;
        res.set_content(R"({"kind":"Status","code":500})", "application/json");
        return;
      }
      const int n = ++lists_;
      json items = json::array();
      if (n == 1) {
        items.push_back(pod(kUidA, "team-a", "trainer-0", "90", {{"trainer", "containerd://" + kIdA}}));
        items.push_back(pod(kUidC, "team-c", "old-pod", "95", {}));
        items.push_back(json{{"metadata", {{"name", "no-uid"}}}});  // skipped, counted
      } else {
        items.push_back(pod(kUidA, "team-a", "trainer-0", "190", {{"trainer", "containerd://" + kIdA}}));
        items.push_back(pod(kUidD, "team-d", "late", "195", {{"main", "cri-o://" + kIdB}}));
      }
      const json list = {{"kind", "PodList"},
                         {"apiVersion", "v1"},
                         {"metadata", {{"resourceVersion", n == 1 ? "100" : "200"}}},
                         {"items", items}};
      res.set_content(list.dump(), "application/json");
      return;
    }
    const int w = ++watches_;
    if (w == 1) {
      std::string body;
      auto line = [&](const std::string& type, const json& obj) {
        body += json{{"type", type}, {"object", obj}}.dump() + "\n";
      };
      line("ADDED", pod(kUidB, "team-b", "worker-7", "101", {{"worker", "cri-o://" + kIdB}}));
      line("MODIFIED", pod(kUidA, "team-a", "trainer-0", "102",
                           {{"trainer", "containerd://" + kIdA}, {"sidecar", "containerd://" + kIdSidecar}}));
      line("DELETED", pod(kUidC, "team-c", "old-pod", "103", {}));
      body += "{not json\n";  // counted, skipped
      line("ERROR", json{{"kind", "Status"},
                         {"apiVersion", "v1"},
                         {"status", "Failure"},
                         {"reason", "Expired"},
                         {"message", "too old resource version: 100 (150)"},
                         {"code", 410}});
      res.set_chunked_content_provider("application/json", [body](size_t, httplib::DataSink& sink) {
        sink.write(body.data(), body.size());
        sink.done();
        return true;
      });
      return;
    }
    // Later watches: quiet until the test ends (a bookmark now and then).
    res.set_chunked_content_provider("application/json", [this](size_t, httplib::DataSink& sink) {
      const std::string bookmark =
          json{{"type", "BOOKMARK"}, {"object", {{"kind", "Pod"}, {"metadata", {{"resourceVersion", "201"}}}}}}.dump() +
          "\n";
      for (int i = 0; i < 1000 && !quiet_done_; ++i) {
        if (i % 10 == 0 && !sink.write(bookmark.data(), bookmark.size())) return false;
        std::this_thread::sleep_for(20ms);
      }
      sink.done();
      return true;
    });
  }

  httplib::SSLServer svr_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<Seen> seen_;
  std::atomic<int> lists_{0}, watches_{0};
  std::atomic<bool> quiet_done_{false};
};

struct Fixture {
  testing_support::TempDir dir{"kubeapi"};
  testing_support::TlsFiles tls;
  std::string token_file;
  Fixture() {
    EXPECT_TRUE(testing_support::make_self_signed(dir.str(), tls)) << "openssl failed";
    token_file = dir.str() + "/token";
    std::ofstream(token_file) << "tok123\n";
  }
  KubeApiOptions opts(const std::string& url) const {
    KubeApiOptions o;
    o.api_url = url;
    o.token_file = token_file;
    o.ca_file = tls.cert;
    o.node = "node-1";
    o.connect_timeout = 2000ms;
    o.watch_timeout_seconds = 5;
    o.backoff_initial = 50ms;
    o.backoff_max = 200ms;
    return o;
  }
};

TEST(PodApiserver, ListWatchEventsAndRelistAfterGone) {
  Fixture f;
  FakeApiserver api(f.tls);
  ApiserverPods pods(f.opts(api.url()));
  pods.start();
  // The second list follows the 410 and replaces the map.
  ASSERT_TRUE(eventually([&] { return pods.lists() >= 2 && pods.lookup(kUidD, kIdB).has_value(); }))
      << "lists " << pods.lists();
  auto a = pods.lookup(kUidA, kIdA);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->namespace_name, "team-a");
  EXPECT_EQ(a->pod, "trainer-0");
  EXPECT_EQ(a->container, "trainer");
  auto d = pods.lookup(kUidD, kIdB);
  EXPECT_EQ(d->container, "main");
  EXPECT_FALSE(pods.lookup(kUidC, ""));                                // deleted by the watch, and not in the relist
  EXPECT_FALSE(pods.lookup(kUidB, kIdB));                              // added by the first watch, gone by the relist
  EXPECT_EQ(pods.lookup(kUidA, std::string(64, 'e'))->container, "");  // an id it does not list
  EXPECT_GE(pods.events(), 3u);
  const auto errors = pods.errors();
  EXPECT_EQ(errors.at("gone"), 1u);
  const auto skips = pods.skips();
  EXPECT_EQ(skips.at("pod_object_malformed"), 1u);
  EXPECT_EQ(skips.at("watch_event_malformed"), 1u);
  // A second watch is open from the relist's version; the bookmark moves it on.
  ASSERT_TRUE(eventually([&] { return api.seen().size() >= 4; }));
  const auto seen = api.seen();
  for (const auto& s : seen) {
    EXPECT_EQ(s.field_selector, "spec.nodeName=node-1");
    EXPECT_EQ(s.authorization, "Bearer tok123");
  }
  EXPECT_EQ(seen[0].watch, "");
  EXPECT_EQ(seen[1].watch, "1");
  EXPECT_EQ(seen[1].resource_version, "100");
  EXPECT_EQ(seen[2].watch, "");
  EXPECT_EQ(seen[3].resource_version, "200");
  pods.stop();  // ends the open watch at once
}

TEST(PodApiserver, PodObjectsAsTheWatchCarriesThem) {
  // pod_from_json on the shapes the watch carries: ids by runtime, bad names and ids.
  auto p = pod_from_json(pod(kUidA, "ns", "p", "1",
                             {{"c1", "containerd://" + kIdA},
                              {"c2", "docker://" + kIdB},
                              {"c3", "cri-o://short"},
                              {"c4", ""},
                              {"C_bad", "containerd://" + kIdSidecar}}));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->first, kUidA);
  EXPECT_EQ(p->second.containers, (std::map<std::string, std::string>{{kIdA, "c1"}, {kIdB, "c2"}}));
  EXPECT_FALSE(pod_from_json(pod("not-a-uid", "ns", "p", "1", {})));
  EXPECT_FALSE(pod_from_json(pod(kUidA, "Bad_NS", "p", "1", {})));
  EXPECT_FALSE(pod_from_json(json::array()));
  EXPECT_FALSE(pod_from_json(json{{"metadata", 3}}));
}

TEST(PodApiserver, FailuresAreCountedAndRetriedWithBackoff) {
  Fixture f;
  FakeApiserver api(f.tls);
  api.list_status = 500;
  ApiserverPods pods(f.opts(api.url()));
  pods.start();
  ASSERT_TRUE(eventually([&] {
    auto e = pods.errors();
    return e.count("list_status_500") && e.at("list_status_500") >= 2;  // retried
  }));
  api.list_status = 200;  // recovers: the next try lists
  ASSERT_TRUE(eventually([&] { return pods.lookup(kUidA, kIdA).has_value(); }));
  pods.stop();
}

TEST(PodApiserver, UntrustedCertificateAndMissingTokenFail) {
  Fixture f;
  FakeApiserver api(f.tls);
  {
    KubeApiOptions o = f.opts(api.url());
    testing_support::TlsFiles other;
    ASSERT_TRUE(testing_support::make_self_signed(f.dir.str(), other, "other"));
    o.ca_file = other.cert;  // not the server's
    ApiserverPods pods(o);
    pods.start();
    EXPECT_TRUE(eventually([&] { return pods.errors().count("list_failed") > 0; }));
    EXPECT_EQ(pods.lists(), 0u);
  }
  {
    KubeApiOptions o = f.opts(api.url());
    o.token_file = f.dir.str() + "/no-such-token";
    ApiserverPods pods(o);
    pods.start();
    EXPECT_TRUE(eventually([&] { return pods.errors().count("token_unreadable") > 0; }));
    EXPECT_EQ(api.seen().size(), 0u);  // nothing sent without a token
  }
}

TEST(PodApiserver, InClusterOptions) {
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "6443", 1);
  auto o = in_cluster_options("", "", "", "n1");
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->api_url, "https://10.96.0.1:6443");
  EXPECT_EQ(o->token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token");
  EXPECT_EQ(o->ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  EXPECT_EQ(in_cluster_options("", "", "", "n1")->api_url, "https://[fd00::1]:6443");
  o = in_cluster_options("https://api.example:443", "/t", "/c", "n1");
  EXPECT_EQ(o->api_url, "https://api.example:443");
  EXPECT_EQ(o->token_file, "/t");
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
  EXPECT_FALSE(in_cluster_options("", "", "", "n1").ok());
  EXPECT_FALSE(in_cluster_options("ftp://x", "", "", "n1").ok());
}

}  // namespace
}  // namespace argus::pods
