// The two narrow doors between the host collectors and the ranks' state.
// RankFacts: what a collector learned about a rank, handed on (the registry
// keeps it). RankDirectory: which ranks live here and on which GPU, for the
// collectors that map what they see to ranks (the RDMA ports next to a rank's
// GPU, the driver's Xid lines). Neither hands out the whole snapshot.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "userspace/model/snapshot.h"

namespace argus {

class RankFacts {
 public:
  virtual ~RankFacts() = default;
  // Who took the rank's CPU, totals since it was first followed.
  virtual void set_cpu_stealers(int pid, std::vector<CpuStealer> totals) = 0;
  // Its cgroup's CPU controller read now (totals), or nullopt when it has none to read.
  virtual void set_cgroup_cpu(int pid, std::optional<CgroupCpuView> view) = 0;
  // Its Python interpreter and GC counters read now (polled, or the probes'
  // snapshot; "" keeps what is known): counters only grow, the largest is kept.
  virtual void set_python_gc(int pid, const std::string& version, const std::string& anchor,
                             const std::array<uint64_t, 3>& collections) = 0;
  // Its main thread's input polls over the last window (InputWaitView).
  virtual void set_input_polls(int /*pid*/, const InputWaitView& /*polls*/) {}
  // New TCP retransmits of its sockets, by remote address.
  virtual void add_tcp_retransmits(int pid, const std::map<std::string, uint64_t>& by_remote) = 0;
  // Its Kubernetes identity and GPU UUID as resolved now (each kept when the new one is unknown).
  virtual void set_pod_identity(int pid, const PodIdentityView& pod) = 0;
  virtual void set_gpu_uuid(int pid, const std::string& uuid) = 0;
};

// A live, identified rank where it runs.
struct RankPlacement {
  std::string job_id;
  int rank = -1;
  int pid = 0;
  GpuRef gpu;  // its GPU, as its environment names it (rank_gpu)
};

class RankDirectory {
 public:
  virtual ~RankDirectory() = default;
  // The live ranks whose job and rank are known, by (job_id, rank). Any thread.
  virtual std::vector<RankPlacement> live_ranks() const = 0;
};

}  // namespace argus
