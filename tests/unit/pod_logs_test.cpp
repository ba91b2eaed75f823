// Pod and container names from the kubelet's log dirs, on temp trees laid out
// as the kubelet writes them, and the resolver that joins them to a cgroup.
#include "userspace/pods/pod_logs.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"
#include "userspace/pods/pod_resolver.h"

namespace argus::pods {
namespace {

namespace fs = std::filesystem;
using testing_support::TempDir;

const std::string kId = "4e3cbd5b1e6f4d0c8a2b9f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c";
const std::string kId2 = "ffffbd5b1e6f4d0c8a2b9f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e0000";
const std::string kUid = "8dbf5d69-3a1e-4c2b-9f0e-1a2b3c4d5e6f";
const std::string kUid2 = "11111111-2222-3333-4444-555555555555";

// A node's log dirs: pod dirs with container dirs and their restart logs, and
// the container links into them.
struct LogTree {
  TempDir t{"podlogs"};
  fs::path pods() const { return t.path / "pods"; }
  fs::path containers() const { return t.path / "containers"; }
  void pod(const std::string& ns, const std::string& name, const std::string& uid,
           const std::vector<std::string>& ctrs) {
    for (const auto& c : ctrs) {
      fs::create_directories(pods() / (ns + "_" + name + "_" + uid) / c);
      std::ofstream(pods() / (ns + "_" + name + "_" + uid) / c / "0.log") << "log\n";
    }
    if (ctrs.empty()) fs::create_directories(pods() / (ns + "_" + name + "_" + uid));
  }
  void link(const std::string& ns, const std::string& name, const std::string& uid, const std::string& ctr,
            const std::string& id) {
    fs::create_directories(containers());
    fs::create_symlink(pods() / (ns + "_" + name + "_" + uid) / ctr / "0.log",
                       containers() / (name + "_" + ns + "_" + ctr + "-" + id + ".log"));
  }
  LogDirOptions opts() const {
    LogDirOptions o;
    o.pod_logs_dir = pods().string();
    o.container_logs_dir = containers().string();
    return o;
  }
};

TEST(PodLogs, ParsesDirAndLinkNames) {
  auto p = parse_pod_dir_name("team-a_trainer-0.x_" + kUid);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->first.namespace_name, "team-a");
  EXPECT_EQ(p->first.pod, "trainer-0.x");
  EXPECT_EQ(p->second, kUid);
  auto c = parse_container_log_name("trainer-0_team-a_pytorch-" + kId + ".log");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->pod, "trainer-0");
  EXPECT_EQ(c->namespace_name, "team-a");
  EXPECT_EQ(c->container, "pytorch");
  EXPECT_EQ(c->container_id, kId);
  for (const std::string& bad :
       std::vector<std::string>{"", "_", "a_b", "a_b_c_d", "A_b_" + kUid, "a_b_" + kUid + "x", "a__" + kUid,
                                "-a_b_" + kUid, "a_b-_" + kUid, std::string(64, 'a') + "_b_" + kUid})
    EXPECT_FALSE(parse_pod_dir_name(bad)) << bad;
  for (const std::string& bad :
       std::vector<std::string>{"", ".log", "p_n_c-" + kId, "p_n_c-" + kId.substr(1) + ".log", "p_n-" + kId + ".log",
                                "p_n_c_d-" + kId + ".log", "p_n_c" + kId + "x.log", "P_n_c-" + kId + ".log"})
    EXPECT_FALSE(parse_container_log_name(bad)) << bad;
  EXPECT_TRUE(is_dns_subdomain("a.b-c.d"));
  EXPECT_FALSE(is_dns_subdomain("a..b"));
  EXPECT_FALSE(is_dns_label("a.b"));
}

TEST(PodLogs, NamesPodAndContainerByLinkCountsBadEntries) {
  LogTree tree;
  tree.pod("team-a", "trainer-0", kUid, {"pytorch", "sidecar"});
  tree.link("team-a", "trainer-0", kUid, "pytorch", kId);
  tree.link("team-a", "trainer-0", kUid, "sidecar", kId2);
  fs::create_directories(tree.pods() / "not-a-pod-dir");
  std::ofstream(tree.containers() / "junk.log") << "";
  LogDirNames names(tree.opts());
  ASSERT_TRUE(names.available());
  auto pod = names.pod(kUid);
  ASSERT_TRUE(pod);
  EXPECT_EQ(pod->namespace_name, "team-a");
  EXPECT_EQ(pod->pod, "trainer-0");
  auto c = names.container(*pod, kId2);
  EXPECT_EQ(c.name, "sidecar");
  EXPECT_TRUE(c.by_link);
  // Two containers and no link for this id: unknown, not a guess.
  EXPECT_EQ(names.container(*pod, std::string(64, 'a')).name, "");
  EXPECT_EQ(names.skips().at("pod_dir_malformed"), 1u);
  EXPECT_GE(names.skips().at("container_link_malformed"), 1u);
}

TEST(PodLogs, OnlyContainerDirNamesItWithoutLinks) {
  LogTree tree;
  tree.pod("ns1", "solo", kUid, {"main"});
  LogDirNames names(tree.opts());
  auto pod = names.pod(kUid);
  ASSERT_TRUE(pod);
  auto c = names.container(*pod, kId);
  EXPECT_EQ(c.name, "main");
  EXPECT_FALSE(c.by_link);
}

TEST(PodLogs, ALinkOfAnotherPodDoesNotNameTheContainer) {
  LogTree tree;
  tree.pod("ns1", "a", kUid, {"x", "y"});
  tree.pod("ns1", "b", kUid2, {"z"});
  tree.link("ns1", "b", kUid2, "z", kId);  // the id under another pod's name
  LogDirNames names(tree.opts());
  auto pod = names.pod(kUid);
  ASSERT_TRUE(pod);
  EXPECT_EQ(names.container(*pod, kId).name, "");
}

TEST(PodLogs, RereadsOnAMissOnlyAndBoundsTheCache) {
  LogTree tree;
  tree.pod("ns1", "a", kUid, {"x"});
  LogDirOptions o = tree.opts();
  o.max_pods = 1;
  LogDirNames names(o);
  ASSERT_TRUE(names.pod(kUid));
  EXPECT_EQ(names.rescans(), 1u);
  ASSERT_TRUE(names.pod(kUid));
  EXPECT_EQ(names.rescans(), 1u);  // a hit reads nothing
  EXPECT_FALSE(names.pod(kUid2));  // a miss rescans
  EXPECT_EQ(names.rescans(), 2u);
  tree.pod("ns1", "b", kUid2, {"y"});  // a pod that came later, past the cap of 1
  names.pod(kUid2);                    // a miss: the rescan meets two pods and keeps one
  EXPECT_EQ(names.rescans(), 3u);
  EXPECT_GE(names.skips().at("pods_over_cap"), 1u);
  // Whichever was kept is a hit; the other a miss that rescans again (bounded by the caller's tries).
  const uint64_t before = names.rescans();
  const int known = names.pod(kUid).has_value() + names.pod(kUid2).has_value();
  EXPECT_GE(known, 1);
  EXPECT_GT(names.rescans(), before);
  EXPECT_GE(names.skips().at("pods_over_cap"), 1u);
}

TEST(PodLogs, AbsentDirsAreNotAvailable) {
  LogDirOptions o;
  o.pod_logs_dir = "/nonexistent/pods";
  o.container_logs_dir = "/nonexistent/containers";
  LogDirNames names(o);
  EXPECT_FALSE(names.available());
  EXPECT_FALSE(names.pod(kUid));
}

procfs::ParsedCgroups cgroups(const std::string& text) { return procfs::parse_cgroup(text); }

TEST(PodResolver, JoinsCgroupAndLogDirsAndCountsEachResult) {
  LogTree tree;
  tree.pod("team-a", "trainer-0", kUid, {"pytorch", "sidecar"});
  tree.link("team-a", "trainer-0", kUid, "pytorch", kId);
  PodResolver r(PodResolverOptions{.mode = PodInfoMode::kLogs, .proc_root = "/proc", .logs = tree.opts()});
  auto l = r.resolve_cgroups(cgroups("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                                     std::string("8dbf5d69_3a1e_4c2b_9f0e_1a2b3c4d5e6f") + ".slice/cri-containerd-" +
                                     kId + ".scope\n"));
  EXPECT_EQ(l.result, "found");
  EXPECT_TRUE(l.final);
  EXPECT_EQ(l.pod, (PodIdentityView{"team-a", "trainer-0", "pytorch", kUid, kId, "logs"}));
  l = r.resolve_cgroups(cgroups("0::/kubepods/pod" + kUid + "/" + kId2 + "\n"));
  EXPECT_EQ(l.result, "container_unknown");
  EXPECT_EQ(l.pod.pod, "trainer-0");
  EXPECT_EQ(l.pod.container, "");
  l = r.resolve_cgroups(cgroups("0::/kubepods/pod" + kUid2 + "/" + kId + "\n"));
  EXPECT_EQ(l.result, "pod_unknown");
  EXPECT_EQ(l.pod.pod_uid, kUid2);
  EXPECT_EQ(l.pod.source, "cgroup");
  EXPECT_EQ(r.resolve_cgroups(cgroups("0::/\n")).result, "cgroup_namespaced");
  EXPECT_EQ(r.resolve_cgroups(cgroups("0::/user.slice\n")).result, "not_pod");
  EXPECT_EQ(r.resolve(-5).result, "cgroup_unreadable");
  const auto counts = r.lookups();
  for (const char* k :
       {"found", "container_unknown", "pod_unknown", "cgroup_namespaced", "not_pod", "cgroup_unreadable"})
    EXPECT_EQ(counts.at(k), 1u) << k;
}

TEST(PodResolver, BareMetalHasNoLogDirsAndSaysSo) {
  LogDirOptions o;
  o.pod_logs_dir = "/nonexistent/pods";
  o.container_logs_dir = "/nonexistent/c";
  PodResolver r(PodResolverOptions{.mode = PodInfoMode::kLogs, .proc_root = "/proc", .logs = o});
  auto l = r.resolve_cgroups(cgroups("0::/kubepods/pod" + kUid + "/" + kId + "\n"));
  EXPECT_EQ(l.result, "no_pod_logs");
  EXPECT_EQ(l.pod.pod_uid, kUid);  // the uid is still known
  EXPECT_EQ(l.pod.pod, "");
}

class FixedNames : public PodNameSource {
 public:
  std::optional<Answer> lookup(const std::string& uid, const std::string& cid) const override {
    if (uid != kUid) return std::nullopt;
    return Answer{"ns9", "p9", cid == kId ? "c9" : ""};
  }
};

TEST(PodResolver, ApiserverModeAsksItsNameSource) {
  PodResolver r(PodResolverOptions{.mode = PodInfoMode::kApiserver, .proc_root = "/proc", .logs = {}});
  auto l = r.resolve_cgroups(cgroups("0::/kubepods/pod" + kUid + "/" + kId + "\n"));
  EXPECT_EQ(l.result, "pod_unknown");  // no source yet
  r.set_name_source(std::make_shared<FixedNames>());
  l = r.resolve_cgroups(cgroups("0::/kubepods/pod" + kUid + "/" + kId + "\n"));
  EXPECT_EQ(l.pod, (PodIdentityView{"ns9", "p9", "c9", kUid, kId, "apiserver"}));
  EXPECT_EQ(l.result, "found");
}

}  // namespace
}  // namespace argus::pods
