#include "userspace/procfs/proc_children.h"

namespace argus::procfs {

ReadResult<std::vector<int>> parse_children(std::string_view content) {
  std::vector<int> out;
  size_t i = 0;
  while (i < content.size()) {
    while (i < content.size() && (content[i] == ' ' || content[i] == '\n')) ++i;
    size_t j = i;
    while (j < content.size() && content[j] != ' ' && content[j] != '\n') ++j;
    if (j == i) break;
    const auto pid = parse_num<int>(content.substr(i, j - i));
    if (!pid || *pid <= 0) return malformed("children: \"" + std::string(content.substr(i, j - i)) + "\"");
    out.push_back(*pid);
    i = j;
  }
  return out;
}

ReadResult<std::vector<int>> read_children(const std::string& proc_root, int pid) {
  const std::string path = pid_path(proc_root, pid, "task/" + std::to_string(pid) + "/children");
  auto content = read_file(path, 1 << 20);
  if (!content) return content.failure();
  return parse_children(*content);
}

ReadResult<ProcIo> parse_io(std::string_view content) {
  ProcIo io;
  bool rchar = false, read_bytes = false;
  size_t i = 0;
  while (i < content.size()) {
    size_t end = content.find('\n', i);
    if (end == std::string_view::npos) end = content.size();
    const std::string_view line = content.substr(i, end - i);
    i = end + 1;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (key != "rchar" && key != "read_bytes") continue;
    const auto v = parse_num<uint64_t>(value);
    if (!v) return malformed("io: " + std::string(key) + " \"" + std::string(value) + "\"");
    (key == "rchar" ? io.rchar : io.read_bytes) = *v;
    (key == "rchar" ? rchar : read_bytes) = true;
  }
  if (!rchar || !read_bytes) return malformed("io: no rchar or read_bytes line");
  return io;
}

ReadResult<ProcIo> read_io(const std::string& proc_root, int pid) {
  auto content = read_file(pid_path(proc_root, pid, "io"), 64 << 10);
  if (!content) return content.failure();
  return parse_io(*content);
}

}  // namespace argus::procfs
