#include "userspace/cli/rank_table.h"

#include "userspace/model/snapshot.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <vector>

namespace argus::cli {

namespace {

using nlohmann::json;

constexpr std::size_t kMaxJobWidth = 24;
constexpr std::size_t kMaxGroupsWidth = 26;  // the last column: a line stays within 150

const json* member(const json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

double number(const json& j, const char* key) {
  const json* v = member(j, key);
  return v && v->is_number() ? v->get<double>() : 0.0;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string integer(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

// Control characters would break the table's lines.
std::string printable(std::string s) {
  for (auto& c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) c = '?';
  }
  return s;
}

double error_calls(const json* list) {
  double n = 0;
  if (!list || !list->is_array()) return 0;
  for (const auto& e : *list) n += number(e, "count");
  return n;
}

// A GPU figure in percent, "-" for a rank without current GPU records.
std::string gpu_percent(const json& r, const char* key) {
  const json* gpu = member(r, "gpu");
  if (!gpu || !gpu->is_object()) return "-";
  const json* v = member(*gpu, key);
  return v && v->is_number() ? fixed(v->get<double>() * 100.0, 1) : "-";
}

// Device memory held through the driver, in GiB, against its GPU's total where
// known ("4.5/80"; "-": no device memory call seen).
std::string gpu_memory_of(const json& r) {
  const json* m = member(r, "gpu_memory");
  if (!m || !m->is_object()) return "-";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::string out = fixed(number(*m, "held_bytes") / kGiB, 1);
  if (const json* t = member(*m, "total_bytes"); t && t->is_number()) out += "/" + integer(t->get<double>() / kGiB);
  return out;
}

// What the detectors say about the rank, in a few words.
std::string flags_of(const json& r) {
  std::string out;
  auto add = [&](const std::string& f) { out += (out.empty() ? "" : ",") + f; };
  if (const json* s = member(r, "straggler"); s && s->is_boolean() && s->get<bool>()) {
    const json* why = member(r, "straggler_reason");
    add(why && why->is_string() ? "straggler(" + printable(why->get<std::string>()) + ")" : "straggler");
  }
  if (const json* b = member(r, "pipeline_bubble"); b && b->is_boolean() && b->get<bool>()) add("bubble");
  if (const json* h = member(r, "hang_missing"); h && h->is_boolean() && h->get<bool>()) add("hang");
  if (const json* m = member(r, "gpu_memory"); m && m->is_object()) {
    if (const json* g = member(*m, "growing"); g && g->is_boolean() && g->get<bool>()) add("mem-leak");
    if (const json* p = member(*m, "pressure"); p && p->is_boolean() && p->get<bool>()) add("mem-full");
  }
  return out.empty() ? "-" : out;
}

struct Row {
  bool identified = false;
  std::string job;
  int64_t rank = -1;
  int64_t pid = 0;
  std::array<std::string, 16> cells;
};

// The c10d groups' labels with their members here ("tp(4-5)"; "-": none),
// their calls added to `calls`.
std::string groups_of(const json& r, double& calls) {
  std::string out;
  const json* groups = member(r, "process_groups");
  if (!groups || !groups->is_array()) return "-";
  for (const auto& g : *groups) {
    const json* label = member(g, "group");
    if (!label || !label->is_string()) continue;
    // ProcessGroupNCCL's calls are its NCCL calls, already in NCCL's count.
    const json* backend = member(g, "backend");
    const bool nccl = backend && backend->is_string() && backend->get<std::string>() == "nccl";
    if (const json* c = member(g, "calls"); c && c->is_object() && !nccl)
      for (const auto& [op, n] : c->items()) calls += n.is_number() ? n.get<double>() : 0.0;
    std::vector<int> ranks;
    if (const json* m = member(g, "members"); m && m->is_array())
      for (const auto& r : *m)
        if (r.is_number_integer()) ranks.push_back(r.get<int>());
    const std::string who = rank_list_text(ranks);
    out += (out.empty() ? "" : ",") + printable(label->get<std::string>()) + (who.empty() ? "" : "(" + who + ")");
  }
  if (out.size() > kMaxGroupsWidth) out = out.substr(0, kMaxGroupsWidth - 3) + "...";
  return out.empty() ? "-" : out;
}

}  // namespace

std::string format_rank_table(const json& ranks_doc, bool include_unidentified) {
  // Wait seconds are in --json. COLL% is the time inside collective calls (near 0
  // on real, asynchronous NCCL); SYNC% the time blocked in CUDA synchronize.
  // COLL counts NCCL's calls and PyTorch's process-group (c10d) calls; GROUPS
  // names the process groups it is a member of, as the framework names them.
  // GPU_MEM is what it holds through the driver, GiB, of its GPU's total.
  static const std::array<const char*, 16> kHeader = {"JOB",     "RANK",  "PID",   "STATE",   "COLL",
                                                      "COLL_GB", "COLL%", "SYNC%", "GPU%",    "NCCL_K%",
                                                      "BUBBLE%", "GPU_MEM", "LAUNCHES", "ERRORS", "FLAGS", "GROUPS"};
  static const std::array<bool, 16> kLeft = {true,  false, false, true,  false, false, false, false,
                                             false, false, false, false, false, false, false, true};

  std::vector<Row> rows;
  std::size_t hidden = 0;
  const json* ranks = member(ranks_doc, "ranks");
  if (ranks && ranks->is_array()) {
    for (const auto& r : *ranks) {
      if (!r.is_object()) continue;
      Row row;
      const json* job = member(r, "job_id");
      const json* rank = member(r, "rank");
      bool has_job = job && job->is_string() && !job->get<std::string>().empty();
      bool has_rank = rank && rank->is_number_integer() && rank->get<int64_t>() >= 0;
      row.identified = has_job && has_rank;
      if (!row.identified && !include_unidentified) {
        ++hidden;
        continue;
      }
      row.job = has_job ? job->get<std::string>() : "";
      row.rank = has_rank ? rank->get<int64_t>() : -1;
      const json* pid = member(r, "pid");
      row.pid = pid && pid->is_number_integer() ? pid->get<int64_t>() : 0;

      double calls = 0, bytes = 0;
      if (const json* nccl = member(r, "nccl"); nccl && nccl->is_object()) {
        for (const auto& [op, c] : nccl->items()) {
          calls += number(c, "calls");
          bytes += number(c, "bytes");
        }
      }
      std::string launches = "-";
      double errors = error_calls(member(r, "nccl_errors"));
      if (const json* cuda = member(r, "cuda")) {
        if (const json* l = member(*cuda, "kernel_launches"); l && l->is_number()) launches = integer(l->get<double>());
        errors += error_calls(member(*cuda, "errors"));
      }
      std::string state = "?";
      if (const json* s = member(r, "state"); s && s->is_string()) {
        state = printable(s->get<std::string>());
        const json* reason = member(r, "exit_reason");
        if (state == "exited" && reason && reason->is_string() && !reason->get<std::string>().empty()) {
          state += ":" + printable(reason->get<std::string>());
        }
      }
      const std::string groups = groups_of(r, calls);
      std::string job_cell = has_job ? printable(row.job) : "?";
      if (job_cell.size() > kMaxJobWidth) job_cell = job_cell.substr(0, kMaxJobWidth - 3) + "...";
      row.cells = {job_cell,
                   has_rank ? std::to_string(row.rank) : "?",
                   std::to_string(row.pid),
                   state,
                   integer(calls),
                   fixed(bytes / 1e9, 2),
                   fixed(number(r, "collective_wait_ratio") * 100.0, 1),
                   fixed(number(r, "sync_wait_ratio") * 100.0, 1),
                   gpu_percent(r, "busy_ratio"),
                   gpu_percent(r, "nccl_kernel_ratio"),
                   gpu_percent(r, "bubble_ratio"),
                   gpu_memory_of(r),
                   launches,
                   integer(errors),
                   flags_of(r),
                   groups};
      rows.push_back(std::move(row));
    }
  }

  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return std::make_tuple(!a.identified, a.job, a.rank < 0, a.rank, a.pid) <
           std::make_tuple(!b.identified, b.job, b.rank < 0, b.rank, b.pid);
  });

  std::string out;
  if (rows.empty()) {
    const json* node = member(ranks_doc, "node");
    out = "no ranks";
    if (node && node->is_string() && !node->get<std::string>().empty()) out += " on " + node->get<std::string>();
    out += "\n";
  } else {
    std::array<std::size_t, 16> width{};
    for (std::size_t c = 0; c < kHeader.size(); ++c) width[c] = std::string(kHeader[c]).size();
    for (const auto& row : rows) {
      for (std::size_t c = 0; c < row.cells.size(); ++c) width[c] = std::max(width[c], row.cells[c].size());
    }
    auto line = [&](const auto& cells) {
      std::string l;
      for (std::size_t c = 0; c < cells.size(); ++c) {
        std::string cell = cells[c];
        std::string pad(width[c] - cell.size(), ' ');
        if (c > 0) l += "  ";
        l += kLeft[c] ? cell + pad : pad + cell;
      }
      while (!l.empty() && l.back() == ' ') l.pop_back();
      return l + "\n";
    };
    out += line(kHeader);
    for (const auto& row : rows) out += line(row.cells);
  }
  if (hidden > 0) {
    out += "(" + std::to_string(hidden) + " unidentified process" + (hidden == 1 ? "" : "es") +
           " hidden; --all shows them)\n";
  }
  return out;
}

std::string format_event_list(const json& events_doc) {
  const json* list = member(events_doc, "events");
  if (list == nullptr || !list->is_array() || list->empty()) return "no events\n";
  std::string out;
  for (const auto& ev : *list) {
    if (!ev.is_object()) continue;
    auto text = [&](const char* key) {
      const json* v = member(ev, key);
      if (v == nullptr || v->is_null()) return std::string("-");
      return printable(v->is_string() ? v->get<std::string>() : v->dump());
    };
    char line[160];
    std::snprintf(line, sizeof(line), "%-24s  %-15s  %-16s  %5s  ", text("time").c_str(), text("kind").c_str(),
                  text("job_id").substr(0, 16).c_str(), text("rank").c_str());
    out += line + text("summary") + "\n";
  }
  return out;
}

}  // namespace argus::cli
