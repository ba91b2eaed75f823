// The shipped Grafana dashboards' structure, without root or Prometheus: valid
// JSON, the fixed uids, the variables every dashboard has ($datasource, $job_id,
// $node, $rank), nothing that only works through Grafana's import dialog
// (__inputs, ${DS_...}: the chart provisions them through the sidecar), unique
// panel ids, and a Prometheus datasource and queries on every panel. Whether
// each query runs, and shows what the agent saw, is
// tests/integration/dashboards_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/dashboards.h"

namespace argus::dashboards {
namespace {

const json kDatasource = {{"type", "prometheus"}, {"uid", "${datasource}"}};

// Grafana 11's dashboard schema; older files are migrated on load, newer ones
// may not load in the Grafana versions kube-prometheus-stack ships.
constexpr int kMinSchemaVersion = 39;

// What is wrong with one dashboard, one line each ("" when nothing).
std::vector<std::string> problems(const json& d, const std::string& uid, const std::string& text) {
  std::vector<std::string> out;
  auto bad = [&](const std::string& s) { out.push_back(s); };
  if (!d.is_object()) return {"not a JSON object"};
  if (d.value("uid", "") != uid) bad("uid is '" + d.value("uid", "") + "', not '" + uid + "'");
  if (d.value("title", "").empty()) bad("no title");
  if (!d.contains("schemaVersion") || !d["schemaVersion"].is_number_integer() ||
      d["schemaVersion"].get<int>() < kMinSchemaVersion)
    bad("schemaVersion below " + std::to_string(kMinSchemaVersion));
  if (d.contains("__inputs") || d.contains("__requires")) bad("__inputs/__requires: an export for sharing");
  if (text.find("${DS_") != std::string::npos) bad("a ${DS_...} input (the sidecar cannot fill it)");
  if (d.contains("id") && !d["id"].is_null()) bad("id is set (provisioning assigns it)");

  // Variables.
  std::map<std::string, json> vars;
  for (const auto& v : d.value("templating", json::object()).value("list", json::array())) {
    const std::string name = v.value("name", "");
    if (vars.count(name)) bad("variable $" + name + " twice");
    vars[name] = v;
  }
  if (!vars.count("datasource") || vars["datasource"].value("type", "") != "datasource" ||
      vars["datasource"].value("query", "") != "prometheus")
    bad("no $datasource variable of type datasource (prometheus)");
  for (const char* name : {"job_id", "node", "rank"}) {
    if (!vars.count(name)) {
      bad(std::string("no $") + name + " variable");
      continue;
    }
    const json& v = vars[name];
    if (v.value("type", "") != "query") bad(std::string("$") + name + " is not a query variable");
    if (v.value("datasource", json()) != kDatasource) bad(std::string("$") + name + " does not use ${datasource}");
    const auto lv = parse_label_values(variable_query(v));
    if (!lv || lv->second != name)
      bad(std::string("$") + name + " is not label_values(..., " + name + "): '" + variable_query(v) + "'");
    if (v.value("includeAll", false) && v.value("allValue", "") != ".*")
      bad(std::string("$") + name + ": All must be .* (series without the label match too)");
  }

  // Panels.
  std::set<long> ids;
  std::set<std::string> titles;
  for (const json* pp : all_panels(d)) {
    const json& p = *pp;
    const std::string title = p.value("title", "");
    const std::string where = "panel '" + title + "'";
    if (!p.contains("id") || !p["id"].is_number_integer()) {
      bad(where + " has no integer id");
    } else if (!ids.insert(p["id"].get<long>()).second) {
      bad(where + " repeats id " + std::to_string(p["id"].get<long>()));
    }
    if (title.empty()) bad("a panel without a title");
    if (!titles.insert(title).second) bad(where + " title repeated (the tests name panels by title)");
    const json g = p.value("gridPos", json());
    if (!g.is_object() || !g.contains("w") || !g.contains("h") || !g.contains("x") || !g.contains("y") ||
        g["x"].get<int>() + g["w"].get<int>() > 24)
      bad(where + " gridPos missing or wider than the grid");
    if (is_row(p)) {
      if (!p.value("collapsed", false) && !p.value("panels", json::array()).empty())
        bad(where + ": an open row keeps no nested panels");
      continue;
    }
    if (p.value("datasource", json()) != kDatasource) bad(where + " datasource is not ${datasource}");
    const json targets = p.value("targets", json::array());
    if (targets.empty()) bad(where + " has no targets");
    std::set<std::string> refs;
    for (const auto& t : targets) {
      if (t.value("expr", "").empty()) bad(where + " has a target without expr");
      if (!refs.insert(t.value("refId", "")).second || t.value("refId", "").empty())
        bad(where + " refId missing or repeated");
      if (t.value("datasource", json()) != kDatasource) bad(where + " target datasource is not ${datasource}");
    }
  }

  // Annotations (the built-in one is Grafana's own).
  for (const auto& a : d.value("annotations", json::object()).value("list", json::array())) {
    if (a.value("builtIn", 0) == 1) continue;
    const std::string where = "annotation '" + a.value("name", "") + "'";
    if (a.value("datasource", json()) != kDatasource) bad(where + " datasource is not ${datasource}");
    if (a.value("expr", "").empty()) bad(where + " has no expr");
  }

  // Every variable a query names exists.
  for (const auto& q : queries(d))
    for (const auto& name : referenced_variables(q.expr))
      if (!vars.count(name) && !grafana_macros().count(name)) bad(describe(q) + " names undefined $" + name);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "  " + x + "\n";
  return s;
}

TEST(DashboardsJson, ShippedDashboardsAreWellFormed) {
  std::set<std::string> uids;
  size_t panels = 0, queries_seen = 0;
  for (const auto& [file, uid] : shipped()) {
    const std::string path = dir() + "/" + file;
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const std::string text = read_file(path);
    const json d = json::parse(text, nullptr, false);
    ASSERT_FALSE(d.is_discarded()) << path << " is not valid JSON";
    EXPECT_EQ(joined(problems(d, uid, text)), "") << path;
    EXPECT_TRUE(uids.insert(d.value("uid", "")).second) << "uid repeated: " << uid;
    panels += all_panels(d).size();
    const auto qs = queries(d);
    queries_seen += qs.size();
    // Each dashboard shows something and has annotations or a row to fold.
    EXPECT_GE(qs.size(), 15u) << path;
  }
  // No stray dashboards: the chart ships every *.json there.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir()))
    if (e.path().extension() == ".json") ++files;
  EXPECT_EQ(files, shipped().size()) << "a dashboard in " << dir() << " this test does not check";
  std::printf("[ dashboards ] %zu dashboards, %zu panels, %zu queries\n", shipped().size(), panels, queries_seen);
}

// The checker itself: a dashboard exported "for sharing" from Grafana, with
// the mistakes the sidecar cannot load, must be refused on each count.
TEST(DashboardsJson, CheckerRefusesABrokenDashboard) {
  const std::string text = R"json({
    "__inputs": [{"name": "DS_PROMETHEUS", "type": "datasource"}],
    "uid": "other", "title": "x", "schemaVersion": 27, "id": 7,
    "templating": {"list": [
      {"name": "job_id", "type": "query", "datasource": "${DS_PROMETHEUS}", "query": "label_values(up, job)"}]},
    "annotations": {"list": [{"name": "a", "datasource": {"type": "prometheus", "uid": "${datasource}"}}]},
    "panels": [
      {"id": 1, "title": "p", "type": "timeseries", "gridPos": {"h": 8, "w": 12, "x": 0, "y": 0},
       "datasource": "${DS_PROMETHEUS}", "targets": [{"refId": "A", "expr": "up{job=~\"$jobid\"}"}]},
      {"id": 1, "title": "q", "type": "stat", "gridPos": {"h": 8, "w": 16, "x": 12, "y": 0}, "targets": []}
    ]})json";
  const json d = json::parse(text);
  const std::string all = joined(problems(d, "argus-job", text));
  for (const char* want :
       {"uid is 'other'", "schemaVersion below", "__inputs", "${DS_...}", "id is set", "no $datasource",
        "$job_id does not use ${datasource}", "$job_id is not label_values", "no $node variable", "no $rank variable",
        "repeats id 1", "wider than the grid", "panel 'p' datasource", "panel 'q' has no targets",
        "annotation 'a' has no expr", "names undefined $jobid"})
    EXPECT_NE(all.find(want), std::string::npos) << "missing: " << want << "\n" << all;
}

TEST(DashboardsJson, LabelValuesAndSubstitution) {
  auto lv = parse_label_values(R"(label_values(argus_rank_info{job_id=~"$job_id", x="a,b"}, rank))");
  ASSERT_TRUE(lv.has_value());
  EXPECT_EQ(lv->first, R"(argus_rank_info{job_id=~"$job_id", x="a,b"})");
  EXPECT_EQ(lv->second, "rank");
  EXPECT_FALSE(parse_label_values("label_values(argus_rank_info)").has_value());
  EXPECT_FALSE(parse_label_values("query_result(up)").has_value());
  EXPECT_FALSE(parse_label_values("label_values(up, not a label)").has_value());
  EXPECT_FALSE(parse_label_values("label_values(up, rank").has_value());

  const std::map<std::string, std::string> values = {
      {"job_id", "(j1|j2)"}, {"__rate_interval", "10s"}, {"__range", "1m"}};
  EXPECT_EQ(substitute(R"(rate(x{job_id=~"$job_id"}[$__rate_interval]))", values),
            R"q(rate(x{job_id=~"(j1|j2)"}[10s]))q");
  EXPECT_EQ(substitute("${job_id} ${job_id:regex} $__range", values), "(j1|j2) (j1|j2) 1m");
  // Unknown variables stay for the caller to report; a lone $ is kept.
  EXPECT_EQ(substitute("$nope $ $job_idx", values), "$nope $ $job_idx");
  EXPECT_EQ(argus_names(R"q(sum by (rank) (rate(argus_cpu_seconds_total{job_id=~"$job_id", x="argus_not_a_name"}[1m]))
             / on (job_id) group_left job_id:argus_collective_wait_ratio:median or argus:straggler
             or ALERTS{alertname=~"Argus.*"} or container_cpu_usage_seconds_total{image=~'.*argus_x.*'})q"),
            (std::set<std::string>{"argus_cpu_seconds_total", "job_id:argus_collective_wait_ratio:median",
                                   "argus:straggler"}));
  EXPECT_EQ(referenced_variables("a $x ${y} ${z:csv} $ $__range"), (std::set<std::string>{"x", "y", "z", "__range"}));
}

}  // namespace
}  // namespace argus::dashboards
