#include "userspace/procfs/cpu_stat.h"

#include <charconv>

#include "userspace/procfs/procfs.h"

namespace argus::procfs {

Result<CpuStat> parse_cpu_stat(std::string_view content, int version) {
  CpuStat out;
  bool throttled_seen = false;
  size_t pos = 0;
  int line_no = 0;
  while (pos < content.size()) {
    size_t nl = content.find('\n', pos);
    if (nl == std::string_view::npos) nl = content.size();
    const std::string_view line = content.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string_view key = line.substr(0, sp);
    const std::string_view num = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
    uint64_t value = 0;
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), value);
    if (key.empty() || num.empty() || ec != std::errc() || p != num.data() + num.size())
      return make_error("cpu.stat line " + std::to_string(line_no) + " is not `key value`");
    if (key == "nr_periods") {
      out.nr_periods = value;
      out.has_quota_counters = true;
    } else if (key == "nr_throttled") {
      out.nr_throttled = value;
    } else if (version == 2 && key == "throttled_usec") {
      out.throttled_ns = value * 1000;
      throttled_seen = true;
    } else if (version == 1 && key == "throttled_time") {
      out.throttled_ns = value;
      throttled_seen = true;
    }
  }
  if (out.has_quota_counters && !throttled_seen)
    return make_error(std::string("cpu.stat has nr_periods but no ") +
                      (version == 2 ? "throttled_usec" : "throttled_time"));
  return out;
}

Result<CpuStat> read_cpu_stat(const std::string& dir, int version) {
  auto text = read_file(dir + "/cpu.stat", 64 << 10);
  if (!text.ok()) return make_error(text.error());
  return parse_cpu_stat(*text, version);
}

}  // namespace argus::procfs
