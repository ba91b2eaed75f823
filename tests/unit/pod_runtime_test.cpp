// The runtime resolves a rank's pod and GPU UUID when it tracks it: on a fake
// /proc (cgroup files as the kubelet lays them out, the NVIDIA driver's GPU
// files) and a fake backend, with a manual clock for the bounded retries.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>

#include "exporters/prometheus_exporter.h"
#include "tests/support/fake_proc.h"
#include "tests/support/manual_clock.h"
#include "tests/support/quiet_backend.h"
#include "userspace/agent/agent_runtime.h"

namespace argus {
namespace {

namespace fs = std::filesystem;
using testing_support::environ_of;
using testing_support::FakeProc;
using testing_support::ManualClock;

using testing_support::QuietBackend;

const std::string kUid = "8dbf5d69-3a1e-4c2b-9f0e-1a2b3c4d5e6f";
const std::string kId = "4e3cbd5b1e6f4d0c8a2b9f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c";
const std::string kGpu1 = "GPU-11111111-2222-3333-4444-555555555555";

TEST(PodRuntime, PodNamedOnALaterTryAndGpuUuidByIndex) {
  ManualClock clock;
  FakeProc proc;
  testing_support::TempDir logs("podlogs");
  // Two GPUs in the driver's dirs; the rank's CUDA_VISIBLE_DEVICES=1 is the second in bus order.
  for (const auto& [bus, uuid] : std::map<std::string, std::string>{
           {"0000:18:00.0", "GPU-00000000-2222-3333-4444-555555555555"}, {"0000:3b:00.0", kGpu1}}) {
    fs::create_directories(proc.root() / "driver/nvidia/gpus" / bus);
    std::ofstream(proc.root() / "driver/nvidia/gpus" / bus / "information") << "Model: x\nGPU UUID: " << uuid << "\n";
  }
  proc.add(
      401, "",
      environ_of({"RANK=0", "WORLD_SIZE=1", "LOCAL_RANK=0", "TORCHELASTIC_RUN_ID=pods", "CUDA_VISIBLE_DEVICES=1"}));
  std::ofstream(proc.root() / "401/cgroup")
      << "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
      << "8dbf5d69_3a1e_4c2b_9f0e_1a2b3c4d5e6f.slice/cri-containerd-" << kId << ".scope\n";
  proc.add(402, "", environ_of({"RANK=1", "WORLD_SIZE=1", "TORCHELASTIC_RUN_ID=pods"}));
  std::ofstream(proc.root() / "402/cgroup") << "0::/user.slice/user-1000.slice\n";  // not a pod: tried once
  fs::create_directories(logs.path / "pods");

  AgentConfig opts;
  opts.node = "n";
  opts.paths.proc_root = proc.root().string();
  opts.pods.logs_dir = (logs.path / "pods").string();
  opts.pods.container_logs_dir = (logs.path / "containers").string();
  auto b = std::make_unique<QuietBackend>();
  QuietBackend* backend = b.get();
  auto rt = AgentRuntime::with_backend(opts, clock, std::move(b));
  backend->seen(401, clock.ns);
  backend->seen(402, clock.ns);
  rt->run_once(0);
  auto rank = [&](int pid) {
    for (const auto& s : rt->snapshot().ranks)
      if (s.pid == pid) return s;
    return RankSnapshot{};
  };
  EXPECT_EQ(rank(401).gpu_uuid, kGpu1);
  EXPECT_EQ(rank(401).pod.pod_uid, kUid);  // the cgroup's uid, no names yet
  EXPECT_EQ(rank(401).pod.pod, "");
  EXPECT_FALSE(rank(402).pod.present());
  EXPECT_EQ(rank(402).gpu_uuid, "");  // LOCAL_RANK unknown and no CUDA_VISIBLE_DEVICES: unknown

  // The kubelet writes the pod's log dir a little later: the next try names it.
  fs::create_directories(logs.path / "pods" / ("team-a_trainer-0_" + kUid) / "pytorch");
  for (int i = 0; i < 40; ++i) {
    clock.advance(1);
    rt->run_once(0);
  }
  const RankSnapshot r = rank(401);
  EXPECT_EQ(r.pod, (PodIdentityView{"team-a", "trainer-0", "pytorch", kUid, kId, "logs"}));
  const auto lookups = rt->snapshot().agent.pod_lookups;
  EXPECT_EQ(lookups.at("pod_unknown"), 1u);  // the first try
  EXPECT_EQ(lookups.at("found"), 1u);        // the second, and no more after it
  EXPECT_EQ(lookups.at("not_pod"), 1u);      // pid 402: final at once
  const std::string text = render_metrics(rt->snapshot());
  EXPECT_NE(text.find(R"(gpu_uuid=")" + kGpu1 + R"(",namespace="team-a",pod="trainer-0",container="pytorch"})"),
            std::string::npos)
      << text;
}

TEST(PodRuntime, TriesAreBoundedAndOffMeansNoLookups) {
  ManualClock clock;
  FakeProc proc;
  proc.add(501, "", environ_of({"RANK=0", "WORLD_SIZE=1", "TORCHELASTIC_RUN_ID=pods"}));
  std::ofstream(proc.root() / "501/cgroup") << "0::/kubepods/pod" << kUid << "/" << kId << "\n";
  for (bool off : {false, true}) {
    testing_support::TempDir logs("podlogs");
    fs::create_directories(logs.path / "pods");  // present, but never names the pod
    AgentConfig opts;
    opts.node = "n";
    opts.paths.proc_root = proc.root().string();
    opts.pods.logs_dir = (logs.path / "pods").string();
    opts.pods.mode = off ? pods::PodInfoMode::kOff : pods::PodInfoMode::kLogs;
    auto b = std::make_unique<QuietBackend>();
    QuietBackend* backend = b.get();
    auto rt = AgentRuntime::with_backend(opts, clock, std::move(b));
    backend->seen(501, clock.ns);
    for (int i = 0; i < 120; ++i) {
      clock.advance(1);
      rt->run_once(0);
    }
    const auto snap = rt->snapshot();
    if (off) {
      EXPECT_TRUE(snap.agent.pod_lookups.empty());
      EXPECT_FALSE(snap.ranks.at(0).pod.present());
    } else {
      EXPECT_EQ(snap.agent.pod_lookups.at("pod_unknown"), 5u);  // kMaxPodTries, then it stops asking
      EXPECT_EQ(snap.ranks.at(0).pod.pod_uid, kUid);
    }
  }
}

}  // namespace
}  // namespace argus
