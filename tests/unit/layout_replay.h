// A job laid out as Megatron lays it out (tensor parallel groups of `tp`
// consecutive ranks, data parallel groups of the ranks with the same TP rank),
// replayed with the semantics of the real libraries (REAL-SEMANTICS.md) into a
// CollectiveTracker, with per-rank per-step jitter: what the detectors see of
// a real TP x DP job. Each step, every rank, for each of `accum` micro-batches,
// runs `layers` forward and `layers` backward chunks (host compute that
// launches GPU work), each followed by a TP all-reduce; then, optionally, a
// synchronize (loss.item()), the DP gradient all-reduce, and the step-end
// synchronize. Async (NCCL): a call only enqueues; its kernel starts when the
// rank's GPU reaches it and ends when every member's has. Blocking (Gloo): the
// call returns when every member has called it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "userspace/comms/collective_tracker.h"
#include "userspace/detect/straggler_detector.h"

namespace argus::detect_testutil {

struct LayoutReplay {
  static constexpr uint64_t kUs = 1'000;
  static constexpr uint64_t kMsNs = 1'000'000;
  int ranks = 8, tp = 2, accum = 1, layers = 4;
  bool blocking = false;
  double step_ms = 100, gpu_share = 0.6;  // host compute per step; GPU busy share of it
  double jitter = 0;                      // each rank's compute x (1 + jitter * U(-1, 1)), per step
  bool sync_before_coll = false, with_gpu_layer = false, with_kernel = false;
  std::map<int, double> host, gpu;        // rank -> slowness factor
  std::map<int, double> runqueue_ms;      // rank -> ms per step runnable but off CPU (delays its host)
  uint32_t seed = 1;
  CollectiveTracker tracker{TrackerOptions{.window_seconds = 10}};

  uint64_t now = 1'000 * kMsNs, window_start = now;
  int64_t step_no = 0;
  std::map<std::string, uint64_t> seq;
  std::vector<uint64_t> h, g;  // per rank: host clock, GPU free at
  std::vector<double> coll_ns, sync_ns, nccl_ns, rq_ns, oncpu_ns;

  // A uniform draw in [0, 1) for (seed, step, rank): splitmix64 of the three,
  // independent across ranks and steps (adjacent mt19937 seeds are not).
  static double unit(uint32_t seed, int64_t step, int rank) {
    uint64_t z = (static_cast<uint64_t>(seed) << 40) ^ (static_cast<uint64_t>(step) << 12) ^ static_cast<uint64_t>(rank);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) / 9007199254740992.0;
  }
  int pid(int r) const { return 100 + r; }
  int dp() const { return ranks / tp; }
  std::string tp_comm(int r) const { return "tp" + std::to_string(r / tp); }
  std::string dp_comm(int r) const { return "dp" + std::to_string(r % tp); }
  double f(const std::map<int, double>& m, int r) const { return m.count(r) ? m.at(r) : 1.0; }

  void join() {
    h.assign(ranks, now);
    g.assign(ranks, now);
    coll_ns.assign(ranks, 0);
    sync_ns.assign(ranks, 0);
    nccl_ns.assign(ranks, 0);
    rq_ns.assign(ranks, 0);
    oncpu_ns.assign(ranks, 0);
    for (int r = 0; r < ranks; ++r) {
      if (tp > 1) tracker.add_member(tp_comm(r), pid(r), tp, r % tp);
      if (dp() > 1) tracker.add_member(dp_comm(r), pid(r), dp(), r / tp);
    }
  }
  void sync_until(int r, uint64_t until) {
    if (until > h[r]) {
      tracker.on_sync(pid(r), h[r], until);
      sync_ns[r] += static_cast<double>(until - h[r]);
      h[r] = until;
    }
    h[r] += 20 * kUs;
  }
  // One collective of every group of the layout (groups(r) names rank r's).
  template <typename GroupOf>
  void collective(GroupOf group_of, uint64_t bytes) {
    std::map<std::string, std::vector<int>> groups;
    for (int r = 0; r < ranks; ++r) groups[group_of(r)].push_back(r);
    for (auto& [comm, members] : groups) {
      if (members.size() < 2) continue;
      const uint64_t n = ++seq[comm];
      uint64_t last_arrival = 0, last_ready = 0;
      for (int r : members) {
        tracker.on_arrival(comm, pid(r), n, h[r], 0, bytes);
        last_arrival = std::max(last_arrival, h[r]);
        last_ready = std::max(last_ready, std::max(g[r], h[r]));
      }
      const uint64_t end = last_ready + 20 * kUs;
      for (int r : members) {
        nccl_ns[r] += static_cast<double>(end - std::max(g[r], h[r]));
        g[r] = end;
        if (blocking) {
          coll_ns[r] += static_cast<double>(last_arrival - h[r]);
          h[r] = last_arrival + 10 * kUs;
        } else {
          h[r] += 10 * kUs;
        }
      }
    }
  }
  void compute(const std::vector<double>& jit, double share) {
    for (int r = 0; r < ranks; ++r) {
      const double host_ms = step_ms * share * f(host, r) * jit[r];
      const double rq = (runqueue_ms.count(r) ? runqueue_ms.at(r) : 0.0) * share;
      g[r] = std::max(g[r], h[r]) + static_cast<uint64_t>(host_ms * gpu_share * f(gpu, r) * kMsNs);
      h[r] += static_cast<uint64_t>((host_ms + rq) * kMsNs);
      rq_ns[r] += rq * kMsNs;
      oncpu_ns[r] += host_ms * 0.5 * kMsNs;
    }
  }
  void step() {
    std::vector<double> jit(ranks, 1.0);
    for (int r = 0; r < ranks; ++r) jit[r] = 1.0 + jitter * (2.0 * unit(seed, step_no, r) - 1.0);
    const double share = 1.0 / (2.0 * layers * accum);
    for (int m = 0; m < accum; ++m)
      for (int l = 0; l < 2 * layers; ++l) {
        compute(jit, share);
        if (tp > 1) collective([&](int r) { return tp_comm(r); }, 1 << 20);
      }
    if (sync_before_coll)
      for (int r = 0; r < ranks; ++r) sync_until(r, g[r]);
    if (dp() > 1) collective([&](int r) { return dp_comm(r); }, 25 << 20);
    for (int r = 0; r < ranks; ++r) sync_until(r, g[r]);
    // The next step starts together only as far as the collectives tied the ranks.
    for (int r = 0; r < ranks; ++r) h[r] += kMsNs;
    for (int r = 0; r < ranks; ++r) now = std::max(now, h[r]);
    ++step_no;
  }
  std::vector<RankSignal> signals() {
    tracker.update(now);
    std::vector<RankSignal> out;
    const double span = static_cast<double>(now - window_start);
    for (int r = 0; r < ranks; ++r) {
      RankSignal s;
      s.pid = pid(r);
      s.job_id = "llm-7";
      s.rank = r;
      s.coll_wait_ratio = coll_ns[r] / span;
      s.sync_wait_ratio = sync_ns[r] / span;
      s.coverage = 1;
      s.lag = tracker.last_lag_stats(pid(r));
      s.gpu_valid = with_gpu_layer;
      s.gpu_nccl_ratio = nccl_ns[r] / span;
      s.offcpu_valid = with_kernel;
      if (with_kernel) {
        s.runqueue_share = rq_ns[r] / span;
        s.oncpu_share = oncpu_ns[r] / span;
        s.sleep_share = std::max(0.0, 1.0 - s.runqueue_share - s.oncpu_share);
      }
      out.push_back(s);
    }
    for (auto* v : {&coll_ns, &sync_ns, &nccl_ns, &rq_ns, &oncpu_ns}) std::fill(v->begin(), v->end(), 0.0);
    window_start = now;
    return out;
  }
  // `evals` evaluations, each after `steps` steps; the events they raised.
  std::vector<DetectedEvent> run(StragglerDetector& d, int evals, int steps = 10) {
    std::vector<DetectedEvent> all;
    for (int e = 0; e < evals; ++e) {
      for (int i = 0; i < steps; ++i) step();
      for (auto& ev : d.evaluate(signals(), 1000 + e)) all.push_back(std::move(ev));
    }
    return all;
  }
};

}  // namespace argus::detect_testutil
