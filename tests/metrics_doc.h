// What /metrics exports against what docs/metrics.md documents: the metrics-doc
// tests (tests/unit/metrics_doc_test.cpp, tests/integration/metrics_doc_test.cpp).
//
// The convention in docs/metrics.md: a metric family is documented when its name
// starts a backticked span in the FIRST cell of a Markdown table row, optionally
// with its labels in the same span:
//   | `argus_rank_info{local_rank,world_size,pid,node}` | gauge = 1 | ... |
//   | `argus_ib_port_receive_bytes_total`, `argus_ib_port_transmit_bytes_total` | ... |
// A name mentioned in prose, or in a later cell, does not count: the tables are
// the reference, and a mention elsewhere is easy to leave behind when a row goes.
#pragma once
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace argus::metrics_doc {

// Family name -> its TYPE ("counter", "gauge", "histogram", ..., "untyped").
using Families = std::map<std::string, std::string>;

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The sample's metric name: the text before '{' or the first space.
inline std::string sample_name(const std::string& line) {
  const auto end = line.find_first_of("{ ");
  return line.substr(0, end);
}

// Every family in a Prometheus text exposition: each `# TYPE` line, and each
// sample whose name no TYPE line covers (untyped). A histogram's or summary's
// _bucket/_sum/_count samples belong to their family.
inline Families exported_families(const std::string& text) {
  Families fams;
  std::vector<std::string> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream fields(line.substr(7));
      std::string name, type;
      fields >> name >> type;
      if (!name.empty()) fams[name] = type;
    } else if (!line.empty() && line[0] != '#') {
      samples.push_back(sample_name(line));
    }
  }
  auto covered = [&](const std::string& name) {
    if (fams.count(name)) return true;
    for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
      if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      auto it = fams.find(name.substr(0, name.size() - suffix.size()));
      if (it != fams.end() && (it->second == "histogram" || it->second == "summary")) return true;
    }
    return false;
  };
  for (const auto& s : samples)
    if (!s.empty() && !covered(s)) fams[s] = "untyped";
  return fams;
}

// The metric name a backticked span starts with ([a-zA-Z_:][a-zA-Z0-9_:]*), or "".
// (No std::regex: GCC 12 warns inside it at -O1, and the ASan build is -Werror.)
inline std::string name_at_start(const std::string& span) {
  auto first = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; };
  auto rest = [&](char c) { return first(c) || (c >= '0' && c <= '9'); };
  if (span.empty() || !first(span[0])) return "";
  size_t end = 1;
  while (end < span.size() && rest(span[end])) ++end;
  return span.substr(0, end);
}

// The metric names documented in a Markdown text by the convention above.
inline std::set<std::string> documented_metrics(const std::string& markdown) {
  std::set<std::string> names;
  std::istringstream in(markdown);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] != '|') continue;
    const auto cell_end = line.find('|', first + 1);
    if (cell_end == std::string::npos) continue;
    // Backticked spans of the first cell: the odd-numbered backticks open one.
    const std::string cell = line.substr(first + 1, cell_end - first - 1);
    size_t open = cell.find('`');
    while (open != std::string::npos) {
      const size_t close = cell.find('`', open + 1);
      if (close == std::string::npos) break;
      if (auto name = name_at_start(cell.substr(open + 1, close - open - 1)); !name.empty()) names.insert(name);
      open = cell.find('`', close + 1);
    }
  }
  return names;
}

// The exported families docs/metrics.md does not document, one per line ("" when none).
inline std::string undocumented(const Families& exported, const std::set<std::string>& documented) {
  std::string missing;
  for (const auto& [name, type] : exported)
    if (!documented.count(name)) missing += "  " + name + " (" + type + ")\n";
  return missing;
}

}  // namespace argus::metrics_doc
