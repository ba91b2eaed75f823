// A rank's Kubernetes identity: its pod and container from its cgroup, their
// names from the kubelet's log dirs (--pod-info logs) or from a watch of the
// apiserver (--pod-info apiserver). Every lookup is counted by result.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "userspace/common/defaults.h"
#include "userspace/model/snapshot.h"
#include "userspace/pods/pod_logs.h"
#include "userspace/procfs/pod_cgroup.h"

namespace argus::pods {

// Names kept by someone else (the apiserver watch), looked up by uid. Thread-safe.
class PodNameSource {
 public:
  virtual ~PodNameSource() = default;
  struct Answer {
    std::string namespace_name, pod, container;  // container "" when its id is not listed
  };
  virtual std::optional<Answer> lookup(const std::string& pod_uid, const std::string& container_id) const = 0;
  virtual std::map<std::string, uint64_t> errors() const { return {}; }  // reason -> failed lists/watches
  virtual std::map<std::string, uint64_t> skips() const { return {}; }   // reason -> objects skipped
};

enum class PodInfoMode { kLogs, kApiserver, kOff };
std::optional<PodInfoMode> parse_pod_info_mode(const std::string& s);  // "logs", "apiserver", "off"

struct PodResolverOptions {
  PodInfoMode mode = PodInfoMode::kLogs;
  std::string proc_root = kDefaultProcRoot;
  LogDirOptions logs;
};

class PodResolver {
 public:
  explicit PodResolver(PodResolverOptions opts);
  void set_name_source(std::shared_ptr<const PodNameSource> source) { names_ = std::move(source); }

  struct Lookup {
    // "found" (names of pod and container), "container_unknown" (the pod's names only),
    // "pod_unknown" (its uid in no name source), "no_pod_logs" (the log dirs are absent),
    // "not_pod", "cgroup_namespaced", "cgroup_malformed", "cgroup_unreadable".
    std::string result;
    PodIdentityView pod;  // present() when the cgroup named a pod
    bool final = false;   // nothing a later try could learn (not a pod, or fully named)
  };
  // Reads /proc/PID/cgroup and, in logs mode, the log dirs (event loop only).
  Lookup resolve(int pid);
  // Pure: the answer for a process's parsed cgroups.
  Lookup resolve_cgroups(const procfs::ParsedCgroups& cg);

  PodInfoMode mode() const { return opts_.mode; }
  std::map<std::string, uint64_t> lookups() const;
  std::map<std::string, uint64_t> skips() const;          // the log dirs' and the name source's
  std::map<std::string, uint64_t> source_errors() const;  // the name source's (the apiserver watch)

 private:
  Lookup count(Lookup l);
  void name_from_logs(Lookup& l);
  void name_from_source(Lookup& l);

  PodResolverOptions opts_;
  LogDirNames logs_;
  std::shared_ptr<const PodNameSource> names_;
  bool said_absent_ = false;
  mutable std::mutex mu_;  // guards the counters (read by /metrics)
  std::map<std::string, uint64_t> lookups_;
  std::map<std::string, uint64_t> skips_;
};

}  // namespace argus::pods
