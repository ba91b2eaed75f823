#include "userspace/python/stack_groups.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace argus::python {

nlohmann::json threads_json(const PyStackDump& d) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& t : d.threads) {
    nlohmann::json frames = nlohmann::json::array();
    for (const auto& f : t.frames) {
      frames.push_back({{"function", f.function}, {"qualname", f.qualname}, {"file", f.file}, {"line", f.line}});
    }
    out.push_back({{"native_thread_id", t.native_tid},
                   {"namespace_thread_id", t.namespace_tid},
                   {"thread_id", t.thread_id},
                   {"truncated", t.truncated},
                   {"torn", t.torn},
                   {"frames", std::move(frames)}});
  }
  return out;
}

nlohmann::json stacks_json(const std::string& job_id, int rank, int pid, const PyStackDump& d) {
  return {{"job_id", job_id}, {"rank", rank}, {"pid", pid}, {"python_version", d.version}, {"threads", threads_json(d)}};
}

namespace {

std::string frame_text(const nlohmann::json& f) {
  std::string name = f.value("qualname", "");
  if (name.empty()) name = f.value("function", "?");
  return name + " (" + f.value("file", "?") + ":" + std::to_string(f.value("line", 0)) + ")";
}

std::string thread_key(const nlohmann::json& t) {
  std::string k = t.value("truncated", false) ? "T" : "-";
  if (t.contains("frames") && t["frames"].is_array()) {
    for (const auto& f : t["frames"]) k += frame_text(f) + "\n";
  }
  return k;
}

std::string stack_key(const nlohmann::json& threads) {
  std::vector<std::string> keys;
  if (threads.is_array()) {
    for (const auto& t : threads) keys.push_back(thread_key(t));
  }
  std::sort(keys.begin(), keys.end());
  std::string k;
  for (const auto& s : keys) k += s + "\x1e";
  return k;
}

}  // namespace

std::vector<StackGroup> group_stacks(const std::vector<std::pair<int, nlohmann::json>>& rank_threads) {
  std::map<std::string, size_t> index;
  std::vector<StackGroup> groups;
  for (const auto& [rank, threads] : rank_threads) {
    auto key = stack_key(threads);
    auto [it, fresh] = index.emplace(key, groups.size());
    if (fresh) groups.push_back({{}, threads});
    groups[it->second].ranks.push_back(rank);
  }
  for (auto& g : groups) std::sort(g.ranks.begin(), g.ranks.end());
  std::stable_sort(groups.begin(), groups.end(), [](const StackGroup& a, const StackGroup& b) {
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
    return a.ranks.front() < b.ranks.front();
  });
  return groups;
}

std::string rank_list_label(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string list;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!list.empty()) list += ",";
    list += std::to_string(ranks[i]);
    if (j > i) list += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  const size_t n = ranks.size();
  return std::string(n == 1 ? "rank " : "ranks ") + list + " (" + std::to_string(n) + (n == 1 ? " rank)" : " ranks)");
}

nlohmann::json stack_groups_json(const std::vector<StackGroup>& groups) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& g : groups) {
    out.push_back({{"ranks", g.ranks}, {"label", rank_list_label(g.ranks)}, {"threads", g.threads}});
  }
  return out;
}

std::string format_threads(const nlohmann::json& threads, bool with_ids, const std::string& indent) {
  std::ostringstream o;
  if (!threads.is_array() || threads.empty()) return indent + "(no Python threads)\n";
  size_t n = 0;
  for (const auto& t : threads) {
    ++n;
    o << indent << "Thread ";
    if (with_ids) {
      o << t.value("native_thread_id", 0);
    } else {
      o << n;
    }
    if (t.value("torn", false)) o << " [torn: moved while read]";
    o << ":\n";
    if (t.contains("frames") && t["frames"].is_array()) {
      if (t["frames"].empty()) o << indent << "    (no Python frame)\n";
      for (const auto& f : t["frames"]) o << indent << "    " << frame_text(f) << "\n";
    }
    if (t.value("truncated", false)) o << indent << "    ... (deeper frames cut)\n";
  }
  return o.str();
}

std::string format_stack_groups(const std::vector<StackGroup>& groups) {
  std::ostringstream o;
  for (const auto& g : groups) {
    o << rank_list_label(g.ranks) << ":\n" << format_threads(g.threads, g.ranks.size() == 1, "  ");
  }
  return o.str();
}

nlohmann::json grouped_stacks_of(const std::vector<std::pair<int, int>>& rank_pids, PythonLocator& locator,
                                 const std::string& proc_root, size_t max_ranks, size_t max_frames) {
  std::vector<std::pair<int, nlohmann::json>> docs;
  nlohmann::json errors = nlohmann::json::array();
  DumpOptions opts;
  opts.max_frames = max_frames;
  opts.max_threads = 32;
  for (const auto& [rank, pid] : rank_pids) {
    if (docs.size() + errors.size() >= max_ranks) break;
    auto p = locator.locate(pid);
    if (!p) {
      if (p.failure().kind != LocateError::kNotPython) errors.push_back({{"rank", rank}, {"pid", pid}, {"error", p.error()}});
      continue;
    }
    auto mem = process_memory(pid, proc_root);
    auto d = dump_stacks(*p, *mem, proc_root, opts);
    if (!d) {
      errors.push_back({{"rank", rank}, {"pid", pid}, {"error", d.error()}});
      continue;
    }
    docs.emplace_back(rank, threads_json(*d));
  }
  return {{"groups", stack_groups_json(group_stacks(docs))}, {"errors", std::move(errors)}};
}

}  // namespace argus::python
