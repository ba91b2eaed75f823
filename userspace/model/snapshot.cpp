#include "userspace/model/snapshot.h"

#include <algorithm>

namespace argus {

// c10d describes a group the caller did not describe as "undefined".
std::string process_group_label(const ProcessGroupInfo& g) {
  if (!g.desc.empty() && g.desc != "undefined") return g.desc;
  if (!g.name.empty()) return g.name;
  return "unnamed";
}

std::string rank_list_text(std::vector<int> ranks) {
  std::erase_if(ranks, [](int r) { return r < 0; });
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  constexpr int kMaxPieces = 6;
  std::string out;
  int pieces = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (pieces == kMaxPieces) return out + ", ...";
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    // Two in a row read better as a range ("4-5"), as users write TP pairs.
    if (j > i) out += "-" + std::to_string(ranks[j]);
    ++pieces;
    i = j + 1;
  }
  return out;
}

std::string group_phrase(const std::string& label, const std::vector<int>& ranks_here, int nranks) {
  const std::string list = rank_list_text(ranks_here);
  if (list.empty()) return label;
  const size_t known = static_cast<size_t>(std::count_if(ranks_here.begin(), ranks_here.end(), [](int r) { return r >= 0; }));
  const bool single = known == 1;
  if (nranks <= 0 || known >= static_cast<size_t>(nranks))
    return label + " (rank" + (single ? " " : "s ") + list + ")";
  return label + " (rank" + (single ? " " : "s ") + list + " here, of " + std::to_string(nranks) + ")";
}

}  // namespace argus
