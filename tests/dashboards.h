// The Grafana dashboards the chart ships (helm/argus/dashboards/*.json), read
// as Grafana reads them: every query a dashboard runs (panel targets, rows'
// nested panels included; Prometheus annotations; query variables), and the
// Grafana variables in them substituted as Grafana does before it sends a query
// to Prometheus. Used by tests/unit/dashboards_json_test.cpp (structure, no
// root) and tests/integration/dashboards_test.cpp (every query against a real
// Prometheus scraping a real agent).
#pragma once
#include <cctype>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace argus::dashboards {

using json = nlohmann::json;

// The dashboards and the uid each must keep (links and bookmarks use the uid).
inline const std::vector<std::pair<std::string, std::string>>& shipped() {
  static const std::vector<std::pair<std::string, std::string>> files = {
      {"argus-cluster.json", "argus-cluster"}, {"argus-job.json", "argus-job"}, {"argus-node.json", "argus-node"}};
  return files;
}

inline std::string dir() { return std::string(ARGUS_SOURCE_DIR) + "/helm/argus/dashboards"; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every panel, depth first: a row's nested panels (a collapsed row keeps them
// in its own "panels") follow the row.
inline void collect_panels(const json& list, std::vector<const json*>& out) {
  if (!list.is_array()) return;
  for (const auto& p : list) {
    out.push_back(&p);
    if (p.contains("panels")) collect_panels(p["panels"], out);
  }
}
inline std::vector<const json*> all_panels(const json& dashboard) {
  std::vector<const json*> out;
  if (dashboard.contains("panels")) collect_panels(dashboard["panels"], out);
  return out;
}

inline bool is_row(const json& panel) { return panel.value("type", "") == "row"; }

enum class Kind { Panel, Annotation, Variable };

// One query a dashboard runs.
struct Query {
  Kind kind = Kind::Panel;
  std::string title;   // the panel's title, the annotation's or the variable's name
  std::string ref_id;  // the target's refId (panels)
  std::string expr;    // PromQL as stored, Grafana variables not substituted
  std::string label;   // variables: the label whose values label_values() lists
  bool range = false;  // Grafana runs it over the time range too (/api/v1/query_range): graphs, annotations
};

inline std::string describe(const Query& q) {
  switch (q.kind) {
    case Kind::Panel:
      return "panel '" + q.title + "' target " + q.ref_id;
    case Kind::Annotation:
      return "annotation '" + q.title + "'";
    case Kind::Variable:
      return "variable $" + q.title;
  }
  return "?";
}

// "label_values(EXPR, label)" -> {EXPR, label}; nullopt for another form.
inline std::optional<std::pair<std::string, std::string>> parse_label_values(const std::string& def) {
  const std::string head = "label_values(";
  if (def.rfind(head, 0) != 0 || def.empty() || def.back() != ')') return std::nullopt;
  const std::string inner = def.substr(head.size(), def.size() - head.size() - 1);
  int depth = 0;
  size_t comma = std::string::npos;
  for (size_t i = 0; i < inner.size(); ++i) {
    const char c = inner[i];
    if (c == '(' || c == '{' || c == '[') ++depth;
    if (c == ')' || c == '}' || c == ']') --depth;
    if (c == '"') {  // skip a quoted matcher value (it may hold commas)
      for (++i; i < inner.size() && inner[i] != '"'; ++i)
        if (inner[i] == '\\') ++i;
    }
    if (c == ',' && depth == 0) comma = i;
  }
  if (comma == std::string::npos) return std::nullopt;
  auto trim = [](std::string s) {
    const auto b = s.find_first_not_of(" \n\t");
    const auto e = s.find_last_not_of(" \n\t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  std::string expr = trim(inner.substr(0, comma)), label = trim(inner.substr(comma + 1));
  if (expr.empty() || label.empty()) return std::nullopt;
  for (char c : label)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return std::nullopt;
  return std::make_pair(expr, label);
}

// The text of a query variable's query (a string, or the editor's object).
inline std::string variable_query(const json& v) {
  const json q = v.value("query", json());
  if (q.is_string()) return q.get<std::string>();
  if (q.is_object()) return q.value("query", "");
  return v.value("definition", "");
}

// Every query of a dashboard, in the order Grafana shows them.
inline std::vector<Query> queries(const json& d) {
  std::vector<Query> out;
  for (const auto& v : d.value("templating", json::object()).value("list", json::array())) {
    if (v.value("type", "") != "query") continue;
    Query q{Kind::Variable, v.value("name", ""), "", variable_query(v), ""};
    if (auto lv = parse_label_values(q.expr)) q.label = lv->second;
    out.push_back(q);
  }
  for (const auto& a : d.value("annotations", json::object()).value("list", json::array())) {
    if (a.value("builtIn", 0) == 1) continue;
    out.push_back({Kind::Annotation, a.value("name", ""), "", a.value("expr", ""), "", true});
  }
  for (const json* p : all_panels(d)) {
    if (is_row(*p)) continue;
    for (const auto& t : p->value("targets", json::array()))
      out.push_back(
          {Kind::Panel, p->value("title", ""), t.value("refId", ""), t.value("expr", ""), "", t.value("range", false)});
  }
  return out;
}

// The macros Grafana's Prometheus data source fills in itself.
inline const std::set<std::string>& grafana_macros() {
  static const std::set<std::string> m = {"__rate_interval", "__interval", "__interval_ms",
                                          "__range",         "__range_s",  "__range_ms"};
  return m;
}

// The names in an expression that contain "argus" (metrics and recording
// rules: argus_straggler, argus:straggler, job_id:argus_..., outside quoted
// strings), to hold against what the agent exports and the rules record.
inline std::set<std::string> argus_names(const std::string& expr) {
  std::set<std::string> out;
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':'; };
  for (size_t i = 0; i < expr.size();) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {  // a string: a label value, a regex
      size_t j = i + 1;
      while (j < expr.size() && expr[j] != c) j += expr[j] == '\\' ? 2 : 1;
      i = j + 1;
      continue;
    }
    if (c == '$') {  // a variable's name is not a metric
      ++i;
      while (i < expr.size() && (ident(expr[i]) || expr[i] == '{')) ++i;
      continue;
    }
    if (!ident(c) || std::isdigit(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < expr.size() && ident(expr[j])) ++j;
    const std::string tok = expr.substr(i, j - i);
    if (tok.find("argus") != std::string::npos) out.insert(tok);
    i = j;
  }
  return out;
}

// The variables an expression names: $name, ${name} and ${name:format}.
inline std::set<std::string> referenced_variables(const std::string& expr) {
  std::set<std::string> out;
  for (size_t i = 0; i < expr.size(); ++i) {
    if (expr[i] != '$') continue;
    size_t j = i + 1;
    const bool braced = j < expr.size() && expr[j] == '{';
    if (braced) ++j;
    size_t k = j;
    while (k < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[k])) || expr[k] == '_')) ++k;
    if (k > j) out.insert(expr.substr(j, k - j));
  }
  return out;
}

// The expression with every variable replaced by its value (already formatted
// as Grafana formats it: a multi-value regex as "(a|b)"); a variable not in
// `values` is left as it is, for the caller to report.
inline std::string substitute(const std::string& expr, const std::map<std::string, std::string>& values) {
  std::string out;
  for (size_t i = 0; i < expr.size(); ++i) {
    if (expr[i] != '$') {
      out += expr[i];
      continue;
    }
    size_t j = i + 1;
    const bool braced = j < expr.size() && expr[j] == '{';
    if (braced) ++j;
    size_t k = j;
    while (k < expr.size() && (std::isalnum(static_cast<unsigned char>(expr[k])) || expr[k] == '_')) ++k;
    size_t end = k;
    if (braced) {
      const size_t close = expr.find('}', k);
      end = close == std::string::npos ? k : close + 1;
    }
    const auto it = values.find(expr.substr(j, k - j));
    if (k == j || it == values.end()) {
      out += expr[i];
      continue;
    }
    out += it->second;
    i = end - 1;
  }
  return out;
}

}  // namespace argus::dashboards
