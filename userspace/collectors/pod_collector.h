// Each rank's Kubernetes identity (its pod and container, named from the
// kubelet's log dirs or the apiserver watch) and its GPU's UUID where the
// environment names it by index (through the driver's files). A pod not yet
// fully named is looked up again a few times: the kubelet may not have written
// its log dir yet.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/model/host_collector.h"
#include "userspace/model/rank_facts.h"
#include "userspace/model/rank_identity.h"
#include "userspace/pods/pod_resolver.h"

namespace argus {

class PodCollector final : public HostCollector {
 public:
  PodCollector(RankFacts& facts, pods::PodResolverOptions opts) : facts_(facts), pods_(opts), proc_root_(opts.proc_root) {}
  const char* name() const override { return "pods"; }
  // The apiserver watch's names (--pod-info apiserver); set before the first rank.
  void set_name_source(std::shared_ptr<const pods::PodNameSource> source) { pods_.set_name_source(std::move(source)); }

  // A rank met for the first time: its GPU's UUID and its pod, at `now` (seconds).
  void watch(int pid, const GpuRef& gpu, double now);
  // The ranks whose pod was not (fully) named, whose next try is due; those no
  // longer live are let go.
  void refresh(double now, const std::vector<int>& live_pids) override;
  void rank_ended(int pid) override { tries_.erase(pid); }

  const pods::PodResolver& resolver() const { return pods_; }  // its counts, for /metrics

 private:
  struct Try {
    int tries = 0;
    double next_try = 0;
  };
  void resolve(int pid, double now);
  std::string uuid_of_index(int index);

  // Tries per rank, 2, 4, 8 and 16 s apart.
  static constexpr int kMaxTries = 5;
  RankFacts& facts_;
  pods::PodResolver pods_;
  std::string proc_root_;
  std::map<int, Try> tries_;
  std::optional<std::vector<std::string>> gpu_uuids_;  // the driver's, by index: read once, at the first rank that needs them
};

}  // namespace argus
