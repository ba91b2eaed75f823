#include "userspace/model/rank_identity.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>

namespace argus {
namespace {

const std::string* lookup(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// Whole-string decimal in [0, 2^31): a launcher never sets anything else, so
// anything else is garbage and must not become a rank label.
std::optional<int> strict_int(const std::string& s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  if (v < 0 || v > std::numeric_limits<int32_t>::max()) return std::nullopt;
  return static_cast<int>(v);
}

// The first usable integer among the keys; its key goes to *source.
int first_int(const std::map<std::string, std::string>& env, std::initializer_list<const char*> keys,
              std::string* source = nullptr) {
  for (const char* key : keys) {
    const std::string* v = lookup(env, key);
    if (!v) continue;
    if (auto n = strict_int(*v)) {
      if (source) *source = key;
      return *n;
    }
  }
  return -1;
}

}  // namespace

std::string short_hash(std::string_view s) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64 offset basis
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;  // FNV-1a 64 prime
  }
  uint32_t folded = static_cast<uint32_t>(h >> 32) ^ static_cast<uint32_t>(h);
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", folded);
  return std::string(buf, 8);
}

std::string sanitize_env_value(std::string_view raw, size_t max_length) {
  std::string out;
  for (char c : raw) {
    if (out.size() == max_length) break;
    if (c >= 0x20 && c <= 0x7e) out += c;
  }
  return out;
}

std::string sanitize_job_id(std::string_view raw) { return sanitize_env_value(raw, kMaxJobIdLength); }

std::string sanitize_device_list(std::string_view raw) {
  std::string out = sanitize_env_value(raw, kMaxVisibleDevicesLength + 1);
  if (out.size() <= kMaxVisibleDevicesLength) return out;
  // Cut at the last ',' that the first kMaxVisibleDevicesLength + 1 chars hold: an entry
  // ending right at the cap is whole.
  const auto comma = out.rfind(',', kMaxVisibleDevicesLength);
  out.resize(comma == std::string::npos ? 0 : comma);
  return out;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool every_char(std::string_view s, bool (*pred)(char)) {
  for (char c : s)
    if (!pred(c)) return false;
  return true;
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_uuid_char(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-'; }
bool is_mig_char(char c) { return is_uuid_char(c) || c == '/' || (c >= 'G' && c <= 'Z'); }

std::optional<int> small_index(std::string_view s) {
  if (s.empty() || s.size() > 9 || !every_char(s, is_digit)) return std::nullopt;
  int v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v, 10);
  return v;
}

// One entry, or nullopt where CUDA would stop.
std::optional<GpuRef> parse_entry(std::string_view e, bool allow_mig_pair) {
  GpuRef g;
  if (auto n = small_index(e)) {
    g.form = GpuRef::Form::Index;
    g.index = *n;
    return g;
  }
  auto has_prefix = [&](std::string_view p) { return e.size() > p.size() && e.substr(0, p.size()) == p; };
  if (has_prefix("GPU-") && every_char(e.substr(4), is_uuid_char)) {
    g.form = GpuRef::Form::Uuid;
    g.id = std::string(e);
    return g;
  }
  if (has_prefix("MIG-") && every_char(e.substr(4), is_mig_char)) {
    g.form = GpuRef::Form::Mig;
    g.id = std::string(e);
    return g;
  }
  if (allow_mig_pair) {
    const auto colon = e.find(':');
    if (colon != std::string_view::npos && small_index(e.substr(0, colon)) && small_index(e.substr(colon + 1))) {
      g.form = GpuRef::Form::Mig;
      g.id = std::string(e);
      return g;
    }
  }
  return std::nullopt;
}

GpuRef pick(const std::vector<GpuRef>& list, int local_rank) {
  if (list.size() == 1) return list[0];
  if (local_rank >= 0 && static_cast<size_t>(local_rank) < list.size()) return list[static_cast<size_t>(local_rank)];
  return {};
}

}  // namespace

std::vector<GpuRef> parse_device_list(std::string_view list, bool allow_mig_pair) {
  std::vector<GpuRef> out;
  while (true) {
    const auto comma = list.find(',');
    auto entry = parse_entry(trim(list.substr(0, comma)), allow_mig_pair);
    if (!entry) break;
    out.push_back(std::move(*entry));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

GpuRef rank_gpu(std::optional<std::string_view> cuda_visible_devices,
                std::optional<std::string_view> nvidia_visible_devices, int local_rank) {
  GpuRef none;
  none.form = GpuRef::Form::None;
  // What the container runtime exposed: nullopt = the host's GPUs, unnarrowed.
  std::optional<std::vector<GpuRef>> exposed;
  if (nvidia_visible_devices) {
    const std::string_view v = trim(*nvidia_visible_devices);
    if (v == "none") return none;
    if (!v.empty() && v != "all" && v != "void") {
      exposed = parse_device_list(v, /*allow_mig_pair=*/true);
      if (exposed->empty()) return {};  // not a list we can read
    }
  }
  if (cuda_visible_devices) {
    const auto visible = parse_device_list(*cuda_visible_devices);
    if (visible.empty()) return none;  // "", "-1", garbage: CUDA sees no device
    GpuRef g = pick(visible, local_rank);
    if (g.form != GpuRef::Form::Index || !exposed) return g;
    if (static_cast<size_t>(g.index) < exposed->size()) return (*exposed)[static_cast<size_t>(g.index)];
    return {};
  }
  if (exposed) return pick(*exposed, local_rank);
  GpuRef g;
  if (local_rank >= 0) {
    g.form = GpuRef::Form::Index;
    g.index = local_rank;
  }
  return g;
}

GpuRef rank_gpu_from_strings(const std::string& cuda_visible_devices, const std::string& nvidia_visible_devices,
                             int local_rank) {
  auto opt = [](const std::string& s) { return s.empty() ? std::nullopt : std::optional<std::string_view>(s); };
  return rank_gpu(opt(cuda_visible_devices), opt(nvidia_visible_devices), local_rank);
}

RankIdentity identity_from_environ(const std::map<std::string, std::string>& env) {
  RankIdentity id;
  auto take_job = [&](std::string value, const std::string& source) {
    if (value.empty()) return false;
    id.job_id = std::move(value);
    id.job_source = source;
    return true;
  };
  auto clean = [&](const char* key) {
    const std::string* v = lookup(env, key);
    return v ? sanitize_job_id(*v) : std::string();
  };
  std::string run_id = clean("TORCHELASTIC_RUN_ID");
  if (run_id == "none") run_id.clear();  // torchrun without --rdzv-id: says nothing
  std::string slurm = clean("SLURM_JOB_ID");
  std::string slurm_source = "SLURM_JOB_ID";
  if (!slurm.empty()) {
    if (std::string step = clean("SLURM_STEP_ID"); !step.empty()) {
      slurm = sanitize_job_id(slurm + "." + step);
      slurm_source = "SLURM_JOB_ID.SLURM_STEP_ID";
    }
  }
  if (!take_job(clean("ARGUS_JOB_ID"), "ARGUS_JOB_ID") && !take_job(std::move(run_id), "TORCHELASTIC_RUN_ID") &&
      !take_job(std::move(slurm), slurm_source) && !take_job(clean("PMIX_NAMESPACE"), "PMIX_NAMESPACE")) {
    const std::string* addr = lookup(env, "MASTER_ADDR");
    const std::string* port = lookup(env, "MASTER_PORT");
    if (addr && port) take_job(short_hash(*addr + ":" + *port), "MASTER_ADDR:MASTER_PORT");
  }
  id.rank = first_int(env, {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, &id.rank_source);
  id.local_rank = first_int(env, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"});
  id.world_size = first_int(env, {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS"});
  id.local_world_size =
      first_int(env, {"LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"});
  if (const std::string* v = lookup(env, "CUDA_VISIBLE_DEVICES")) id.cuda_visible_devices = sanitize_device_list(*v);
  if (const std::string* v = lookup(env, "NVIDIA_VISIBLE_DEVICES")) id.nvidia_visible_devices = sanitize_device_list(*v);
  return id;
}

}  // namespace argus
