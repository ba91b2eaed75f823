// Pod names from the Kubernetes apiserver (--pod-info apiserver, opt-in: needs
// RBAC get/list/watch on pods): list this node's pods
// (fieldSelector=spec.nodeName=<node>), then watch from the list's
// resourceVersion, keeping uid -> (namespace, name, container id -> name). On
// its own thread; lookups from the event loop only take a lock. Errors reconnect
// with a doubling backoff; 410 Gone (the version fell out of the apiserver's
// window) relists. Every failure and skipped object is counted.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "userspace/common/result.h"
#include "userspace/pods/pod_resolver.h"

namespace argus::pods {

struct KubeApiOptions {
  std::string api_url;     // "https://10.96.0.1:443"
  std::string token_file;  // re-read at every connect (projected tokens rotate)
  std::string ca_file;
  std::string node;
  std::chrono::milliseconds connect_timeout{10000};
  int watch_timeout_seconds = 300;  // the apiserver closes a watch after this; we rewatch
  std::chrono::milliseconds backoff_initial{1000};
  std::chrono::milliseconds backoff_max{30000};
  size_t max_pods = 4096;               // past it a new pod is refused (counted)
  size_t max_event_bytes = 4 << 20;     // one watch event line at most
  size_t max_list_bytes = 64ull << 20;  // one PodList at most (a node's few hundred pods: a few MiB)
};

// In-cluster defaults (KUBERNETES_SERVICE_HOST/_PORT and the service account's
// files), each overridden by a non-empty argument. Error when no API address.
Result<KubeApiOptions> in_cluster_options(const std::string& api_url, const std::string& token_file,
                                          const std::string& ca_file, const std::string& node);

// One pod as the watch keeps it.
struct KubePod {
  std::string namespace_name, name;
  std::map<std::string, std::string> containers;  // container id (64 hex) -> container name
};
// A Pod object's uid and names; nullopt when it lacks them or they do not parse.
// Container statuses whose containerID is not "<runtime>://<64 hex>" are left out.
std::optional<std::pair<std::string, KubePod>> pod_from_json(const nlohmann::json& pod);

class ApiserverPods : public PodNameSource {
 public:
  explicit ApiserverPods(KubeApiOptions opts);
  ~ApiserverPods() override;
  ApiserverPods(const ApiserverPods&) = delete;
  ApiserverPods& operator=(const ApiserverPods&) = delete;

  void start();
  void stop();

  std::optional<Answer> lookup(const std::string& pod_uid, const std::string& container_id) const override;
  std::map<std::string, uint64_t> errors() const override;
  std::map<std::string, uint64_t> skips() const override;

  uint64_t lists() const { return lists_.load(); }    // PodLists taken (the first, and each relist)
  uint64_t events() const { return events_.load(); }  // watch events applied
  size_t pod_count() const;

 private:
  void run();
  // One list (true: the map replaced, rv_ set) or one watch until it ends;
  // false and a counted reason on failure. A watch's 410 sets relist_.
  bool list_pods();
  bool watch_pods();
  void apply_event(const std::string& line);
  std::unique_ptr<class KubeClient> connect(std::chrono::milliseconds read_timeout);
  void count_error(const std::string& reason);
  bool sleep_for(std::chrono::milliseconds d);  // false when stopped meanwhile
  std::string pods_path(bool watch) const;

  KubeApiOptions opts_;
  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> finished_{true};  // the thread has left run()
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::mutex client_mu_;
  class KubeClient* client_ = nullptr;  // the request in flight (stop() shuts its socket)

  mutable std::mutex mu_;
  std::map<std::string, KubePod> pods_;  // uid -> pod
  std::map<std::string, uint64_t> errors_, skips_;
  std::string rv_;      // resourceVersion to watch from (watch thread only)
  bool relist_ = true;  // watch thread only
  std::atomic<uint64_t> lists_{0}, events_{0};
};

}  // namespace argus::pods
