// Attaches probes once per distinct library file (device + inode), whichever
// process maps it and whatever its name or mount namespace, and detaches them
// once no process maps the file any more.
//
// A mapped file is opened safely (procfs/mapped_file.h) on the event loop; its
// ELF is parsed, within caps, on a worker thread; the probes are attached back
// on the event loop through the same fd, so they land on the inode that was
// checked. Every refusal is a counted skip, every cap a counted refusal.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "userspace/common/defaults.h"
#include "userspace/discovery/discovery.h"
#include "userspace/elf/elf_symbols.h"
#include "userspace/model/snapshot.h"
#include "userspace/probes/bpf_backend.h"
#include "userspace/probes/link_reaper.h"
#include "userspace/procfs/mapped_file.h"
#include "userspace/python/py_runtime.h"

namespace argus {

struct ProbeManagerOptions {
  std::string proc_root = kDefaultProcRoot;
  ProbeSet set = ProbeSet::Default;
  // A file no live process maps keeps its probes this long (seconds).
  double release_grace_seconds = kDefaultProbeReleaseSeconds;
  // Parse on a worker thread (the agent); false parses inside consider() (tests).
  bool parse_in_background = true;
  // Files opened and waiting for the parser; more are skipped and retried later.
  size_t max_pending_parses = 64;
  elf::ReadOptions elf{.include_symtab = false};  // the NCCL and CUDA APIs are exported
  bool python_gc = true;  // probe Python interpreters' collectors (off: GC counts by polling only)
  AgentCounters* counters = nullptr;  // files skipped (argus_agent_discovery_skips_total)
};

// What the probes cost now, for /metrics.
struct ProbeStats {
  std::map<std::string, uint64_t> files;          // library kind -> files with probes now
  std::map<std::string, uint64_t> probes;         // library kind -> probes attached now
  std::map<std::string, uint64_t> attach_errors;  // library kind -> failed attaches, ever
  uint64_t files_released = 0;                    // files whose probes were detached, ever
  uint64_t files_known = 0;                       // files remembered (probed or not)
  uint64_t usdt_slots_used = 0;                   // USDT spec slots our producers hold
  uint64_t usdt_slots_limit = 0;                  // 0: unknown
  uint64_t probes_detaching = 0;                  // released, still being detached
  std::map<std::string, uint64_t> python_gc_files;  // GC anchor probed -> interpreter files now
  uint64_t python_gc_unprobed_files = 0;          // interpreter files with no usable GC anchor, ever
  // library kind -> for each file whose uprobes were attached: the time from its
  // first sight in a process's maps to the probes being live (log2 ns buckets).
  // The first process's calls in that window are not seen.
  std::map<std::string, LaunchTiming> attach_delay;
};

class ProbeManager final : public LibraryProber {
 public:
  ProbeManager(BpfAttach& loader, ProbeManagerOptions opts);
  ~ProbeManager() override;
  ProbeManager(const ProbeManager&) = delete;
  ProbeManager& operator=(const ProbeManager&) = delete;

  // The kind of a file already parsed; None while it is still being parsed
  // (complete_parses() names the process again once it is done).
  LibraryKind consider(int pid, const procfs::MapEntry& mapping) override;

  // Event loop: attaches the probes of every finished parse. Returns the
  // processes that map those libraries, to be looked at again now.
  std::vector<int> complete_parses();
  bool parses_pending() const { return pending_ > 0; }  // event loop only
  // Event loop: a rank (tracked) maps these files: their Python collectors are
  // probed now, once per file. Interpreters only ranks map are probed.
  void attach_python_gc_for(int pid);
  // Event loop: forgets processes that are gone; detaches and forgets the files
  // that no live process has mapped for the grace period.
  void sweep(double now_s, const std::set<int>& alive_pids);
  // Blocks until every queued parse is done and every released probe detached (tests).
  void wait_idle();

  ProbeStats stats() const;  // any thread

 private:
  using FileKey = std::tuple<uint32_t, uint32_t, uint64_t>;  // dev major, minor, inode
  struct Parsed {
    FileKey key;
    std::shared_ptr<procfs::MappedFile> file;
    std::string name;  // the mapped path, for logs
    std::optional<elf::ParseResult<elf::SymbolTable>> symbols;
    std::optional<elf::ParseResult<std::vector<elf::UsdtNote>>> notes;  // producers and interpreters
    std::optional<Result<python::PyInterpreterFile>> python;  // interpreters only
  };
  struct Library {
    bool pending = true;
    LibraryKind kind = LibraryKind::None;
    std::string name;
    std::chrono::steady_clock::time_point first_seen;  // in a process's maps (the attach delay starts)
    std::set<int> users;          // pids seen mapping it
    double unused_since = -1;     // when the last user went; -1 while used
    std::vector<Link> links;       // uprobes (a uprobe_multi link holds several)
    size_t uprobes = 0;            // probes on those links
    std::vector<Link> usdt_links;  // the GPU producer's USDT probes
    uint64_t usdt_slots = 0;
    std::string gc_anchor;         // Python: the GC anchor probed ("" while none)
    // Python: what the GC probes need, kept until a rank maps the file (a
    // plain Python's collections never trap); dropped once attached.
    struct PendingGc {
      std::shared_ptr<procfs::MappedFile> file;
      Result<python::PyInterpreterFile> py;
      std::optional<elf::ParseResult<std::vector<elf::UsdtNote>>> notes;
    };
    std::unique_ptr<PendingGc> pending_gc;
  };

  void skip(SkipReason reason);
  static void parse(Parsed& job, const elf::ReadOptions& ropts, bool python_gc);
  void worker_loop();
  void finish(Parsed& done);
  static LibraryKind told_kind(const Library& lib);
  void attach_probes(const elf::SymbolTable& symbols, const std::string& path, Library& lib);
  void attach_gpu_producer(const Parsed& done, Library& lib);
  void attach_python_gc(Library& lib);
  bool reserve_usdt_slots(uint64_t slots, const std::string& what, const std::string& name);
  void release(Library& lib);

  BpfAttach& loader_;
  ProbeManagerOptions opts_;
  std::map<FileKey, Library> files_;  // event loop only
  std::set<std::pair<FileKey, int>> refused_;  // (file, pid) whose mapped path was refused; event loop only
  size_t pending_ = 0;                // files_ entries still being parsed
  std::mutex usdt_mu_;                // libbpf's USDT manager: attaches and detaches one at a time
  LinkReaper reaper_{usdt_mu_};       // destroyed before files_: drains what was handed to it

  // Worker hand-off.
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Parsed> todo_, done_;
  size_t in_progress_ = 0;
  bool stopping_ = false;
  std::thread worker_;

  mutable std::mutex counters_mu_;
  ProbeStats stats_;
};

}  // namespace argus
