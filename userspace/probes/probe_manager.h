// Attaches probes once per distinct library file (device + inode), whichever
// process maps it and whatever its name or mount namespace.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "userspace/discovery/discovery.h"
#include "userspace/probes/bpf_loader.h"

namespace argus {

class ProbeManager final : public LibraryProber {
 public:
  ProbeManager(BpfBackend& loader, std::string proc_root, ProbeSet set, Discovery* skips_sink = nullptr);

  LibraryKind consider(int pid, const procfs::MapEntry& mapping) override;
  void set_skip_sink(Discovery* d) { skips_ = d; }

  std::map<std::string, uint64_t> attached() const;       // library kind -> probes attached
  std::map<std::string, uint64_t> attach_errors() const;  // library kind -> failed attaches

 private:
  using FileKey = std::tuple<uint32_t, uint32_t, uint64_t>;  // dev major, minor, inode
  struct Library {
    LibraryKind kind = LibraryKind::None;
    std::string path;  // as first opened
    std::vector<Link> links;
  };
  void skip(const std::string& reason);
  void attach_gpu_producer(const std::string& path, Library& lib);
  LibraryKind probe_file(int pid, const procfs::MapEntry& mapping, Library& lib);

  BpfBackend& loader_;
  std::string proc_root_;
  ProbeSet set_;
  Discovery* skips_;
  std::map<FileKey, Library> files_;
  mutable std::mutex counters_mu_;
  std::map<std::string, uint64_t> attached_;
  std::map<std::string, uint64_t> attach_errors_;
};

}  // namespace argus
