// A rank's Kubernetes identity on /metrics (argus_rank_info only) and in GET
// /api/v1/ranks (its "pod" object), and the resolver's self-metrics.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sstream>

#include "exporters/json_api.h"
#include "exporters/prometheus_exporter.h"

namespace argus {
namespace {

const std::string kUid = "8dbf5d69-3a1e-4c2b-9f0e-1a2b3c4d5e6f";
const std::string kId = "4e3cbd5b1e6f4d0c8a2b9f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b1a0f9e8d7c";

Snapshot pod_snapshot() {
  Snapshot s;
  s.agent.node = "gpu-node-1";
  s.agent.pod_info = "logs";
  s.agent.pod_lookups = {{"found", 2}, {"pod_unknown", 1}};
  s.agent.pod_source_skips = {{"pod_dir_malformed", 4}};
  RankSnapshot r;
  r.pid = 100;
  r.job_id = "job1";
  r.rank = 0;
  r.local_rank = 0;
  r.world_size = 2;
  r.node = "gpu-node-1";
  r.nccl["allreduce"] = {5, 1024, 1000};
  r.pod = {"team-a", "trainer-0", "pytorch", kUid, kId, "logs"};
  r.gpu_uuid = "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6";
  s.ranks.push_back(r);
  RankSnapshot bare;  // no pod: no labels, "pod": null
  bare.pid = 101;
  bare.job_id = "job1";
  bare.rank = 1;
  bare.nccl["allreduce"] = {5, 1024, 1000};
  s.ranks.push_back(bare);
  return s;
}

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(needle) != std::string::npos && line[0] != '#') out.push_back(line);
  return out;
}

TEST(PodExport, LabelsOnRankInfoOnly) {
  const std::string text = render_metrics(pod_snapshot());
  const auto info = lines_with(text, "argus_rank_info{");
  ASSERT_EQ(info.size(), 2u);
  EXPECT_EQ(info[0],
            R"(argus_rank_info{job_id="job1",rank="0",local_rank="0",world_size="2",pid="100",node="gpu-node-1",)"
            R"(gpu_uuid="GPU-8932f937-d72c-4106-c12f-20bd9faed9f6",namespace="team-a",pod="trainer-0",)"
            R"(container="pytorch"} 1)");
  EXPECT_EQ(info[1].find("namespace="), std::string::npos);
  // No other series carries them (the info-metric pattern).
  for (const std::string label : {"namespace=", "pod=\"", "container=", "gpu_uuid="})
    for (const auto& line : lines_with(text, label)) EXPECT_EQ(line.rfind("argus_rank_info{", 0), 0u) << line;
}

TEST(PodExport, SelfMetricsCountEveryResult) {
  const std::string text = render_metrics(pod_snapshot());
  EXPECT_NE(text.find("argus_agent_pod_lookups_total{result=\"found\"} 2"), std::string::npos);
  EXPECT_NE(text.find("argus_agent_pod_lookups_total{result=\"pod_unknown\"} 1"), std::string::npos);
  EXPECT_NE(text.find("argus_agent_pod_lookups_total{result=\"cgroup_namespaced\"} 0"), std::string::npos);
  EXPECT_NE(text.find("argus_agent_pod_source_skips_total{reason=\"pod_dir_malformed\"} 4"), std::string::npos);
  // Off: no zero rows for a resolver that does not run.
  Snapshot off = pod_snapshot();
  off.agent.pod_info = "off";
  off.agent.pod_lookups.clear();
  EXPECT_EQ(render_metrics(off).find("argus_agent_pod_lookups_total{"), std::string::npos);
}

TEST(PodExport, RanksJsonHasThePodObject) {
  const auto doc = nlohmann::json::parse(render_ranks_json(pod_snapshot()));
  const auto& ranks = doc.at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].at("pod"), (nlohmann::json{{"namespace", "team-a"},
                                                {"pod", "trainer-0"},
                                                {"container", "pytorch"},
                                                {"pod_uid", kUid},
                                                {"container_id", kId},
                                                {"source", "logs"}}));
  EXPECT_EQ(ranks[0].at("gpu_uuid"), "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6");
  EXPECT_TRUE(ranks[1].at("pod").is_null());
  EXPECT_TRUE(ranks[1].at("gpu_uuid").is_null());
  // A uid without names: names are null, the uid and its source are said.
  Snapshot s = pod_snapshot();
  s.ranks[0].pod = {"", "", "", kUid, "", "cgroup"};
  const auto p = nlohmann::json::parse(render_ranks_json(s)).at("ranks")[0].at("pod");
  EXPECT_TRUE(p.at("namespace").is_null());
  EXPECT_TRUE(p.at("container_id").is_null());
  EXPECT_EQ(p.at("pod_uid"), kUid);
  EXPECT_EQ(p.at("source"), "cgroup");
}

}  // namespace
}  // namespace argus
