#include "userspace/kmsg/xid.h"

#include <algorithm>
#include <cctype>
#include <charconv>

namespace argus::kmsg {
namespace {

bool parse_u64(std::string_view s, uint64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

bool all_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "[PCI:]DOMAIN:BUS:DEV[.FN]" -> "dddd:bb:dd"; "" when it is not one.
std::string normalize_bus_id(std::string_view s) {
  if (s.rfind("PCI:", 0) == 0) s.remove_prefix(4);
  if (auto dot = s.find('.'); dot != std::string_view::npos) {
    const auto fn = s.substr(dot + 1);
    if (fn.size() != 1 || fn[0] < '0' || fn[0] > '7') return "";
    s = s.substr(0, dot);
  }
  const auto c1 = s.find(':');
  const auto c2 = c1 == std::string_view::npos ? c1 : s.find(':', c1 + 1);
  if (c2 == std::string_view::npos) return "";
  std::string_view dom = s.substr(0, c1), bus = s.substr(c1 + 1, c2 - c1 - 1), dev = s.substr(c2 + 1);
  if (!all_hex(dom) || !all_hex(bus) || !all_hex(dev) || dom.size() > 8 || bus.size() != 2 || dev.size() != 2)
    return "";
  // The driver writes a 4-digit domain; NVML and dcgm an 8-digit one. Keep 4 where the rest are zeros.
  while (dom.size() > 4 && dom.front() == '0') dom.remove_prefix(1);
  if (dom.size() < 4) return "";
  return lower(dom) + ":" + lower(bus) + ":" + lower(dev);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Cuts the next ", "-separated field off `rest`.
std::string_view next_field(std::string_view& rest) {
  const auto comma = rest.find(',');
  std::string_view field = comma == std::string_view::npos ? rest : rest.substr(0, comma);
  rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  return trim(field);
}

constexpr size_t kMaxDetail = 256;  // the evidence keeps the line's start; the log has the rest

}  // namespace

std::optional<KmsgRecord> parse_kmsg_record(std::string_view raw) {
  const auto semi = raw.find(';');
  if (semi == std::string_view::npos) return std::nullopt;
  std::string_view head = raw.substr(0, semi);
  uint64_t fields[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    const auto comma = head.find(',');
    if (comma == std::string_view::npos && i < 2) return std::nullopt;
    const std::string_view f = head.substr(0, comma);
    if (!parse_u64(f, fields[i])) return std::nullopt;
    head = comma == std::string_view::npos ? std::string_view() : head.substr(comma + 1);
  }
  KmsgRecord r;
  r.facility = static_cast<int>((fields[0] >> 3) & 0xffff);
  r.level = static_cast<int>(fields[0] & 7);
  r.seq = fields[1];
  r.ts_usec = fields[2];
  std::string_view msg = raw.substr(semi + 1);
  if (auto nl = msg.find('\n'); nl != std::string_view::npos) msg = msg.substr(0, nl);  // continuation lines follow
  r.message = std::string(msg);
  return r;
}

XidParse parse_xid(std::string_view message, XidLine& out) {
  static constexpr std::string_view kTag = "NVRM: Xid";
  const auto at = message.find(kTag);
  if (at == std::string_view::npos) return XidParse::kNotXid;
  std::string_view rest = message.substr(at + kTag.size());
  // " (BUS): CODE, ..."
  const auto open = rest.find('(');
  const auto close = rest.find("):");
  if (open == std::string_view::npos || close == std::string_view::npos || close < open || trim(rest.substr(0, open)) != "")
    return XidParse::kMalformed;
  XidLine x;
  x.pci_bus_id = normalize_bus_id(rest.substr(open + 1, close - open - 1));
  if (x.pci_bus_id.empty()) return XidParse::kMalformed;
  rest = rest.substr(close + 2);
  uint64_t code = 0;
  if (!parse_u64(next_field(rest), code) || code == 0 || code > 65535) return XidParse::kMalformed;
  x.xid = static_cast<int>(code);
  // Optional "pid=N" (or '<unknown>') and "name=..." fields, then the text.
  std::string_view probe = rest;
  std::string_view f = next_field(probe);
  if (f.rfind("pid=", 0) == 0) {
    uint64_t pid = 0;
    if (parse_u64(f.substr(4), pid) && pid > 0 && pid < (1u << 22)) x.pid = static_cast<int>(pid);
    rest = probe;
    f = next_field(probe);
  }
  if (f.rfind("name=", 0) == 0) {
    const auto name = f.substr(5);
    if (name != "<unknown>") x.name = std::string(name.substr(0, 64));
    rest = probe;
  }
  x.detail = std::string(trim(rest).substr(0, kMaxDetail));
  out = std::move(x);
  return XidParse::kXid;
}

std::string_view xid_meaning(int xid) {
  switch (xid) {
    case 13: return "graphics engine exception: usually the application (illegal memory access, assert)";
    case 31: return "GPU memory page fault: usually the application touched an invalid address";
    case 43: return "GPU stopped processing: a channel was reset after a fault";
    case 45: return "preemptive cleanup: the GPU work of a process that ended or faulted was torn down";
    case 48: return "double-bit ECC error: uncorrectable memory error, the GPU needs a reset";
    case 61: return "internal micro-controller breakpoint or warning (driver or firmware)";
    case 62: return "internal micro-controller halt: the GPU needs a reset";
    case 63: return "ECC page retirement or row remapping recorded: reset the GPU to apply it";
    case 64: return "ECC page retirement or row remapping failed: the GPU needs service";
    case 74: return "NVLink error: a link went down or saw errors";
    case 79: return "GPU has fallen off the bus: unreachable over PCIe, the node needs attention";
    case 92: return "high single-bit ECC error rate";
    case 94: return "contained ECC error: the affected application was stopped, others go on";
    case 95: return "uncontained ECC error: every application on the GPU is affected, reset needed";
    case 119: return "GSP RPC timeout: the GPU's firmware stopped answering";
    case 120: return "GSP error: the GPU's firmware failed";
    default: return "";
  }
}

std::string driver_bus_id(std::string_view pci_address) { return normalize_bus_id(pci_address); }

std::vector<DetectedEvent> XidTracker::on_message(std::string_view message, double now_unix,
                                                  const std::vector<XidRank>& ranks,
                                                  const std::map<std::string, int>& gpu_index_by_pci) {
  XidLine x;
  const XidParse p = parse_xid(message, x);
  if (p == XidParse::kNotXid) return {};
  {
    std::lock_guard lock(mu_);
    if (p == XidParse::kMalformed) {
      ++counts_.malformed;
      return {};
    }
    const std::pair<std::string, std::string> key{x.pci_bus_id, std::to_string(x.xid)};
    if (counts_.errors.size() >= kMaxXidSeries && !counts_.errors.count(key)) {
      ++counts_.dropped;
      return {};
    }
    ++counts_.errors[key];
  }
  // The ranks it hits: the process the driver named, else every rank on that GPU.
  std::vector<const XidRank*> hit;
  std::string matched_by;
  for (const auto& r : ranks)
    if (x.pid > 0 && r.pid == x.pid) hit.push_back(&r);
  if (!hit.empty()) {
    matched_by = "pid";
  } else if (auto g = gpu_index_by_pci.find(x.pci_bus_id); g != gpu_index_by_pci.end()) {
    for (const auto& r : ranks)
      if (r.gpu_index >= 0 && r.gpu_index == g->second) hit.push_back(&r);
    if (!hit.empty()) matched_by = "gpu_index";
  }
  const std::string meaning(xid_meaning(x.xid));
  std::string head = "GPU " + x.pci_bus_id + " reported Xid " + std::to_string(x.xid);
  head += meaning.empty() ? "" : " (" + meaning + ")";
  nlohmann::json ranks_json = nlohmann::json::array();
  for (const auto* r : hit) ranks_json.push_back({{"job_id", r->job_id}, {"rank", r->rank}, {"pid", r->pid}});
  nlohmann::json evidence = {{"pci_bus_id", x.pci_bus_id}, {"xid", x.xid},         {"meaning", meaning},
                             {"detail", x.detail},         {"ranks", ranks_json},  {"matched_by", matched_by}};
  if (x.pid > 0) evidence["pid"] = x.pid;
  if (!x.name.empty()) evidence["process_name"] = x.name;
  if (auto g = gpu_index_by_pci.find(x.pci_bus_id); g != gpu_index_by_pci.end()) evidence["gpu_index"] = g->second;

  std::vector<DetectedEvent> out;
  auto make = [&](const XidRank* r) {
    DetectedEvent ev;
    ev.time = now_unix;
    ev.kind = EventKind::kXid;
    ev.device = x.pci_bus_id;
    ev.evidence = evidence;
    if (r) {
      ev.job_id = r->job_id;
      ev.rank = r->rank;
      ev.summary = head + ": rank " + std::to_string(r->rank) + " of job " + r->job_id + " (pid " +
                   std::to_string(r->pid) + ") runs on it";
    } else {
      ev.summary = head + ": no tracked rank runs on it";
    }
    out.push_back(std::move(ev));
  };
  if (hit.empty()) make(nullptr);
  for (const auto* r : hit) make(r);
  return out;
}

void XidTracker::count_lost(uint64_t n) {
  std::lock_guard lock(mu_);
  counts_.lost += n;
}

XidCounts XidTracker::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

}  // namespace argus::kmsg
