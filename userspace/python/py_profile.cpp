#include "userspace/python/py_profile.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace argus::python {
namespace {

// Names come from the process: keep the folded format's separators out.
std::string clean(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (c == ';' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  return out;
}

std::string name_of(const PyFrame& f) { return clean(f.qualname.empty() ? f.function : f.qualname); }

}  // namespace

std::optional<RawSample> decode_py_sample(const void* data, size_t size) {
  constexpr size_t kHeader = offsetof(argus_py_sample, frames);
  if (data == nullptr || size < kHeader) return std::nullopt;
  argus_py_sample head{};
  std::memcpy(&head, data, kHeader);
  if (head.nframes > ARGUS_PY_SAMPLE_MAX_FRAMES || size < kHeader + head.nframes * sizeof(argus_py_sample_frame))
    return std::nullopt;
  RawSample s;
  s.tgid = head.tgid;
  s.tid = head.tid;
  s.ts_ns = head.ts_ns;
  s.flags = head.flags;
  s.frames.resize(head.nframes);
  if (head.nframes != 0)
    std::memcpy(s.frames.data(), static_cast<const char*>(data) + kHeader, head.nframes * sizeof(argus_py_sample_frame));
  return s;
}

std::string frame_label(const PyFrame& f) {
  if (f.line <= 0) return function_label(f);
  return name_of(f) + " (" + clean(f.file) + ":" + std::to_string(f.line) + ")";
}

std::string function_label(const PyFrame& f) { return name_of(f) + " (" + clean(f.file) + ")"; }

void ProfileStore::add(int pid, uint64_t ts_ns, const std::vector<PyFrame>& frames, bool truncated) {
  std::string key = truncated ? "[truncated]" : "";
  std::vector<std::string> functions;
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {  // root first
    if (!key.empty()) key += ';';
    key += frame_label(*it);
    std::string fn = function_label(*it);
    if (std::find(functions.begin(), functions.end(), fn) == functions.end()) functions.push_back(std::move(fn));
  }
  if (key.empty()) return;
  std::lock_guard lock(mu_);
  Rank& r = ranks_[pid];
  if (opts_.max_samples_per_rank == 0) {
    count_into(opts_.caps, Cap::kPythonSamples);
    return;
  }
  while (r.samples.size() >= opts_.max_samples_per_rank) {
    drop_front(r);
    count_into(opts_.caps, Cap::kPythonSamples);
  }
  auto [it, inserted] = r.stacks.try_emplace(std::move(key));
  if (inserted) it->second.functions = std::move(functions);
  ++it->second.refs;
  r.samples.push_back({ts_ns, &it->first});
}

void ProfileStore::drop_front(Rank& r) {
  const std::string* key = r.samples.front().key;
  r.samples.pop_front();
  auto it = r.stacks.find(*key);
  if (it != r.stacks.end() && --it->second.refs == 0) r.stacks.erase(it);
}

std::string ProfileStore::folded(int pid, uint64_t since_ns) const {
  std::map<std::string_view, uint64_t> counts;
  std::lock_guard lock(mu_);
  auto r = ranks_.find(pid);
  if (r == ranks_.end()) return "";
  for (const auto& s : r->second.samples)
    if (s.ts_ns >= since_ns) ++counts[*s.key];
  std::string out;
  for (const auto& [stack, n] : counts) {
    out.append(stack);
    out += ' ';
    out += std::to_string(n);
    out += '\n';
  }
  return out;
}

uint64_t ProfileStore::function_counts(int pid, uint64_t since_ns, std::map<std::string, uint64_t>* counts) const {
  std::lock_guard lock(mu_);
  auto r = ranks_.find(pid);
  if (r == ranks_.end()) return 0;
  uint64_t total = 0;
  std::map<const std::string*, uint64_t> per_stack;
  for (const auto& s : r->second.samples) {
    if (s.ts_ns < since_ns) continue;
    ++total;
    ++per_stack[s.key];
  }
  if (counts != nullptr) {
    for (const auto& [key, n] : per_stack) {
      auto it = r->second.stacks.find(*key);
      if (it == r->second.stacks.end()) continue;
      for (const auto& fn : it->second.functions) (*counts)[fn] += n;
    }
  }
  return total;
}

void ProfileStore::expire(uint64_t now_ns) {
  const auto keep = static_cast<uint64_t>(opts_.retention_seconds * 1e9);
  const uint64_t cutoff = now_ns > keep ? now_ns - keep : 0;
  std::lock_guard lock(mu_);
  for (auto it = ranks_.begin(); it != ranks_.end();) {
    Rank& r = it->second;
    while (!r.samples.empty() && r.samples.front().ts_ns < cutoff) drop_front(r);
    it = r.samples.empty() ? ranks_.erase(it) : std::next(it);
  }
}

void ProfileStore::retain(const std::set<int>& pids) {
  std::lock_guard lock(mu_);
  std::erase_if(ranks_, [&](const auto& kv) { return !pids.count(kv.first); });
}

bool ProfileStore::has(int pid) const {
  std::lock_guard lock(mu_);
  return ranks_.count(pid) != 0;
}

std::optional<ProfileStore::Newest> ProfileStore::newest(int pid) const {
  std::lock_guard lock(mu_);
  auto it = ranks_.find(pid);
  if (it == ranks_.end() || it->second.samples.empty()) return std::nullopt;
  const Sample& s = it->second.samples.back();
  Newest n;
  n.ts_ns = s.ts_ns;
  std::string_view key = *s.key;  // labels never hold ';' (frame_label)
  while (!key.empty()) {
    const size_t semi = key.find(';');
    n.frames.emplace_back(key.substr(0, semi));
    key = semi == std::string_view::npos ? std::string_view() : key.substr(semi + 1);
  }
  return n;
}

std::vector<FrameShare> compare_with_peers(const std::map<std::string, uint64_t>& rank_counts, uint64_t rank_total,
                                           const std::map<std::string, uint64_t>& peer_counts, uint64_t peer_total,
                                           size_t top, double min_share) {
  std::vector<FrameShare> out;
  if (rank_total == 0 || peer_total == 0) return out;
  for (const auto& [frame, n] : rank_counts) {
    FrameShare f;
    f.frame = frame;
    f.share = static_cast<double>(n) / static_cast<double>(rank_total);
    auto p = peer_counts.find(frame);
    f.peers_share = p == peer_counts.end() ? 0 : static_cast<double>(p->second) / static_cast<double>(peer_total);
    if (f.share >= min_share && f.share > f.peers_share) out.push_back(std::move(f));
  }
  // Largest gap first; on a tie the deeper (rarer) frame is no better, so by name for a stable order.
  std::sort(out.begin(), out.end(), [](const FrameShare& a, const FrameShare& b) {
    const double ga = a.share - a.peers_share, gb = b.share - b.peers_share;
    if (std::abs(ga - gb) > 1e-12) return ga > gb;
    return a.frame < b.frame;
  });
  if (out.size() > top) out.resize(top);
  return out;
}

std::string frame_share_sentence(const FrameShare& f) {
  return std::to_string(static_cast<int>(std::lround(f.share * 100))) + "% of its samples are in " + f.frame +
         ", against " + std::to_string(static_cast<int>(std::lround(f.peers_share * 100))) + "% on its peers";
}

void add_python_evidence(DetectedEvent& ev, const ProfileStore& store, const std::vector<int>& own_pids,
                         const std::vector<int>& peer_pids, uint64_t since_ns) {
  std::map<std::string, uint64_t> own, peers;
  uint64_t own_total = 0, peer_total = 0;
  for (int pid : own_pids) own_total += store.function_counts(pid, since_ns, &own);
  for (int pid : peer_pids) peer_total += store.function_counts(pid, since_ns, &peers);
  const auto top = compare_with_peers(own, own_total, peers, peer_total);
  if (top.empty()) return;
  nlohmann::json list = nlohmann::json::array();
  for (const auto& f : top) list.push_back({{"frame", f.frame}, {"share", f.share}, {"peers_share", f.peers_share}});
  ev.evidence["python_profile"] = std::move(list);
  ev.evidence["python_samples"] = {{"rank", own_total}, {"peers", peer_total}};
  ev.summary += "; " + frame_share_sentence(top.front());
}

void PySampler::on_record(const void* data, size_t size) {
  auto s = decode_py_sample(data, size);
  if (!s) {
    ++stats_.malformed;
    return;
  }
  auto r = resolvers_.find(static_cast<int>(s->tgid));
  if (r == resolvers_.end()) {
    ++stats_.unknown_process;
    return;
  }
  std::vector<PyFrame> frames;
  frames.reserve(s->frames.size());
  for (const auto& f : s->frames) {
    if (auto named = r->second->resolve(f.code, f.tag, f.instr)) {
      frames.push_back(std::move(*named));
    } else {
      ++stats_.unresolved_frames;
      frames.push_back(PyFrame{"[unknown]", "[unknown]", "?", 0});
    }
  }
  const bool truncated = (s->flags & ARGUS_PY_SAMPLE_TRUNCATED) != 0;
  if (s->flags & ARGUS_PY_SAMPLE_AT_OOM) {
    if (!oom_stack_handler_) return;
    std::vector<std::string> root_first;
    if (truncated) root_first.emplace_back("[truncated]");
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) root_first.push_back(frame_label(*f));
    oom_stack_handler_(static_cast<int>(s->tgid), s->tid, s->ts_ns, std::move(root_first));
    return;
  }
  if (truncated) ++stats_.truncated;
  if (frames.empty()) return;
  store_.add(static_cast<int>(s->tgid), s->ts_ns, frames, truncated);
  ++stats_.samples;
}

}  // namespace argus::python
