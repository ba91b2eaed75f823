#include "rank_identity.h"

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

std::string sanitize_job_id(std::string_view raw) {
  std::string out;
  for (char c : raw) {
    if (out.size() == kMaxJobIdLength) break;
    if (c >= 0x20 && c <= 0x7e) out += c;
  }
  return out;
}

RankIdentity identity_from_environ(const std::map<std::string, std::string>& env) {
  RankIdentity id;
  for (const char* key : {"ARGUS_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    const std::string* v = lookup(env, key);
    if (!v) continue;
    std::string clean = sanitize_job_id(*v);
    if (clean.empty()) continue;  // nothing printable: try the next source
    id.job_id = std::move(clean);
    id.job_source = key;
    break;
  }
  if (id.job_id.empty()) {
    const std::string* addr = lookup(env, "MASTER_ADDR");
    const std::string* port = lookup(env, "MASTER_PORT");
    if (addr && port) {
      id.job_id = short_hash(*addr + ":" + *port);
      id.job_source = "MASTER_ADDR:MASTER_PORT";
    }
  }
  id.rank = first_int(env, {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, &id.rank_source);
  id.local_rank = first_int(env, {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"});
  id.world_size = first_int(env, {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"});
  id.local_world_size = first_int(env, {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"});
  return id;
}

}  // namespace argus
