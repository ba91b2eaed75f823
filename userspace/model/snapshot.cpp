#include "userspace/model/snapshot.h"

namespace argus {

// c10d describes a group the caller did not describe as "undefined".
std::string process_group_label(const ProcessGroupInfo& g) {
  if (!g.desc.empty() && g.desc != "undefined") return g.desc;
  if (!g.name.empty()) return g.name;
  return "unnamed";
}

}  // namespace argus
