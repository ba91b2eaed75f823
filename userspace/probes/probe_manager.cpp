#include "userspace/probes/probe_manager.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "userspace/elf/elf_symbols.h"

namespace argus {
namespace {

// A deleted (replaced) file is still reachable through map_files.
std::string open_path(const std::string& proc_root, int pid, const procfs::MapEntry& m) {
  if (m.deleted) {
    char range[64];
    std::snprintf(range, sizeof(range), "map_files/%lx-%lx", static_cast<unsigned long>(m.start),
                  static_cast<unsigned long>(m.end));
    return procfs::pid_path(proc_root, pid, range);
  }
  return procfs::root_path(proc_root, pid, m.path);
}

}  // namespace

ProbeManager::ProbeManager(BpfBackend& loader, std::string proc_root, ProbeSet set, Discovery* skips_sink)
    : loader_(loader), proc_root_(std::move(proc_root)), set_(set), skips_(skips_sink) {}

void ProbeManager::skip(const std::string& reason) {
  if (skips_ != nullptr) skips_->count_skip(reason);
}

LibraryKind ProbeManager::consider(int pid, const procfs::MapEntry& mapping) {
  const FileKey key{mapping.dev_major, mapping.dev_minor, mapping.inode};
  auto it = files_.find(key);
  if (it != files_.end()) return it->second.kind;
  Library lib;
  const LibraryKind kind = probe_file(pid, mapping, lib);
  if (kind == LibraryKind::None && lib.path.empty()) return kind;  // transient: try again later
  files_.emplace(key, std::move(lib));
  return kind;
}

LibraryKind ProbeManager::probe_file(int pid, const procfs::MapEntry& mapping, Library& lib) {
  const std::string path = open_path(proc_root_, pid, mapping);
  elf::ReadOptions ropts;
  ropts.include_symtab = false;  // the NCCL and CUDA APIs are exported: .dynsym is enough
  auto symbols = elf::read_symbols(path, ropts);
  if (!symbols.ok()) {
    if (access(path.c_str(), F_OK) != 0 && (errno == ENOENT || errno == ESRCH)) {
      skip("vanished");  // the process went away mid-attach: another mapper may come
      return LibraryKind::None;
    }
    skip("unreadable_elf");
    spdlog::debug("not probing {}: {}", path, symbols.error());
    lib.path = path;  // remembered as not probeable
    return LibraryKind::None;
  }
  lib.path = path;
  lib.kind = classify_library(*symbols);
  const bool gpu_producer = symbols->find(kGpuProducerSymbol) != nullptr;
  if (gpu_producer) attach_gpu_producer(path, lib);
  if (lib.kind == LibraryKind::None) {
    if (gpu_producer && !lib.links.empty()) lib.kind = LibraryKind::GpuActivity;
    return lib.kind;
  }

  const std::string label = library_kind_name(lib.kind);
  size_t ok = 0, failed = 0;
  for (const auto& spec : plan_probes(*symbols, lib.kind, set_)) {
    auto link = loader_.attach_uprobe(path, spec);
    if (link.ok()) {
      lib.links.push_back(std::move(*link));
      ++ok;
    } else {
      ++failed;
      spdlog::warn("probe attach failed: {}", link.error());
    }
  }
  {
    std::lock_guard lock(counters_mu_);
    attached_[label] += ok;
    attach_errors_[label] += failed;
  }
  if (ok == 0 && failed > 0 && access(path.c_str(), F_OK) != 0) {
    // The file vanished between reading and attaching: forget it so a later mapper retries.
    skip("vanished");
    lib.path.clear();
    lib.kind = LibraryKind::None;
    return LibraryKind::None;
  }
  spdlog::info("attached {} probes ({} failed) to {} library {} (first seen in pid {}, dev {}:{} inode {})", ok,
               failed, label, mapping.path, pid, mapping.dev_major, mapping.dev_minor, mapping.inode);
  return lib.kind;
}

// The USDT hand-off of a GPU-activity producer: both probes or none.
void ProbeManager::attach_gpu_producer(const std::string& path, Library& lib) {
  auto batch = loader_.attach_gpu_usdt(path, false);
  auto names = loader_.attach_gpu_usdt(path, true);
  const bool ok = batch.ok() && names.ok();
  if (ok) {
    lib.links.push_back(std::move(*batch));
    lib.links.push_back(std::move(*names));
    spdlog::info("attached GPU activity probes to {}", path);
  } else {
    spdlog::warn("GPU activity probes not attached: {}", batch.ok() ? names.error() : batch.error());
  }
  std::lock_guard lock(counters_mu_);
  if (ok)
    attached_["gpu"] += 2;
  else
    attach_errors_["gpu"] += 1;
}

std::map<std::string, uint64_t> ProbeManager::attached() const {
  std::lock_guard lock(counters_mu_);
  return attached_;
}

std::map<std::string, uint64_t> ProbeManager::attach_errors() const {
  std::lock_guard lock(counters_mu_);
  return attach_errors_;
}

}  // namespace argus
