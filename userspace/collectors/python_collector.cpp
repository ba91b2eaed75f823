#include "userspace/collectors/python_collector.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string_view>

#include "userspace/python/stack_groups.h"

namespace argus {
namespace {

// A rank that is no Python (most NCCL-only tools), or runs an interpreter the
// agent refuses, is looked at again this much later, in case it loads one.
constexpr double kLocateRetrySeconds = 30;

}  // namespace

PythonCollector::PythonCollector(BpfRankMaps& maps, RankFacts& facts, const Clock& clock, PythonOptions opts)
    : maps_(maps),
      facts_(facts),
      clock_(clock),
      opts_(std::move(opts)),
      locator_(opts_.proc_root),
      profiles_(python::ProfileOptions{.caps = opts_.counters}) {}

std::string PythonCollector::start_sampling(BpfEventStreams& streams) {
  // Stacks taken where an allocation ran out of memory come on the same ring
  // buffer, sampling or not.
  streams.set_py_sample_handler([this](const void* data, size_t size) { sampler_.on_record(data, size); });
  if (opts_.sample_hz == 0) return "";
  auto cpus = streams.start_python_sampling(opts_.sample_hz);
  if (!cpus.ok()) return cpus.error();
  sampling_ = true;
  spdlog::debug("sampling Python stacks at {} Hz on {} CPUs", opts_.sample_hz, *cpus);
  return "";
}

// The exported counts are the interpreter's own: polled here, or the probes'
// last snapshot, whichever is larger (they only grow).
void PythonCollector::refresh(double now, const std::vector<int>& live_pids) {
  const std::set<int> live(live_pids.begin(), live_pids.end());
  for (auto it = ranks_.begin(); it != ranks_.end();) {  // ended without an exit event seen here
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    maps_.forget_python_proc(static_cast<uint32_t>(it->first));
    sampler_.forget(it->first);
    it = ranks_.erase(it);
  }
  for (int pid : live_pids) refresh_rank(pid, ranks_[pid], now);
  profiles_.expire(clock_.monotonic_ns());
  std::lock_guard lock(mu_);
  stats_ = sampler_.stats();
}

void PythonCollector::refresh_rank(int pid, PyRank& pr, double now) {
  if (!pr.proc) {
    if (now < pr.next_try) return;
    auto located = locator_.locate(pid);
    if (!located.ok()) {
      sampling_status(pid, located.error(), nullptr);
      pr.next_try = now + kLocateRetrySeconds;
      if (!pr.said && located.failure().kind != LocateError::kNotPython) {
        spdlog::info("pid {}: Python not followed: {}", pid, located.error());
        pr.said = true;
      }
      return;
    }
    pr.proc = std::move(*located);
    pr.mem = python::process_memory(pid, opts_.proc_root);
  }
  const python::PyProcess& p = *pr.proc;
  if (pr.gc_stats_addr == 0) pr.gc_stats_addr = python::gc_stats_address(p, *pr.mem);
  if (pr.gc_stats_addr != 0 && !pr.configured) {
    argus_py_proc cfg = python::bpf_config(p, pr.gc_stats_addr);
    if (p.file->gc_anchor == "usdt") cfg.flags |= ARGUS_PY_F_GC_BY_USDT;
    pr.configured = maps_.set_python_proc(static_cast<uint32_t>(pid), cfg);
    if (pr.configured)
      spdlog::info("pid {}: Python {} (GC anchor {}{})", pid, p.file->layout.version.str(), p.file->gc_anchor,
                   opts_.gc_probes ? "" : ", probes off: polled");
    sampling_status(pid, pr.configured ? "" : "cannot write the py_procs map", pr.configured ? &p : nullptr);
  }
  if (pr.gc_stats_addr == 0) return;  // not initialised yet: nothing to count
  std::array<uint64_t, 3> counts{};
  if (auto polled = python::read_gc_collections(p, *pr.mem))
    for (size_t g = 0; g < 3; ++g) counts[g] = static_cast<uint64_t>(std::max<int64_t>(0, (*polled)[g]));
  facts_.set_python_gc(pid, p.file->layout.version.str(), opts_.gc_probes ? p.file->gc_anchor : "none", counts);
  take_probed_gc(pid);
}

// The probes' newest absolute counters for a rank, folded in (larger wins).
void PythonCollector::take_probed_gc(int pid) {
  auto it = ranks_.find(pid);
  if (it == ranks_.end() || !it->second.proc) return;
  auto snap = maps_.read_python_gc(static_cast<uint32_t>(pid));
  if (!snap || snap->updated_ns == 0) return;
  std::array<uint64_t, 3> counts{};
  for (size_t g = 0; g < 3; ++g) counts[g] = static_cast<uint64_t>(std::max<int64_t>(0, snap->collections[g]));
  facts_.set_python_gc(pid, "", "", counts);
}

namespace {

// torch.utils.data's iterators (_SingleProcessDataLoaderIter and
// _MultiProcessingDataLoaderIter) share _BaseDataLoaderIter.__next__: the
// frame every wait for a batch, and every batch made in the main thread, is under.
bool in_dataloader_next(const python::PyFrame& f) {
  const std::string_view q = f.qualname;
  constexpr std::string_view kNext = "DataLoaderIter.__next__";
  return q.size() >= kNext.size() && q.substr(q.size() - kNext.size()) == kNext &&
         f.file.find("torch/utils/data/") != std::string::npos;
}

}  // namespace

bool PythonCollector::has_initialised_python() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const auto& kv) { return kv.second.proc && kv.second.gc_stats_addr != 0; });
}

void PythonCollector::poll_input(double now) {
  for (auto& [pid, pr] : ranks_) {
    if (!pr.proc || pr.gc_stats_addr == 0) continue;  // not located, or not initialised yet
    if (!pr.look) pr.look = std::make_unique<python::MainThreadLook>(in_dataloader_next);
    if (!pr.workers)
      pr.workers = std::make_unique<DataLoaderWorkers>(opts_.proc_root, std::max(5.0, opts_.window_seconds),
                                                       sysconf(_SC_CLK_TCK));
    pr.workers->sample(pid, now);
    // The iterator sits near the loop's top, under the whole step's depth.
    const auto waiting = pr.look->inside(*pr.proc, *pr.mem, 256);
    if (!waiting) continue;
    pr.input.emplace_back(now, *waiting);
    while (!pr.input.empty() && pr.input.front().first < now - std::max(5.0, opts_.window_seconds)) pr.input.pop_front();
    InputWaitView v;
    const std::array<double, 3> spans{2.0, 5.0, std::max(5.0, opts_.window_seconds)};
    for (size_t i = 0; i < spans.size(); ++i) {
      v.spans[i].seconds = spans[i];
      for (const auto& [t, in] : pr.input) {
        if (t < now - spans[i]) continue;
        ++v.spans[i].polls;
        v.spans[i].in_input += in ? 1 : 0;
      }
      v.spans[i].workers = pr.workers->rates(spans[i]);
    }
    facts_.set_input_polls(pid, v);
  }
}

void PythonCollector::rank_ended(int pid) {
  take_probed_gc(pid);
  maps_.forget_python_proc(static_cast<uint32_t>(pid));
  ranks_.erase(pid);
  sampler_.forget(pid);
  std::lock_guard lock(mu_);
  status_.erase(pid);
}

// The sampler's side of a rank refresh() has located: its frames can be named
// from now on (the py_procs entry that makes BPF sample it is written once the
// interpreter is initialised), or why not.
void PythonCollector::sampling_status(int pid, const std::string& why_not, const python::PyProcess* p) {
  // Named even without sampling: a stack taken where an allocation ran out of memory.
  if (p != nullptr && !sampler_.has_process(pid)) sampler_.add_process(pid, python::make_frame_resolver(*p));
  if (!sampling_) return;
  std::lock_guard lock(mu_);
  status_[pid] = why_not;
}

Result<python::PyStackDump, python::LocateFailure> PythonCollector::stacks(int pid) const {
  auto p = locator_.locate(pid);
  if (!p) return p.failure();
  auto mem = python::process_memory(pid, opts_.proc_root);
  auto dump = python::dump_stacks(*p, *mem, opts_.proc_root);
  if (!dump) return make_error(LocateError::kUnreadable, dump.error());
  return std::move(*dump);
}

Result<std::string> PythonCollector::profile(int pid, double seconds) const {
  if (!sampling_)
    return make_error(opts_.sample_hz == 0 ? "Python stack sampling is off (--python-sample-hz 0)"
                                           : "Python stack sampling could not start on this node");
  if (!profiles_.has(pid)) {  // an exited rank's samples stay while the rank is listed
    std::lock_guard lock(mu_);
    auto st = status_.find(pid);
    if (st == status_.end()) return make_error("no Python interpreter located in pid " + std::to_string(pid) + " (yet)");
    if (!st->second.empty()) return make_error("pid " + std::to_string(pid) + " is not sampled: " + st->second);
  }
  const uint64_t now = clock_.monotonic_ns();
  const auto span = static_cast<uint64_t>(seconds * 1e9);
  return profiles_.folded(pid, now > span ? now - span : 0);
}

nlohmann::json PythonCollector::grouped_stacks(const std::vector<std::pair<int, int>>& rank_pids) const {
  return python::grouped_stacks_of(rank_pids, locator_, opts_.proc_root);
}

void PythonCollector::add_evidence(DetectedEvent& ev, const std::vector<int>& own, const std::vector<int>& peers,
                                   uint64_t since_ns) const {
  if (sampling_) python::add_python_evidence(ev, profiles_, own, peers, since_ns);
}

nlohmann::json PythonCollector::newest_stack(int pid) const {
  auto stack = profiles_.newest(pid);
  if (!stack) return nullptr;
  const uint64_t now = clock_.monotonic_ns();
  return {{"frames", stack->frames},
          {"age_seconds", now > stack->ts_ns ? static_cast<double>(now - stack->ts_ns) / 1e9 : 0.0}};
}

python::PySampler::Stats PythonCollector::sampler_stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace argus
