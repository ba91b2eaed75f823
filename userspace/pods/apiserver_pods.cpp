#include "userspace/pods/apiserver_pods.h"

#if !defined(CPPHTTPLIB_OPENSSL_SUPPORT)
#error "compile with the cpp-httplib defines from pkg-config (OpenSSL support)"
#endif
#include <httplib.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "userspace/net/http_client.h"
#include "userspace/pods/pod_logs.h"
#include "userspace/procfs/pod_cgroup.h"
#include "userspace/common/thread_name.h"

namespace argus::pods {

using nlohmann::json;

// The connection of one request, so that stop() can shut it from another thread.
class KubeClient {
 public:
  std::unique_ptr<httplib::ClientImpl> http;
};

namespace {

constexpr const char* kServiceAccount = "/var/run/secrets/kubernetes.io/serviceaccount";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 ? std::string(v) : fallback;
}

std::optional<std::string> read_token(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty() || token.size() > 16384) return std::nullopt;
  return token;
}

// "containerd://<64 hex>", "cri-o://...", "docker://...": the id alone.
std::string container_id_of(const std::string& status_id) {
  const size_t sep = status_id.find("://");
  if (sep == std::string::npos) return "";
  const std::string id = status_id.substr(sep + 3);
  if (!procfs::is_container_id(id)) return "";
  std::string out = id;
  for (char& c : out)
    if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

std::string string_at(const json& j, const char* a, const char* b) {
  const json* x = member(j, a);
  const json* y = x ? member(*x, b) : nullptr;
  return y && y->is_string() ? y->get<std::string>() : "";
}

}  // namespace

Result<KubeApiOptions> in_cluster_options(const std::string& api_url, const std::string& token_file,
                                          const std::string& ca_file, const std::string& node) {
  KubeApiOptions o;
  o.node = node;
  o.api_url = api_url;
  if (o.api_url.empty()) {
    const std::string host = env_or("KUBERNETES_SERVICE_HOST", "");
    if (host.empty())
      return make_error("--pod-info apiserver needs --kube-api URL or KUBERNETES_SERVICE_HOST (run in a pod)");
    const std::string port = env_or("KUBERNETES_SERVICE_PORT", "443");
    o.api_url = "https://" + (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port;
  }
  auto parsed = cli::parse_http_url(o.api_url);
  if (!parsed) return make_error("--kube-api: " + parsed.error());
  o.token_file = token_file.empty() ? std::string(kServiceAccount) + "/token" : token_file;
  o.ca_file = ca_file.empty() ? std::string(kServiceAccount) + "/ca.crt" : ca_file;
  return o;
}

std::optional<std::pair<std::string, KubePod>> pod_from_json(const json& pod) {
  auto uid = procfs::normalize_pod_uid(string_at(pod, "metadata", "uid"));
  KubePod p;
  p.namespace_name = string_at(pod, "metadata", "namespace");
  p.name = string_at(pod, "metadata", "name");
  if (!uid || !is_dns_label(p.namespace_name) || !is_dns_subdomain(p.name)) return std::nullopt;
  const json* status = member(pod, "status");
  for (const char* list : {"containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"}) {
    const json* statuses = status ? member(*status, list) : nullptr;
    if (!statuses || !statuses->is_array()) continue;
    for (const auto& cs : *statuses) {
      const json* id = member(cs, "containerID");
      const json* name = member(cs, "name");
      if (!id || !name || !id->is_string() || !name->is_string()) continue;
      const std::string cid = container_id_of(id->get<std::string>());
      if (!cid.empty() && is_dns_label(name->get<std::string>()) && p.containers.size() < 64)
        p.containers[cid] = name->get<std::string>();
    }
  }
  return std::pair{*uid, std::move(p)};
}

ApiserverPods::ApiserverPods(KubeApiOptions opts) : opts_(std::move(opts)) {}

ApiserverPods::~ApiserverPods() { stop(); }

void ApiserverPods::start() {
  if (running_.exchange(true)) return;
  finished_ = false;
  thread_ = std::thread([this] {
    name_this_thread("argus-pods");
    run();
    finished_ = true;
  });
}

void ApiserverPods::stop() {
  if (!running_.exchange(false)) return;
  {
    std::lock_guard lock(wake_mu_);
    wake_.notify_all();
  }
  // Shut the request in flight until the thread is out: a request registered
  // just before its socket opened would miss one shutdown and block for its
  // whole read timeout.
  while (!finished_) {
    {
      std::lock_guard lock(client_mu_);
      if (client_ && client_->http) client_->http->stop();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (thread_.joinable()) thread_.join();
}

std::optional<PodNameSource::Answer> ApiserverPods::lookup(const std::string& pod_uid,
                                                           const std::string& container_id) const {
  std::lock_guard lock(mu_);
  auto it = pods_.find(pod_uid);
  if (it == pods_.end()) return std::nullopt;
  Answer a{it->second.namespace_name, it->second.name, ""};
  if (auto c = it->second.containers.find(container_id); c != it->second.containers.end()) a.container = c->second;
  return a;
}

std::map<std::string, uint64_t> ApiserverPods::errors() const {
  std::lock_guard lock(mu_);
  return errors_;
}

std::map<std::string, uint64_t> ApiserverPods::skips() const {
  std::lock_guard lock(mu_);
  return skips_;
}

size_t ApiserverPods::pod_count() const {
  std::lock_guard lock(mu_);
  return pods_.size();
}

void ApiserverPods::count_error(const std::string& reason) {
  std::lock_guard lock(mu_);
  const bool first = errors_.empty();
  ++errors_[reason];
  // The first failure is worth a line; later ones are on /metrics.
  if (first) spdlog::warn("apiserver pod watch: {} ({}); retrying with backoff", reason, opts_.api_url);
}

bool ApiserverPods::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock lock(wake_mu_);
  wake_.wait_for(lock, d, [this] { return !running_.load(); });
  return running_.load();
}

std::string ApiserverPods::pods_path(bool watch) const {
  std::string p = "/api/v1/pods?fieldSelector=" + cli::percent_encode("spec.nodeName=" + opts_.node);
  if (watch)
    p += "&watch=1&allowWatchBookmarks=true&timeoutSeconds=" + std::to_string(opts_.watch_timeout_seconds) +
         "&resourceVersion=" + cli::percent_encode(rv_);
  return p;
}

std::unique_ptr<KubeClient> ApiserverPods::connect(std::chrono::milliseconds read_timeout) {
  auto url = cli::parse_http_url(opts_.api_url);
  if (!url) return nullptr;
  auto c = std::make_unique<KubeClient>();
  if (url->https) {
    auto tls = std::make_unique<httplib::SSLClient>(url->host, url->port);
    tls->enable_server_certificate_verification(true);
    tls->set_ca_cert_path(opts_.ca_file.c_str());
    c->http = std::move(tls);
  } else {
    c->http = std::make_unique<httplib::ClientImpl>(url->host, url->port);
  }
  c->http->set_connection_timeout(opts_.connect_timeout);
  c->http->set_read_timeout(read_timeout);
  c->http->set_write_timeout(opts_.connect_timeout);
  c->http->set_keep_alive(false);
  c->http->set_url_encode(false);
  if (auto token = read_token(opts_.token_file)) {
    c->http->set_bearer_token_auth(token->c_str());
  } else {
    count_error("token_unreadable");
    return nullptr;
  }
  return c;
}

bool ApiserverPods::list_pods() {
  auto client = connect(opts_.connect_timeout * 3);
  if (!client) return false;
  {
    std::lock_guard lock(client_mu_);
    client_ = client.get();
  }
  std::string body;
  bool too_large = false;
  auto res = client->http->Get(pods_path(false), httplib::Headers{{"Accept", "application/json"}},
                               [&](const char* data, size_t len) {
                                 if (body.size() + len > opts_.max_list_bytes) {
                                   too_large = true;
                                   return false;
                                 }
                                 body.append(data, len);
                                 return running_.load();
                               });
  {
    std::lock_guard lock(client_mu_);
    client_ = nullptr;
  }
  if (!running_) return false;
  if (too_large) return count_error("list_too_large"), false;
  if (!res) return count_error("list_failed"), false;
  if (res->status != 200) return count_error("list_status_" + std::to_string(res->status)), false;
  const json doc = json::parse(body, nullptr, false);
  const json* items = member(doc, "items");
  if (doc.is_discarded() || !items || !items->is_array()) return count_error("list_malformed"), false;
  std::map<std::string, KubePod> fresh;
  uint64_t malformed = 0, over = 0;
  for (const auto& item : *items) {
    auto p = pod_from_json(item);
    if (!p) {
      ++malformed;
    } else if (fresh.size() >= opts_.max_pods) {
      ++over;
    } else {
      fresh[p->first] = std::move(p->second);
    }
  }
  {
    std::lock_guard lock(mu_);
    pods_ = std::move(fresh);
    if (malformed) skips_["pod_object_malformed"] += malformed;
    if (over) skips_["pods_over_cap"] += over;
  }
  rv_ = string_at(doc, "metadata", "resourceVersion");
  relist_ = false;
  ++lists_;
  return true;
}

void ApiserverPods::apply_event(const std::string& line) {
  const json ev = json::parse(line, nullptr, false);
  const json* type = member(ev, "type");
  const json* object = member(ev, "object");
  if (ev.is_discarded() || !type || !type->is_string() || !object) {
    std::lock_guard lock(mu_);
    ++skips_["watch_event_malformed"];
    return;
  }
  const std::string t = type->get<std::string>();
  if (t == "ERROR") {
    // A Status: 410 Gone means our resourceVersion is too old; anything else, rewatch after a backoff.
    const json* code = member(*object, "code");
    const bool gone = code && code->is_number_integer() && code->get<int>() == 410;
    relist_ = relist_ || gone;
    count_error(gone ? "gone" : "watch_error_event");
    return;
  }
  const std::string rv = string_at(*object, "metadata", "resourceVersion");
  if (!rv.empty()) rv_ = rv;
  if (t == "BOOKMARK") return;
  auto p = pod_from_json(*object);
  std::lock_guard lock(mu_);
  if (!p) {
    ++skips_["pod_object_malformed"];
    return;
  }
  ++events_;
  if (t == "DELETED") {
    pods_.erase(p->first);
  } else if (t == "ADDED" || t == "MODIFIED") {
    if (pods_.size() >= opts_.max_pods && !pods_.count(p->first))
      ++skips_["pods_over_cap"];
    else
      pods_[p->first] = std::move(p->second);
  } else {
    ++skips_["watch_event_malformed"];
  }
}

bool ApiserverPods::watch_pods() {
  // The server ends the watch after timeoutSeconds; silence well past that is a dead connection.
  auto client = connect(std::chrono::seconds(opts_.watch_timeout_seconds + 30));
  if (!client) return false;
  {
    std::lock_guard lock(client_mu_);
    client_ = client.get();
  }
  std::string buf;
  bool too_large = false;
  int status = 0;
  auto res = client->http->Get(
      pods_path(true), httplib::Headers{{"Accept", "application/json"}},
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, size_t len) {
        if (status != 200) return true;  // a Status body, not events
        buf.append(data, len);
        for (size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
          if (nl > 0) apply_event(buf.substr(0, nl));
          buf.erase(0, nl + 1);
        }
        if (buf.size() > opts_.max_event_bytes) {
          too_large = true;
          return false;
        }
        return running_.load() && !relist_;
      });
  {
    std::lock_guard lock(client_mu_);
    client_ = nullptr;
  }
  if (!running_) return false;
  if (relist_) return false;  // 410: counted as "gone"; relist at once
  if (too_large) return count_error("watch_event_too_large"), false;
  if (!res) {
    // A read timeout or a reset: rewatch from the same version.
    return count_error("watch_failed"), false;
  }
  if (res->status == 410) {
    relist_ = true;
    return count_error("gone"), false;
  }
  if (res->status != 200) return count_error("watch_status_" + std::to_string(res->status)), false;
  return true;  // the server closed it (timeoutSeconds): rewatch
}

void ApiserverPods::run() {
  auto backoff = opts_.backoff_initial;
  while (running_) {
    bool ok = false;
    if (relist_ || rv_.empty()) {
      ok = list_pods();
      if (ok) spdlog::info("apiserver pod watch: {} pods on node {}", pod_count(), opts_.node);
    } else {
      ok = watch_pods();
    }
    if (!running_) break;
    if (ok) {
      backoff = opts_.backoff_initial;
      continue;
    }
    // Every failure waits, 410 Gone too (then relists): an apiserver that keeps
    // answering 410 is not hammered with lists.
    if (!sleep_for(backoff)) break;
    backoff = std::min(backoff * 2, opts_.backoff_max);
  }
}

}  // namespace argus::pods
