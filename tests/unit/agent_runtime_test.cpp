// The agent's runtime without root: recorded ring-buffer records and BPF
// aggregates replayed through a fake backend, a fake /proc and a manual clock.
// Dispatch, identity, the ratios and the detectors run exactly as on a node.
#include "userspace/agent/agent_runtime.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "exporters/json_api.h"
#include "exporters/prometheus_exporter.h"
#include "exporters/trace_export.h"
#include "tests/support/fake_proc.h"
#include "userspace/common/comm_id.h"
#include "tests/support/manual_clock.h"

namespace argus {
namespace {

using testing_support::environ_of;
using testing_support::FakeProc;
using testing_support::ManualClock;

constexpr uint64_t kMs = 1'000'000;

class FakeBackend : public BpfBackend {
 public:
  Result<Link> attach_uprobe(const std::string&, const ProbeSpec&) override { return make_error("no BPF here"); }
  Result<Link> attach_gpu_usdt(const std::string&, bool) override { return make_error("no BPF here"); }
  bool set_tgid_state(uint32_t tgid, argus_tgid_state state) override {
    tgids[tgid] = state;
    return true;
  }
  void forget_tgid(uint32_t tgid) override { tgids.erase(tgid); }
  std::vector<StatEntry> read_stats(uint32_t only) const override {
    std::vector<StatEntry> out;
    for (const auto& s : stats)
      if (only == 0 || s.key.tgid == only) out.push_back(s);
    return out;
  }
  void delete_stats(uint32_t tgid) override {
    std::erase_if(stats, [&](const StatEntry& s) { return s.key.tgid == tgid; });
  }
  std::map<uint32_t, uint64_t> read_errors() const override { return errors; }
  std::vector<InflightCall> read_inflight_waits() const override { return inflight; }
  void delete_seqs(uint32_t) override {}
  std::map<uint32_t, argus_gpu_mem> read_gpu_memory() const override { return gpu_mem; }
  void set_event_handler(EventHandler h) override { handler = std::move(h); }
  int poll_events(int timeout_ms) override {
    if (record_waits) {  // the loop runs on its own thread: record its waits, and let time pass
      std::lock_guard lock(waits_mu);
      waits.push_back(timeout_ms);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (poll_result < 0) return poll_result;
    int n = 0;
    for (; !records.empty(); records.pop_front(), ++n) handler(records.front().data(), records.front().size());
    records.swap(after_this_poll);  // written while the caller works: the next poll has them
    return n;
  }

  template <typename T>
  void push(const T& rec) {
    std::string bytes(sizeof(T), '\0');
    std::memcpy(bytes.data(), &rec, sizeof(T));
    records.push_back(std::move(bytes));
  }
  // The cumulative aggregate of one (tgid, kind, sub), as BPF keeps it.
  void set_stat(uint32_t tgid, uint16_t kind, uint16_t sub, uint64_t count, uint64_t sum) {
    for (auto& s : stats)
      if (s.key.tgid == tgid && s.key.kind == kind && s.key.sub == sub) {
        s.value = {count, sum};
        return;
      }
    StatEntry e{};
    e.key.tgid = tgid;
    e.key.kind = kind;
    e.key.sub = sub;
    e.value = {count, sum};
    stats.push_back(e);
  }

  EventHandler handler;
  std::deque<std::string> records;
  std::deque<std::string> after_this_poll;
  std::vector<StatEntry> stats;
  std::vector<InflightCall> inflight;
  std::map<uint32_t, uint64_t> errors{{ARGUS_ERR_RINGBUF_NCCL, 2}, {ARGUS_ERR_STATS_FULL, 0}};
  std::map<uint32_t, argus_tgid_state> tgids;
  std::map<uint32_t, argus_gpu_mem> gpu_mem;  // as bpf/cuda_mem.bpf.c keeps it per process
  int poll_result = 0;  // < 0: the next polls fail with it
  void interrupt_poll() override { ++interrupts; }
  std::vector<int> recorded_waits() {
    std::lock_guard lock(waits_mu);
    return waits;
  }

  std::atomic<bool> record_waits{false};
  std::mutex waits_mu;
  std::vector<int> waits;
  std::atomic<int> interrupts{0};
};

// Runs the runtime's own loop until it has polled `n` times (at most 10 s), then stops it.
std::vector<int> loop_waits(AgentRuntime& rt, FakeBackend& backend, size_t n) {
  backend.record_waits = true;
  rt.start();
  for (int i = 0; i < 10'000 && backend.recorded_waits().size() < n; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  rt.stop();
  backend.record_waits = false;
  return backend.recorded_waits();
}

argus_event_header header(uint32_t type, int pid, uint64_t ts) { return {type, static_cast<uint32_t>(pid), static_cast<uint32_t>(pid), 0, ts}; }

// Four ranks of job "rec" on one communicator, replayed step by step.
struct Replay {
  ManualClock clock{1'000'000 * kMs, 1'790'000'000};
  FakeProc proc;
  FakeBackend* backend = nullptr;
  std::unique_ptr<AgentRuntime> rt;
  std::map<int, uint64_t> seq, coll_calls, sync_ns, sync_calls;

  static int pid(int rank) { return 201 + rank; }
  Replay() {
    for (int r = 0; r < 4; ++r)
      proc.add(pid(r), "", environ_of({"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r), "WORLD_SIZE=4",
                                       "LOCAL_WORLD_SIZE=4", "TORCHELASTIC_RUN_ID=rec"}));
    AgentConfig opts;
    opts.node = "n";
    opts.paths.proc_root = proc.root().string();
    auto b = std::make_unique<FakeBackend>();
    backend = b.get();
    rt = AgentRuntime::with_backend(opts, clock, std::move(b));
    for (int r = 0; r < 4; ++r) {
      argus_tgid_seen_event seen{header(ARGUS_EV_TGID_SEEN, pid(r), clock.ns), ARGUS_SRC_NCCL, 0};
      backend->push(seen);
      argus_nccl_init_event init{};
      init.hdr = header(ARGUS_EV_NCCL_INIT, pid(r), clock.ns);
      init.comm = 0xc0000 + static_cast<uint64_t>(r);  // each process's own handle
      init.rank = r;
      init.nranks = 4;
      std::memset(init.uid, 0xab, sizeof(init.uid));  // the same communicator everywhere
      backend->push(init);
    }
    rt->run_once(0);
  }
  // One collective by rank r at `ts`, then its wait in a cuStreamSynchronize until `sync_end`.
  void issue(int r, uint64_t ts, uint64_t sync_end) {
    argus_nccl_coll_event c{};
    c.hdr = header(ARGUS_EV_NCCL_COLL, pid(r), ts);
    c.comm = 0xc0000 + static_cast<uint64_t>(r);
    c.seq = ++seq[r];
    c.op = ARGUS_OP_ALL_REDUCE;
    backend->push(c);
    ++coll_calls[r];
    backend->set_stat(pid(r), ARGUS_STAT_NCCL_CALLS, ARGUS_OP_ALL_REDUCE, coll_calls[r], coll_calls[r] * 4096);
    if (sync_end <= ts) return;
    argus_call_done_event d{};
    d.hdr = header(ARGUS_EV_CALL_DONE, pid(r), sync_end);
    d.start_ns = ts + 10'000;
    d.cls = ARGUS_CLS_CUDA;
    d.kind = ARGUS_STAT_CUDA_SYNC;
    d.id = ARGUS_CU_STREAM_SYNCHRONIZE;
    backend->push(d);
    sync_ns[r] += sync_end - d.start_ns;
    backend->set_stat(pid(r), ARGUS_STAT_CUDA_SYNC, ARGUS_CU_STREAM_SYNCHRONIZE, ++sync_calls[r], sync_ns[r]);
  }
  // A 100 ms step of asynchronous NCCL: `late` issues `lag` after the others, who
  // then wait for it in their synchronize.
  void step(int late, uint64_t lag) {
    const uint64_t t = clock.ns;
    for (int r = 0; r < 4; ++r) issue(r, r == late ? t + lag : t + r * 50'000, t + lag + 2 * kMs);
    clock.ns += 100 * kMs;
    rt->run_once(0);
  }
  RankSnapshot rank(int r) const {
    for (const auto& s : rt->snapshot().ranks)
      if (s.pid == pid(r)) return s;
    return {};
  }
};

TEST(AgentRuntime, RecordedRecordsGiveIdentityCountsAndTheStraggler) {
  Replay r;
  for (int i = 0; i < 80; ++i) r.step(2, 40 * kMs);
  for (int k = 0; k < 4; ++k) {
    const auto s = r.rank(k);
    EXPECT_EQ(s.job_id, "rec") << k;
    EXPECT_EQ(s.rank, k);
    EXPECT_EQ(s.nccl.at("all_reduce").calls, 80u);
    EXPECT_EQ(s.comm_seq.begin()->second, 80u);
    EXPECT_NEAR(s.collective_wait_ratio, 0.0, 1e-9);  // asynchronous: nothing inside the calls
  }
  EXPECT_GT(r.rank(0).sync_wait_ratio, 0.35);  // they wait for rank 2 in their synchronize
  EXPECT_LT(r.rank(2).sync_wait_ratio, 0.05);
  const auto s2 = r.rank(2);
  EXPECT_TRUE(s2.straggler);
  EXPECT_EQ(s2.straggler_reason, StragglerReason::kHost);
  EXPECT_NEAR(s2.arrival_lag_seconds, 0.040, 0.001);
  for (int k : {0, 1, 3}) EXPECT_FALSE(r.rank(k).straggler) << k;
  const auto evs = r.rt->events_since(0);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].kind, EventKind::kStraggler);
  EXPECT_EQ(evs[0].rank, 2);
  // Ring-buffer loss is exported once, by source; other BPF errors as errors.
  const auto a = r.rt->snapshot().agent;
  EXPECT_EQ(a.events_lost.at("nccl"), 2u);
  EXPECT_EQ(a.bpf_errors.count("ringbuf_full_nccl"), 0u);
  EXPECT_EQ(a.bpf_errors.at("stats_map_full"), 0u);
  EXPECT_EQ(a.counters.get(EventSource::kNccl), 4u + 80u * 4u);  // init + collectives
  EXPECT_EQ(a.counters.get(EventSource::kProc), 4u);             // first calls (tgid seen)
}

// The communicator's name everywhere is the hash of its unique id, never the id's bytes
// (NCCL's bootstrap magic and the root's address); and it is the same for every rank.
TEST(AgentRuntime, CommunicatorNamesAreHashedUniqueIds) {
  Replay r;
  for (int i = 0; i < 10; ++i) r.step(-1, 0);
  uint8_t uid[ARGUS_NCCL_UID_PREFIX];
  std::memset(uid, 0xab, sizeof(uid));
  const std::string name = comm_id_from_uid(uid, sizeof(uid));
  const auto snap = r.rt->snapshot();
  ASSERT_EQ(snap.comms.size(), 1u);
  EXPECT_EQ(snap.comms[0].comm, name);
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(r.rank(k).comm_seq.size(), 1u);
    EXPECT_EQ(r.rank(k).comm_seq.begin()->first, name) << k;
  }
  std::string everything = render_metrics(snap) + comms_json(snap).dump() + render_ranks_json(snap);
  TraceRequest tr;
  tr.seconds = 60;
  const auto spans = r.rt->trace(60, &tr.end_ns);
  const std::string trace = trace_json(spans, snap.ranks, r.rt->events_since(0), tr).dump();
  everything += trace;
  EXPECT_NE(everything.find(name), std::string::npos);
  EXPECT_EQ(everything.find("abababab"), std::string::npos);
}

TEST(AgentRuntime, ARankThatStopsIssuingIsNamedMissingWhileItsPeersSitInSynchronize) {
  Replay r;
  for (int i = 0; i < 30; ++i) r.step(-1, 0);
  // Rank 3 never issues the next collective; the others do and block in a synchronize.
  const uint64_t t = r.clock.ns;
  for (int k = 0; k < 3; ++k) {
    r.issue(k, t, 0);
    r.backend->inflight.push_back({static_cast<uint32_t>(Replay::pid(k)), static_cast<uint32_t>(Replay::pid(k)),
                                   t + kMs, 0, ARGUS_CU_STREAM_SYNCHRONIZE, ARGUS_STAT_CUDA_SYNC});
  }
  for (int i = 0; i < 12; ++i) {
    r.clock.ns += 1000 * kMs;
    r.rt->run_once(0);
  }
  EXPECT_TRUE(r.rank(3).hang_missing);
  for (int k = 0; k < 3; ++k) EXPECT_FALSE(r.rank(k).hang_missing) << k;
  std::vector<DetectedEvent> hangs;
  for (const auto& e : r.rt->events_since(0))
    if (e.kind == EventKind::kHang) hangs.push_back(e);
  ASSERT_EQ(hangs.size(), 1u);
  EXPECT_EQ(hangs[0].rank, 3);
  EXPECT_NE(hangs[0].summary.find("rank 3 (it is alive and in no collective or CUDA call) never issued it; its peers here: 3 wait in a CUDA synchronize"),
            std::string::npos)
      << hangs[0].summary;
  const auto comms = r.rt->snapshot().comms;
  ASSERT_EQ(comms.size(), 1u);
  EXPECT_TRUE(comms[0].hung);
  EXPECT_GE(comms[0].stalled_seconds, 10.0);
}

// A job stopped mid-collective (SIGTERM from its launcher): every rank exits
// with a collective open. Nobody waits any more: no hang, neither while the
// ranks are kept after their exit nor when they are dropped (the agent once
// judged the open collective in the pass that dropped them, with no rank
// left to say it had exited: "rank -1 ... is alive", 10 s after every such job).
TEST(AgentRuntime, AJobStoppedMidCollectiveRaisesNoHangWhenItsRanksAreDropped) {
  Replay r;
  for (int i = 0; i < 30; ++i) r.step(-1, 0);
  const uint64_t t = r.clock.ns;
  for (int k = 0; k < 3; ++k) r.issue(k, t, 0);  // rank 3 is stopped before it issues
  r.rt->run_once(0);
  for (int k = 0; k < 4; ++k) {
    argus_exit_event gone{};
    gone.hdr = header(ARGUS_EV_EXIT, Replay::pid(k), r.clock.ns);
    gone.exit_code = 0;
    r.backend->push(gone);
    r.proc.remove(Replay::pid(k));
  }
  for (int i = 0; i < 2 * static_cast<int>(kDefaultExitGraceSeconds) + 5; ++i) {
    r.clock.advance(1.0);
    r.rt->run_once(0);
  }
  for (const auto& e : r.rt->events_since(0)) EXPECT_NE(e.kind, EventKind::kHang) << e.summary;
  EXPECT_TRUE(r.rt->snapshot().ranks.empty());
  EXPECT_TRUE(r.rt->snapshot().comms.empty());
}

TEST(AgentRuntime, MalformedRecordsAreCountedNotTrusted) {
  Replay r;
  r.backend->records.push_back(std::string(7, '\x01'));  // shorter than any header
  argus_nccl_coll_event c{};
  c.hdr = header(ARGUS_EV_NCCL_COLL, Replay::pid(0), r.clock.ns);
  std::string cut(reinterpret_cast<const char*>(&c), sizeof(c) - 8);  // a collective cut short
  r.backend->records.push_back(cut);
  r.rt->run_once(0);
  EXPECT_EQ(r.rt->snapshot().agent.bpf_errors.at("malformed_record"), 2u);
  EXPECT_EQ(r.rank(0).comm_seq.begin()->second, 0u);  // nothing was made of them
}

// The loop's waits (the manual clock stands still): with nothing to watch it
// sleeps until the stats pass and the /proc scan are due, at the idle pace,
// with no fixed turn in between; with ranks it turns every 50 ms (their hot
// events come without a wakeup). stop() cuts the wait short.
TEST(AgentRuntime, TheLoopSleepsUntilSomethingIsDueAndStopWakesIt) {
  ManualClock clock{1'000'000 * kMs, 1'790'000'000};
  FakeProc proc;
  AgentConfig opts;
  opts.node = "n";
  opts.paths.proc_root = proc.root().string();
  auto b = std::make_unique<FakeBackend>();
  FakeBackend& backend = *b;
  auto idle = AgentRuntime::with_backend(opts, clock, std::move(b));
  const auto waits = loop_waits(*idle, backend, 4);
  ASSERT_GE(waits.size(), 4u);
  EXPECT_EQ(waits[0], 0);  // the first scan and stats pass are due at once
  const int idle_ms = static_cast<int>(std::max(opts.stats_interval_seconds, opts.discovery.idle_scan_interval_seconds) * 1000);
  for (size_t i = 1; i < waits.size(); ++i) EXPECT_EQ(waits[i], idle_ms) << i;
  EXPECT_EQ(backend.interrupts, 1);

  Replay r;  // four ranks tracked
  const auto busy = loop_waits(*r.rt, *r.backend, 4);
  ASSERT_GE(busy.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(busy[i], 50) << i;  // (quiet ranks rest later: the next test)
  EXPECT_EQ(r.backend->interrupts, 1);
}

// Tracked ranks that send nothing (a process that maps NCCL and waits) do not
// keep the loop at 50 ms turns: after 20 empty turns it waits for the stats
// pass, and the first turn that drains a record brings the 50 ms back.
TEST(AgentRuntime, QuietRanksLetTheLoopRestUntilTheStatsPass) {
  Replay r;
  const auto waits = loop_waits(*r.rt, *r.backend, 24);
  ASSERT_GE(waits.size(), 24u);
  // The manual clock stands still: the next /proc scan and stats pass stay 1 s away.
  const AgentConfig defaults;
  const int rest_ms =
      static_cast<int>(std::min(defaults.stats_interval_seconds, defaults.discovery.scan_interval_seconds) * 1000);
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(waits[i], 50) << i;
  for (size_t i = 20; i < waits.size(); ++i) EXPECT_EQ(waits[i], rest_ms) << i;

  argus_nccl_coll_event c{};
  c.hdr = header(ARGUS_EV_NCCL_COLL, Replay::pid(0), r.clock.ns);
  c.seq = 1;
  r.backend->push(c);
  const size_t before = waits.size();
  const auto more = loop_waits(*r.rt, *r.backend, before + 3);
  ASSERT_GE(more.size(), before + 3);
  EXPECT_EQ(more[before], rest_ms);  // this wait ends with the record drained
  EXPECT_EQ(more[before + 1], 50);
  EXPECT_EQ(more[before + 2], 50);
}

TEST(AgentRuntime, FailedRingBufferPollsAreCounted) {
  Replay r;
  r.backend->poll_result = -EBADF;
  r.rt->run_once(0);
  r.rt->run_once(0);
  r.backend->poll_result = -EINTR;  // a signal: not an error
  r.rt->run_once(0);
  EXPECT_EQ(r.rt->snapshot().agent.counters.get(AgentCount::kRingbufPollErrors), 2u);
}

// A producer of GPU records that never calls NCCL (inference, one GPU, Gloo):
// its step sketches close on time, so its memory stays bounded, and it says so.
TEST(AgentRuntime, AGpuProducerWithoutCollectivesClosesItsSketchesOnTime) {
  Replay r;
  argus_gpu_batch_event b{};
  b.hdr = header(ARGUS_EV_GPU_BATCH, Replay::pid(0), r.clock.ns);
  b.n = b.sent = ARGUS_GPU_BATCH_MAX;
  uint64_t at = r.clock.ns;
  for (int batch = 0; batch < 2; ++batch) {  // 512 kernels, one every 250 ms: 128 s
    for (auto& rec : b.recs) {
      rec = argus_gpu_rec{};
      rec.kind = ARGUS_GPU_KERNEL;
      rec.name_id = 1;
      rec.start_ns = at;
      rec.end_ns = at + 100 * kMs;
      at += 250 * kMs;
    }
    r.backend->push(b);
  }
  r.rt->run_once(0);
  EXPECT_EQ(r.rank(0).gpu.steps_summarized, 2u);  // closed at 60 s and 120 s
  EXPECT_EQ(r.rt->snapshot().agent.counters.get(Cap::kStepSketchTime), 2u);
}

// A process that creates communicators forever keeps a bounded set of names.
TEST(AgentRuntime, CommunicatorNamesPerProcessAreCapped) {
  Replay r;
  for (uint64_t i = 0; i < kDefaultMaxCommsPerRank + 4; ++i) {
    argus_nccl_init_event init{};
    init.hdr = header(ARGUS_EV_NCCL_INIT, Replay::pid(0), r.clock.ns);
    init.comm = 0xd00000 + i;
    init.rank = 0;
    init.nranks = 4;
    std::memset(init.uid, 0xab, sizeof(init.uid));
    r.backend->push(init);
  }
  r.rt->run_once(0);
  const auto a = r.rt->snapshot().agent;
  EXPECT_EQ(a.counters.get(Cap::kCommHandles), 5u);     // one handle from the start, 1028 more, 1024 kept
  EXPECT_EQ(a.counters.get(Cap::kRankCommInits), 5u);  // the registry's copy of the inits, too
  EXPECT_EQ(a.counters.get(Cap::kCommunicators), 0u);
}

// Rank deaths: the cause from the exit event, and an OOM kill told from the
// memory cgroup's oom_kill count when mark_victim was blind.
TEST(AgentRuntime, ExitCauseFromTheEventAndOomFromTheMemoryCgroup) {
  ManualClock clock{1'000'000 * kMs, 1'790'000'000};
  FakeProc proc;
  testing_support::TempDir sys("sys");
  const auto memcg = sys.path / "fs" / "cgroup" / "memory" / "job";
  std::filesystem::create_directories(memcg);
  std::ofstream(memcg / "memory.limit_in_bytes") << (64 << 20) << "\n";
  std::ofstream(memcg / "memory.max_usage_in_bytes") << (64 << 20) << "\n";
  std::ofstream(memcg / "memory.oom_control") << "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n";
  for (int r = 0; r < 3; ++r) {
    const int pid = 301 + r;
    proc.add(pid, "", environ_of({"RANK=" + std::to_string(r), "WORLD_SIZE=3", "TORCHELASTIC_RUN_ID=dead"}));
    std::ofstream(proc.root() / std::to_string(pid) / "cgroup") << "7:memory:/job\n0::/\n";
  }
  AgentConfig opts;
  opts.node = "n";
  opts.paths.proc_root = proc.root().string();
  opts.paths.sysfs_root = sys.str();
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  auto rt = AgentRuntime::with_backend(opts, clock, std::move(b));
  for (int pid = 301; pid <= 303; ++pid)
    backend->push(argus_tgid_seen_event{header(ARGUS_EV_TGID_SEEN, pid, clock.ns), ARGUS_SRC_NCCL, 0});
  rt->run_once(0);

  // pid 301: killed by `kill` (pid 900); pid 302: the kernel's SIGKILL after the
  // cgroup's oom_kill rose, no mark_victim; pid 303: exit(3).
  std::ofstream(memcg / "memory.oom_control") << "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n";
  argus_exit_event killed{};
  killed.hdr = header(ARGUS_EV_EXIT, 301, clock.ns);
  killed.exit_code = 9;
  killed.cause.signal = 9;
  killed.cause.sender_tgid = 900;
  killed.cause.flags = ARGUS_EXIT_F_SIGNAL;
  std::memcpy(killed.cause.sender_comm, "kill", 5);
  backend->push(killed);
  argus_exit_event oom{};
  oom.hdr = header(ARGUS_EV_EXIT, 302, clock.ns);
  oom.exit_code = 9;
  oom.cause.signal = 9;
  oom.cause.flags = ARGUS_EXIT_F_SIGNAL | ARGUS_EXIT_F_KERNEL;
  backend->push(oom);
  argus_exit_event code3{};
  code3.hdr = header(ARGUS_EV_EXIT, 303, clock.ns);
  code3.exit_code = 3 << 8;
  backend->push(code3);
  rt->run_once(0);

  std::map<int, RankSnapshot> ranks;
  for (const auto& s : rt->snapshot().ranks) ranks[s.pid] = s;
  EXPECT_EQ(ranks[301].exit_reason, ExitReason::kSignal);
  EXPECT_EQ(ranks[301].exit_cause.sender_pid, 900);
  EXPECT_EQ(ranks[302].exit_reason, ExitReason::kOom);
  EXPECT_EQ(ranks[302].exit_cause.oom_details["source"], "memory_cgroup");
  EXPECT_EQ(ranks[302].exit_cause.oom_details["cgroup"], "/job");
  EXPECT_EQ(ranks[302].exit_cause.oom_details["limit_bytes"], 64 << 20);
  EXPECT_EQ(ranks[303].exit_reason, ExitReason::kExit);
  EXPECT_EQ(ranks[303].exit_code, 3);
  std::map<int, std::string> summaries;
  for (const auto& e : rt->events_since(0))
    if (e.kind == EventKind::kRankExit) summaries[e.rank] = e.summary;
  EXPECT_EQ(summaries[0], "rank 0 of job dead (pid 301) was killed by SIGKILL from pid 900 (`kill`)");
  EXPECT_EQ(summaries[1], "rank 1 of job dead (pid 302) was killed by the OOM killer: memory cgroup /job at its 64 MiB limit");
  EXPECT_EQ(summaries[2], "rank 2 of job dead (pid 303) exited with code 3");
  const std::string text = render_metrics(rt->snapshot());
  EXPECT_NE(text.find(R"(argus_rank_exits_total{job_id="dead",rank="1",reason="oom"} 1)"), std::string::npos) << text;
}

// A rank whose allocation ran out of GPU memory and that exited 1 right after,
// in the same poll: one oom event with BPF's figures (said at the stats pass,
// its Python stack had it one), its end's reason oom with the failed
// allocation, and what it held as BPF kept it until then.
TEST(AgentRuntime, AGpuOutOfMemoryIsAnEventAndTheCauseOfTheExitThatFollows) {
  constexpr uint64_t kGiB = 1ull << 30;
  ManualClock clock{1'000'000 * kMs, 1'790'000'000};
  FakeProc proc;
  proc.add(401, "", environ_of({"RANK=5", "WORLD_SIZE=8", "TORCHELASTIC_RUN_ID=mem"}));
  proc.add(402, "", environ_of({"RANK=6", "WORLD_SIZE=8", "TORCHELASTIC_RUN_ID=mem"}));
  AgentConfig opts;
  opts.node = "n";
  opts.paths.proc_root = proc.root().string();
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  auto rt = AgentRuntime::with_backend(opts, clock, std::move(b));
  backend->push(argus_tgid_seen_event{header(ARGUS_EV_TGID_SEEN, 401, clock.ns), ARGUS_SRC_CUDA, 0});
  backend->push(argus_tgid_seen_event{header(ARGUS_EV_TGID_SEEN, 402, clock.ns), ARGUS_SRC_CUDA, 0});
  backend->set_stat(401, ARGUS_STAT_GPU_ALLOC, ARGUS_CU_MEM_ALLOC, 40, 78 * kGiB);
  backend->gpu_mem[401] = argus_gpu_mem{static_cast<int64_t>(78 * kGiB), 79 * kGiB, 80 * kGiB, 0};
  rt->run_once(0);

  argus_gpu_oom_event oom{};
  oom.hdr = header(ARGUS_EV_GPU_OOM, 401, clock.ns);
  oom.asked = 8 * kGiB;
  oom.held = static_cast<int64_t>(78 * kGiB);
  oom.peak = 79 * kGiB;
  oom.total = 80 * kGiB;
  oom.api = ARGUS_CU_MEM_ALLOC;
  oom.result = 2;
  backend->push(oom);
  backend->push(oom);  // the framework's retry after freeing its cache
  argus_exit_event gone{};
  gone.hdr = header(ARGUS_EV_EXIT, 401, clock.ns);
  gone.exit_code = 1 << 8;
  backend->push(gone);
  // Rank 6 caught its own out-of-memory and went on; torchrun (pid 900) then
  // tore the job down: a kill, not its OOM's doing.
  argus_gpu_oom_event caught = oom;
  caught.hdr = header(ARGUS_EV_GPU_OOM, 402, clock.ns);
  backend->push(caught);
  argus_exit_event torn{};
  torn.hdr = header(ARGUS_EV_EXIT, 402, clock.ns);
  torn.exit_code = 15;
  torn.cause.signal = 15;
  torn.cause.sender_tgid = 900;
  torn.cause.flags = ARGUS_EXIT_F_SIGNAL;
  backend->push(torn);
  rt->run_once(0);
  clock.advance(2);
  rt->run_once(0);

  std::vector<DetectedEvent> ooms, exits;
  for (const auto& e : rt->events_since(0))
    if (e.rank == 5) (e.kind == EventKind::kOom ? ooms : exits).push_back(e);
  ASSERT_EQ(ooms.size(), 1u);
  EXPECT_EQ(ooms[0].job_id, "mem");
  EXPECT_EQ(ooms[0].rank, 5);
  EXPECT_EQ(ooms[0].summary,
            "rank 5 of job mem (pid 401) ran out of GPU memory: cuMemAlloc of 8 GiB failed (CUDA_ERROR_OUT_OF_MEMORY) "
            "while it held 78 GiB of 80 GiB (peak 79 GiB)");
  EXPECT_EQ(ooms[0].evidence["failed_calls"], 2);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].summary,
            "rank 5 of job mem (pid 401) exited with code 1 after running out of GPU memory: cuMemAlloc of 8 GiB "
            "failed (CUDA_ERROR_OUT_OF_MEMORY) while it held 78 GiB of 80 GiB of GPU memory");
  const auto snap = rt->snapshot();
  std::map<int, RankSnapshot> by_pid;
  for (const auto& r : snap.ranks) by_pid[r.pid] = r;
  ASSERT_EQ(by_pid.size(), 2u);
  EXPECT_EQ(by_pid[402].exit_reason, ExitReason::kSignal);
  EXPECT_TRUE(by_pid[402].exit_cause.gpu_oom.is_null());
  EXPECT_EQ(by_pid[401].exit_reason, ExitReason::kOom);
  EXPECT_EQ(by_pid[401].gpu_memory.held_bytes, static_cast<int64_t>(78 * kGiB));
  EXPECT_EQ(by_pid[401].gpu_memory.total_bytes, 80 * kGiB);
  const std::string text = render_metrics(snap);
  EXPECT_NE(text.find(R"(argus_rank_exits_total{job_id="mem",rank="5",reason="oom"} 1)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(argus_gpu_memory_allocations_total{job_id="mem",rank="5",api="cuMemAlloc"} 40)"),
            std::string::npos);
}

// A rank that exits right after a poll and is reaped by its parent before the
// stats pass: its exit event waits in the ring buffer while /proc says it is
// gone. It ends once, with its real code, not twice (code unknown, then 1).
TEST(AgentRuntime, RankReapedBeforeItsExitEventIsReadEndsOnceWithItsCode) {
  ManualClock clock{1'000'000 * kMs, 1'790'000'000};
  FakeProc proc;
  proc.add(401, "", environ_of({"RANK=0", "WORLD_SIZE=1", "TORCHELASTIC_RUN_ID=reaped"}));
  AgentConfig opts;
  opts.node = "n";
  opts.paths.proc_root = proc.root().string();
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  auto rt = AgentRuntime::with_backend(opts, clock, std::move(b));
  backend->push(argus_tgid_seen_event{header(ARGUS_EV_TGID_SEEN, 401, clock.ns), ARGUS_SRC_NCCL, 0});
  rt->run_once(0);
  ASSERT_EQ(rt->snapshot().ranks.size(), 1u);

  proc.remove(401);
  argus_exit_event exit1{};
  exit1.hdr = header(ARGUS_EV_EXIT, 401, clock.ns);
  exit1.exit_code = 1 << 8;
  std::string bytes(sizeof(exit1), '\0');
  std::memcpy(bytes.data(), &exit1, sizeof(exit1));
  backend->after_this_poll.push_back(bytes);
  for (int turn = 0; turn < 4; ++turn) {  // the stats pass comes in these turns
    clock.advance(1.0);
    rt->run_once(0);
  }

  std::vector<DetectedEvent> exits;
  for (const auto& e : rt->events_since(0))
    if (e.kind == EventKind::kRankExit) exits.push_back(e);
  ASSERT_EQ(exits.size(), 1u);
  EXPECT_EQ(exits[0].summary, "rank 0 of job reaped (pid 401) exited with code 1");
  const auto ranks = rt->snapshot().ranks;
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].exit_reason, ExitReason::kExit);
  EXPECT_EQ(ranks[0].exit_code, 1);
}

// What a host collector is told, in order: a refresh each stats pass with the
// ranks that run, a process's end once, and (one place, the rank lifecycle) to
// let go of the processes the registry dropped.
class RecordingCollector final : public HostCollector {
 public:
  const char* name() const override { return "recording"; }
  void refresh(double, const std::vector<int>& live) override { calls.push_back("refresh " + pids_text(live)); }
  void rank_ended(int pid) override { calls.push_back("ended " + std::to_string(pid)); }
  void retain(const std::set<int>& pids) override {
    calls.push_back("retain " + pids_text(std::vector<int>(pids.begin(), pids.end())));
  }
  void start() override { calls.push_back("start"); }
  void stop() override { calls.push_back("stop"); }
  static std::string pids_text(const std::vector<int>& pids) {
    std::string t = "[";
    for (int p : pids) t += (t.size() > 1 ? "," : "") + std::to_string(p);
    return t + "]";
  }
  std::vector<std::string> calls;
};

TEST(AgentRuntime, CollectorsAreRefreshedToldOfEndsAndForgetInOnePlace) {
  ManualClock clock{1'000'000 * kMs, 1'790'000'000};
  FakeProc proc;
  proc.add(501, "", environ_of({"RANK=0", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=life"}));
  proc.add(502, "", environ_of({"RANK=1", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=life"}));
  AgentConfig opts;
  opts.node = "n";
  opts.paths.proc_root = proc.root().string();
  opts.detection.exit_grace_seconds = 0;  // an exited rank is dropped at the next stats pass
  auto b = std::make_unique<FakeBackend>();
  FakeBackend* backend = b.get();
  auto rt = AgentRuntime::with_backend(opts, clock, std::move(b));
  RecordingCollector* rec = rt->add_collector(std::make_unique<RecordingCollector>());
  for (int pid : {501, 502}) backend->push(argus_tgid_seen_event{header(ARGUS_EV_TGID_SEEN, pid, clock.ns), ARGUS_SRC_NCCL, 0});
  rt->run_once(0);  // tracks both; the first stats pass
  argus_exit_event gone{};
  gone.hdr = header(ARGUS_EV_EXIT, 502, clock.ns);
  backend->push(gone);
  proc.remove(502);
  clock.advance(0.5);
  rt->run_once(0);  // the exit, between stats passes
  clock.advance(1.0);
  rt->run_once(0);  // a stats pass: 502 is past its grace and dropped
  const std::vector<std::string> want = {"refresh [501,502]", "retain [501,502]", "ended 502", "refresh [501]",
                                         "retain [501]"};
  EXPECT_EQ(rec->calls, want);
  // The state let go of it as well: the registry, its communicators, its trace.
  for (const auto& r : rt->snapshot().ranks) EXPECT_NE(r.pid, 502);
  EXPECT_TRUE(rt->gpu_steps(502, 10).steps.empty());
}

}  // namespace
}  // namespace argus
