// What the detector tests share: a job replayed with the real libraries'
// semantics (Replay) that feeds a CollectiveTracker the arrivals and synchronize
// spans the agent's probes would see, and gives the signals the registry would
// compute from them, with injected time.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "userspace/comms/collective_tracker.h"
#include "userspace/detect/straggler_detector.h"

namespace argus::detect_testutil {

inline constexpr uint64_t kMs = 1'000'000;

enum class Mode { Async, Blocking };

// A job of `ranks` ranks on one communicator, replayed with the semantics of
// the real libraries (docs: REAL-SEMANTICS.md). Each step, rank r:
//   - computes on its host for step_ms x host[r], launching GPU work that takes
//     gpu_ms x gpu[r] on its GPU (the GPU starts with the step);
//   - optionally synchronizes its stream first (sync_before_coll: loss.item());
//   - issues `per_step` collectives. Async (real NCCL): the calls return at
//     once; the NCCL kernel ends when every rank's GPU has reached it. Blocking
//     (Gloo): the call returns when every rank has called it;
//   - synchronizes at the end of the step, until the collective's kernel ends.
// The tracker gets exactly the arrivals and synchronize spans the agent's
// probes would see; the signals are the wait shares the registry computes.
struct Replay {
  CollectiveTracker tracker{TrackerOptions{10, 512, 0.001}};
  Mode mode = Mode::Async;
  std::map<int, double> host, gpu;  // pid -> slowness factor
  bool sync_before_coll = false;
  bool with_gpu_layer = false;
  // The hosts never synchronize: each runs ahead at its own pace (on a GPU node
  // it would block in a full launch queue, which no probe times).
  bool runs_ahead = false;
  std::map<int, uint64_t> host_clock;  // runs_ahead: each rank's own step start
  int ranks = 8;
  uint64_t now = 1'000 * kMs;
  uint64_t seq = 0;
  double step_ms = 100, gpu_ms = 60;
  int per_step = 4;
  std::map<int, double> coll_ns, sync_ns, nccl_kernel_ns;  // accumulated over the window
  uint64_t window_start = now;
  // Python GC: pid -> ms of collection per step (host time, before its collectives).
  std::map<int, double> gc_ms;
  bool with_gc = false;  // the ranks' collectors are probed
  std::map<int, double> input_ms;  // per step, off CPU waiting for the next batch
  bool with_input = false;         // the agent looks where the main threads are
  std::map<int, InputWorkersView> workers;  // their DataLoader workers, as read from /proc
  std::map<int, double> input_ns;
  std::map<int, double> gc_ns;
  std::map<int, uint64_t> gc_pauses;
  // Kernel layer (sched_switch, cgroup cpu.stat): pid -> ms per step its host
  // spends runnable but off CPU, blocked in block I/O, or with its cgroup
  // throttled (a throttled task is runnable too: count it in runqueue_ms as
  // well). Runqueue and I/O time delay its host by that much; of the rest of
  // its host time oncpu_share is on CPU, the remainder asleep.
  bool with_kernel = false;
  bool with_throttle = true;  // its cgroup's cpu.stat was read
  std::map<int, double> runqueue_ms, io_ms, throttled_ms;
  std::map<int, std::vector<CpuStealer>> stealers;
  double oncpu_share = 0.4;
  std::set<int> noisy;  // these ranks' runqueue and I/O time vary each step (0..2x, seeded)
  std::mt19937 noise_rng{7};
  std::map<int, double> oncpu_ns, runqueue_ns, io_ns, throttled_ns;

  int pid(int r) const { return 100 + r; }
  double f(const std::map<int, double>& m, int p) const { return m.count(p) ? m.at(p) : 1.0; }
  void join() {
    for (int r = 0; r < ranks; ++r) tracker.add_member("c0", pid(r), ranks);
  }
  void sync(int p, uint64_t from, uint64_t to) {
    if (to <= from) return;
    tracker.on_sync(p, from, to);
    sync_ns[p] += static_cast<double>(to - from);
  }
  void step() {
    step_once();
    tracker.update(now);  // as the agent's stats pass does: the step each rank's operations are grouped by
  }
  void step_once() {
    if (runs_ahead) return step_without_sync();
    const uint64_t t0 = now;
    std::map<int, uint64_t> arrive, gpu_done;
    for (int r = 0; r < ranks; ++r) {
      const int p = pid(r);
      const double gc = gc_ms.count(p) ? gc_ms.at(p) : 0.0;
      const double in = input_ms.count(p) ? input_ms.at(p) : 0.0;
      input_ns[p] += in * kMs;
      const double k = noisy.count(p) ? std::uniform_real_distribution<double>(0.0, 2.0)(noise_rng) : 1.0;
      const double rq = (runqueue_ms.count(p) ? runqueue_ms.at(p) : 0.0) * k;
      const double io = (io_ms.count(p) ? io_ms.at(p) : 0.0) * k;
      oncpu_ns[p] += (step_ms * f(host, p) * oncpu_share + gc) * kMs;
      runqueue_ns[p] += rq * kMs;
      io_ns[p] += io * kMs;
      throttled_ns[p] += (throttled_ms.count(p) ? throttled_ms.at(p) : 0.0) * kMs;
      const uint64_t host_end = t0 + static_cast<uint64_t>((step_ms * f(host, p) + gc + rq + io + in) * kMs);
      if (gc > 0) {
        gc_ns[p] += gc * kMs;
        gc_pauses[p] += 1;
      }
      gpu_done[p] = t0 + static_cast<uint64_t>(gpu_ms * f(gpu, p) * kMs);
      arrive[p] = host_end;
      if (sync_before_coll && gpu_done[p] > host_end) {
        sync(p, host_end, gpu_done[p]);
        arrive[p] = gpu_done[p];
      }
    }
    uint64_t last_arrival = 0, last_ready = 0;
    for (const auto& [p, a] : arrive) {
      last_arrival = std::max(last_arrival, a);
      last_ready = std::max(last_ready, std::max(a, gpu_done[p]));
    }
    const uint64_t kernel_end = last_ready + per_step * kMs;
    for (int k = 0; k < per_step; ++k) {
      ++seq;
      for (const auto& [p, a] : arrive) {
        // Blocking: after the first call every rank leaves together.
        const uint64_t at = k == 0 || mode == Mode::Async ? a + k * 10'000 : last_arrival + k * 10'000 + p * 1'000;
        tracker.on_arrival("c0", p, seq, at);
      }
    }
    for (const auto& [p, a] : arrive) {
      uint64_t sync_from = a + per_step * 10'000;
      if (mode == Mode::Blocking) {
        coll_ns[p] += static_cast<double>(last_arrival - a);
        sync_from = last_arrival + per_step * 10'000;
      }
      sync(p, sync_from, kernel_end);
      nccl_kernel_ns[p] += static_cast<double>(kernel_end - std::max(a, gpu_done[p]));
    }
    now = kernel_end + kMs;
  }
  // Every host issues its step's collectives when its own compute ends and goes on.
  void step_without_sync() {
    for (int r = 0; r < ranks; ++r) {
      const int p = pid(r);
      if (!host_clock.count(p)) host_clock[p] = now;
      host_clock[p] += static_cast<uint64_t>(step_ms * f(host, p) * kMs);
    }
    for (int k = 0; k < per_step; ++k) {
      ++seq;
      for (int r = 0; r < ranks; ++r) tracker.on_arrival("c0", pid(r), seq, host_clock[pid(r)] + k * 10'000);
    }
    for (const auto& [p, t] : host_clock) now = std::max(now, t + per_step * 10'000);
  }
  std::vector<RankSignal> signals() {
    std::vector<RankSignal> out;
    tracker.update(now);  // as the agent's stats pass: the step each rank's operations are grouped by
    const double span = static_cast<double>(now - window_start);
    for (int r = 0; r < ranks; ++r) {
      const int p = pid(r);
      RankSignal s;
      s.pid = p;
      s.job_id = "llm-7";
      s.rank = r;
      s.coll_wait_ratio = coll_ns[p] / span;
      s.sync_wait_ratio = sync_ns[p] / span;
      s.coverage = 1;
      s.lag = tracker.last_lag_stats(p);
      s.gpu_valid = with_gpu_layer;
      s.gpu_nccl_ratio = nccl_kernel_ns[p] / span;
      s.gc_valid = with_gc;
      s.gc_seconds = gc_ns[p] / 1e9;
      s.gc_span_s = span / 1e9;
      s.gc_pauses = gc_pauses[p];
      s.gc_max_pause_s = (gc_ms.count(p) ? gc_ms.at(p) : 0.0) / 1e3;
      s.input_valid = with_input;
      s.input_polls = 25;
      s.input_share = input_ns[p] / span;
      if (workers.count(p)) s.input_workers = workers.at(p);
      s.offcpu_valid = with_kernel;
      if (with_kernel) {
        s.runqueue_share = runqueue_ns[p] / span;
        s.io_share = io_ns[p] / span;
        s.oncpu_share = oncpu_ns[p] / span;
        s.sleep_share = std::max(0.0, 1.0 - s.runqueue_share - s.io_share - s.oncpu_share);
        s.throttle_valid = with_throttle;
        s.throttled_share = with_throttle ? throttled_ns[p] / span : 0.0;
        s.cgroup = "/job/rank" + std::to_string(r);
        if (stealers.count(p)) s.stealers = stealers.at(p);
      }
      out.push_back(s);
    }
    oncpu_ns.clear();
    runqueue_ns.clear();
    io_ns.clear();
    throttled_ns.clear();
    gc_ns.clear();
    gc_pauses.clear();
    input_ns.clear();
    coll_ns.clear();
    sync_ns.clear();
    nccl_kernel_ns.clear();
    window_start = now;
    return out;
  }
  // Runs `steps` steps per evaluation and returns the events of `evals` evaluations.
  std::vector<DetectedEvent> run(StragglerDetector& d, int evals, int steps = 20) {
    std::vector<DetectedEvent> all;
    for (int e = 0; e < evals; ++e) {
      for (int i = 0; i < steps; ++i) step();
      for (auto& ev : d.evaluate(signals(), 1000 + e)) all.push_back(std::move(ev));
    }
    return all;
  }
};

}  // namespace argus::detect_testutil

namespace argus::detect_testutil {

// A signal built by hand: the rank is behind its peers on `comm` by `lag_s`
// at every one of 20 steps of `step_s` (what the tracker reports of a straggler).
inline void late_on(RankSignal& s, const std::string& comm, double lag_s, double step_s, int peers = 1) {
  CommLateness c;
  c.comm = comm;
  c.peers = peers;
  c.bins = 20;
  c.late_share = 1;
  c.median_offset_s = lag_s;
  c.t_score = 50;
  c.p_late = 1e-6;
  s.lag.comms.push_back(c);
  s.lag.spread_samples = c.bins;
  s.lag.median_lag_s = lag_s;
  s.lag.late_fraction = 1;
  s.lag.step_seconds = step_s;
}

}  // namespace argus::detect_testutil
