#include "userspace/procfs/pod_gpu_uuid.h"

#include <dirent.h>

#include <algorithm>
#include <memory>

#include "userspace/procfs/procfs.h"

namespace argus::procfs {
namespace {

constexpr size_t kMaxGpus = 64;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool is_uuid_body(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    const char c = s[i];
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (dash ? c != '-' : !hex) return false;
  }
  return true;
}

bool is_lower_hex(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// "0000:3b:00.0": a PCI address as the driver names its directories (the
// domain has 4 digits, more only past 0xffff, as on some cloud VMs).
bool is_pci_address(std::string_view s) {
  const size_t c1 = s.find(':');
  if (c1 < 4 || c1 > 8 || s.size() != c1 + 8 || s[c1 + 3] != ':' || s[c1 + 6] != '.') return false;
  return is_lower_hex(s.substr(0, c1)) && is_lower_hex(s.substr(c1 + 1, 2)) && is_lower_hex(s.substr(c1 + 4, 2)) &&
         is_lower_hex(s.substr(c1 + 7, 1));
}

}  // namespace

std::optional<std::string> gpu_uuid_from_information(std::string_view text) {
  constexpr std::string_view kKey = "GPU UUID:";
  for (size_t pos = 0; pos < text.size();) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.starts_with(kKey)) continue;
    const std::string_view v = trim(line.substr(kKey.size()));
    if (v.starts_with("GPU-") && is_uuid_body(v.substr(4))) return std::string(v);
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<std::string> gpu_uuids_by_index(const std::string& proc_root) {
  const std::string dir = proc_root + "/driver/nvidia/gpus";
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir.c_str()), ::closedir);
  if (!d) return {};
  std::vector<std::string> buses;
  while (const dirent* e = ::readdir(d.get())) {
    if (is_pci_address(e->d_name) && buses.size() < kMaxGpus) buses.emplace_back(e->d_name);
  }
  // Bus order: by domain (a longer domain is a larger one), then the fixed-width rest.
  std::sort(buses.begin(), buses.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::vector<std::string> out;
  for (const auto& bus : buses) {
    auto text = read_file(dir + "/" + bus + "/information", 16 << 10);
    out.push_back(text.ok() ? gpu_uuid_from_information(*text).value_or("") : "");
  }
  return out;
}

}  // namespace argus::procfs
