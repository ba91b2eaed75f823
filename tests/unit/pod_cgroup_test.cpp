// Pod and container from /proc/PID/cgroup, on texts laid out as the kubelet and
// each runtime write them (cgroup v1 and v2, systemd and cgroupfs drivers), and
// on hostile ones: unknown, never a crash.
#include "userspace/procfs/pod_cgroup.h"

#include <gtest/gtest.h>

namespace argus::procfs {
namespace {

const std::string kId = "4e3cbd5b1e6f4d0c8a2b9f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c";
const std::string kUid = "8dbf5d69-3a1e-4c2b-9f0e-1a2b3c4d5e6f";
const std::string kUidSlice = "8dbf5d69_3a1e_4c2b_9f0e_1a2b3c4d5e6f";

PodCgroupMatch match(const std::string& text) { return pod_from_cgroups(parse_cgroup(text)); }

TEST(PodCgroup, SystemdDriverContainerdV2) {
  const auto m = match("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSlice +
                       ".slice/cri-containerd-" + kId + ".scope\n");
  ASSERT_EQ(m.result, PodCgroupResult::kFound);
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, "containerd"}));
}

TEST(PodCgroup, SystemdDriverCrioAndDockerAndQosLevels) {
  auto m = match("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + kUidSlice + ".slice/crio-" +
                 kId + ".scope\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, "crio"}));
  // Guaranteed: no QoS slice.
  m = match("0::/kubepods.slice/kubepods-pod" + kUidSlice + ".slice/docker-" + kId + ".scope\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, "docker"}));
}

TEST(PodCgroup, CgroupfsDriverV1ManyControllersPrefersOneWithTheContainer) {
  // cgroup v1 as containerd (cgroupfs driver) writes it; the pids line stops at the pod.
  const std::string text = "12:pids:/kubepods/burstable/pod" + kUid +
                           "\n"
                           "11:memory:/kubepods/burstable/pod" +
                           kUid + "/" + kId +
                           "\n"
                           "4:cpu,cpuacct:/kubepods/burstable/pod" +
                           kUid + "/" + kId +
                           "\n"
                           "1:name=systemd:/kubepods/burstable/pod" +
                           kUid + "/" + kId + "\n";
  const auto m = match(text);
  ASSERT_EQ(m.result, PodCgroupResult::kFound);
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, ""}));
  // CRI-O under the cgroupfs driver names the container "crio-<id>" (no scope).
  EXPECT_EQ(match("0::/kubepods/besteffort/pod" + kUid + "/crio-" + kId + "\n").ref, (PodCgroupRef{kUid, kId, "crio"}));
  // Guaranteed QoS under cgroupfs: kubepods/pod<uid>/<id>.
  EXPECT_EQ(match("3:cpu:/kubepods/pod" + kUid + "/" + kId + "\n").ref, (PodCgroupRef{kUid, kId, ""}));
}

TEST(PodCgroup, V1SystemdDriverHybridWithEmptyV2Line) {
  const std::string path = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSlice +
                           ".slice/cri-containerd-" + kId + ".scope";
  const auto m = match("10:memory:" + path + "\n3:cpu,cpuacct:" + path + "\n1:name=systemd:" + path + "\n0::/\n");
  ASSERT_EQ(m.result, PodCgroupResult::kFound);
  EXPECT_EQ(m.ref.container_id, kId);
}

TEST(PodCgroup, NestedPrefixesKindK3sAndNodeInAContainer) {
  // kind: the node is a container; the kubelet's --cgroup-root adds a prefix to each slice.
  auto m = match("0::/system.slice/docker-" + kId +
                 ".scope/kubelet.slice/kubelet-kubepods.slice/"
                 "kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod" +
                 kUidSlice + ".slice/cri-containerd-" + kId + ".scope\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, "containerd"}));
  // k3s in docker, cgroupfs driver.
  m = match("0::/docker/" + kId + "/kubepods/besteffort/pod" + kUid + "/" + kId + "\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, ""}));
}

TEST(PodCgroup, StaticPodHashUidAndUppercaseAreNormalized) {
  const std::string hash = "0123456789ABCDEF0123456789abcdef";
  const auto m = match("0::/kubepods/burstable/pod" + hash + "/" + kId + "\n");
  ASSERT_EQ(m.result, PodCgroupResult::kFound);
  EXPECT_EQ(m.ref.pod_uid, "0123456789abcdef0123456789abcdef");
}

TEST(PodCgroup, ConmonAndPodLevelCgroupNameNoContainer) {
  auto m = match("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + kUidSlice +
                 ".slice/crio-conmon-" + kId + ".scope\n");
  ASSERT_EQ(m.result, PodCgroupResult::kFound);
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, "", "crio"}));
  m = match("0::/kubepods.slice/kubepods-pod" + kUidSlice + ".slice\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, "", ""}));
}

TEST(PodCgroup, ContainerScopeWithChildrenStillNamesTheContainer) {
  const auto m = match("0::/kubepods.slice/kubepods-pod" + kUidSlice + ".slice/crio-" + kId + ".scope/container\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, "crio"}));
}

// The agent in a cgroup namespace of its own (cgroup v2) reads other pods'
// paths relative to its own cgroup, with the kubepods root above cut off.
TEST(PodCgroup, PathsSeenFromTheAgentsOwnCgroupNamespace) {
  auto m = match("0::/../../../burstable/pod" + kUid + "/" + kId + "\n");  // cgroupfs driver
  ASSERT_EQ(m.result, PodCgroupResult::kFound);
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, ""}));
  m = match("0::/../../kubepods-burstable-pod" + kUidSlice + ".slice/cri-containerd-" + kId + ".scope\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, kId, "containerd"}));
  // Still strict about what follows: a uid that does not parse is malformed, a
  // name that is no pod's is nobody's.
  EXPECT_EQ(match("0::/../../pod1234/" + kId + "\n").result, PodCgroupResult::kMalformed);
  EXPECT_EQ(match("0::/../../system.slice/cron.service\n").result, PodCgroupResult::kNotPod);
}

TEST(PodCgroup, NamespaceRootAndNonPodPaths) {
  EXPECT_EQ(match("0::/\n").result, PodCgroupResult::kNamespaced);
  EXPECT_EQ(match("12:pids:/\n1:name=systemd:/\n0::/\n").result, PodCgroupResult::kNamespaced);
  EXPECT_EQ(match("0::/user.slice/user-1000.slice/session-2.scope\n").result, PodCgroupResult::kNotPod);
  EXPECT_EQ(match("0::/system.slice/docker-" + kId + ".scope\n").result, PodCgroupResult::kNotPod);
  // "pod<uid>" with no kubepods above it is somebody else's name.
  EXPECT_EQ(match("0::/mine/pod" + kUid + "/" + kId + "\n").result, PodCgroupResult::kNotPod);
  EXPECT_EQ(match("").result, PodCgroupResult::kNotPod);
}

TEST(PodCgroup, HostileInputIsUnknownNeverACrash) {
  // Truncated or over-long hex, wrong uid shapes: the pod is malformed, or the container unknown.
  EXPECT_EQ(match("0::/kubepods/burstable/pod8dbf5d69-3a1e/" + kId + "\n").result, PodCgroupResult::kMalformed);
  EXPECT_EQ(match("0::/kubepods.slice/kubepods-pod" + kUidSlice + "x.slice\n").result, PodCgroupResult::kMalformed);
  EXPECT_EQ(match("0::/kubepods.slice/kubepods-pod.slice\n").result, PodCgroupResult::kMalformed);
  EXPECT_EQ(match("0::/kubepods/podzzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz/x\n").result, PodCgroupResult::kMalformed);
  auto m = match("0::/kubepods/pod" + kUid + "/" + kId.substr(0, 63) + "\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, "", ""}));
  m = match("0::/kubepods/pod" + kUid + "/" + kId + "0\n");
  EXPECT_EQ(m.ref, (PodCgroupRef{kUid, "", ""}));
  m = match("0::/kubepods.slice/kubepods-pod" + kUidSlice + ".slice/cri-containerd-" + kId.substr(1) + ".scope\n");
  EXPECT_EQ(m.ref.container_id, "");
  // ".." after a name is refused by the line parser: not a path to follow.
  EXPECT_EQ(match("0::/kubepods/pod" + kUid + "/../../" + kId + "\n").result, PodCgroupResult::kNotPod);
  // A huge line: refused as a whole, no scan of it.
  const std::string huge = "0::/kubepods/" + std::string(1 << 20, 'a') + "/pod" + kUid + "/" + kId + "\n";
  EXPECT_EQ(match(huge).result, PodCgroupResult::kMalformed);
  // Binary junk and separators only.
  EXPECT_EQ(match(std::string("0::/\x01\xff/kubepods/pod\0/x", 22) + "\n").result, PodCgroupResult::kMalformed);
  EXPECT_EQ(match("0::////\n").result, PodCgroupResult::kNotPod);
  // A malformed line next to a good one: the good one wins.
  m = match("0::/kubepods/podxyz/" + kId + "\n4:cpu:/kubepods/pod" + kUid + "/" + kId + "\n");
  EXPECT_EQ(m.result, PodCgroupResult::kFound);
}

TEST(PodCgroup, UidAndContainerIdShapes) {
  EXPECT_EQ(normalize_pod_uid(kUid), kUid);
  EXPECT_FALSE(normalize_pod_uid(kUidSlice));  // '_' is converted by the slice parser, not here
  EXPECT_FALSE(normalize_pod_uid(""));
  EXPECT_FALSE(normalize_pod_uid(kUid.substr(0, 35)));
  EXPECT_TRUE(is_container_id(kId));
  EXPECT_FALSE(is_container_id(kId.substr(0, 63)));
  EXPECT_FALSE(is_container_id(std::string(64, 'g')));
  EXPECT_STREQ(pod_cgroup_result_label(PodCgroupResult::kNamespaced), "cgroup_namespaced");
}

}  // namespace
}  // namespace argus::procfs
