// Why a rank died: the cause from the kernel's exit code, the remembered
// signal and sender, the OOM flag or the memory cgroup; its words and evidence.
#include <gtest/gtest.h>

#include <cstring>

#include "userspace/detect/rank_exit.h"
#include "userspace/registry/exit_cause.h"
#include "userspace/registry/rank_registry.h"

namespace argus {
namespace {

argus_exit_info signal_info(int sig, uint32_t sender, const char* comm, uint32_t flags = ARGUS_EXIT_F_SIGNAL) {
  argus_exit_info i{};
  i.signal = sig;
  i.sender_tgid = sender;
  i.flags = flags;
  std::strncpy(i.sender_comm, comm, sizeof(i.sender_comm));
  return i;
}

RankSnapshot dead_rank(ExitReason reason, int code, const ExitCause& c) {
  RankSnapshot r;
  r.pid = 4242;
  r.job_id = "J";
  r.rank = 2;
  r.exited = true;
  r.exit_reason = reason;
  r.exit_code = code;
  r.exit_cause = c;
  return r;
}

TEST(RankExit, SignalNames) {
  EXPECT_EQ(signal_name(9), "SIGKILL");
  EXPECT_EQ(signal_name(15), "SIGTERM");
  EXPECT_EQ(signal_name(11), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGRTMIN + 3), "SIGRTMIN+3");
  EXPECT_EQ(signal_name(200), "signal 200");
  EXPECT_EQ(format_bytes(64u << 20), "64 MiB");
  EXPECT_EQ(format_bytes(1536u << 20), "1.5 GiB");
  EXPECT_EQ(format_bytes(512), "512 B");
}

TEST(RankExit, KillFromAProcessKeepsItsSender) {
  const auto info = signal_info(9, 900, "kill");
  const ExitCause c = exit_cause_of(9, &info, false);
  EXPECT_EQ(c.signal, 9);
  EXPECT_EQ(c.sender_pid, 900);
  EXPECT_EQ(c.sender_comm, "kill");
  EXPECT_FALSE(c.oom);
  EXPECT_EQ(exit_reason_of(9, c), ExitReason::kSignal);
  // Even when the OOM killer's count rose: a user's kill is no OOM kill.
  EXPECT_FALSE(exit_cause_of(9, &info, true).oom);
}

TEST(RankExit, SenderOfAnotherSignalIsNotKept) {
  const auto info = signal_info(15, 900, "bash");  // SIGTERM remembered, died of SIGSEGV
  const ExitCause c = exit_cause_of(11, &info, false);
  EXPECT_EQ(c.signal, 11);
  EXPECT_EQ(c.sender_pid, -1);
  EXPECT_EQ(exit_cause_of(11, nullptr, false).sender_pid, -1);
}

TEST(RankExit, OomFromMarkVictimOrFromTheCgroupCount) {
  const auto victim = signal_info(9, 0, "kernel", ARGUS_EXIT_F_SIGNAL | ARGUS_EXIT_F_KERNEL | ARGUS_EXIT_F_OOM);
  ExitCause c = exit_cause_of(9, &victim, false);
  EXPECT_TRUE(c.oom);
  EXPECT_EQ(c.sender_pid, 0);
  EXPECT_EQ(c.sender_comm, "kernel");
  EXPECT_EQ(exit_reason_of(9, c), ExitReason::kOom);
  // mark_victim blind: the kernel's SIGKILL with oom_kill risen is OOM ...
  const auto kernel_kill = signal_info(9, 0, "kernel", ARGUS_EXIT_F_SIGNAL | ARGUS_EXIT_F_KERNEL);
  EXPECT_TRUE(exit_cause_of(9, &kernel_kill, true).oom);
  EXPECT_TRUE(exit_cause_of(9, nullptr, true).oom);  // ... and with no probe at all
  EXPECT_FALSE(exit_cause_of(9, &kernel_kill, false).oom);
  EXPECT_FALSE(exit_cause_of(3 << 8, nullptr, true).oom);  // exit(3) is no OOM kill
}

TEST(RankExit, SummariesSayWhatHappened) {
  ExitCause kill;
  kill.signal = 9;
  kill.sender_pid = 900;
  kill.sender_comm = "kill";
  EXPECT_EQ(rank_exit_event(dead_rank(ExitReason::kSignal, 9, kill), 1).summary,
            "rank 2 of job J (pid 4242) was killed by SIGKILL from pid 900 (`kill`)");
  ExitCause segv;
  segv.signal = 11;
  segv.sender_pid = 0;
  segv.sender_comm = "kernel";
  EXPECT_EQ(exit_phrase(dead_rank(ExitReason::kSignal, 11, segv)), "killed by SIGSEGV from the kernel");
  ExitCause oom;
  oom.signal = 9;
  oom.oom = true;
  procfs::MemcgState m;
  m.path = "/x";
  m.dir = "/sys/fs/cgroup/memory/x";
  m.version = 1;
  m.limit_bytes = 64u << 20;
  m.peak_bytes = 64u << 20;
  m.oom_kills = 1;
  oom.oom_details = oom_details(m, "mark_victim");
  const DetectedEvent ev = rank_exit_event(dead_rank(ExitReason::kOom, 9, oom), 1);
  EXPECT_EQ(ev.summary,
            "rank 2 of job J (pid 4242) was killed by the OOM killer: memory cgroup /x at its 64 MiB limit");
  EXPECT_EQ(ev.kind, EventKind::kRankExit);
  EXPECT_EQ(ev.rank, 2);
  EXPECT_EQ(ev.evidence["reason"], "oom");
  EXPECT_EQ(ev.evidence["signal_name"], "SIGKILL");
  EXPECT_EQ(ev.evidence["oom"]["cgroup"], "/x");
  EXPECT_EQ(ev.evidence["oom"]["limit_bytes"], 64u << 20);
  EXPECT_EQ(ev.evidence["oom"]["oom_kills"], 1);
  EXPECT_FALSE(ev.evidence["oom"].contains("usage_bytes"));
  EXPECT_TRUE(ev.evidence["code"].is_null());
  EXPECT_EQ(rank_exit_event(dead_rank(ExitReason::kExit, 3, {}), 1).summary, "rank 2 of job J (pid 4242) exited with code 3");
  EXPECT_EQ(exit_phrase(dead_rank(ExitReason::kExit, -1, {})), "ended (its exit code was not seen)");
}

TEST(RankExit, EvidenceOfAnExitAndOfAKill) {
  ExitCause c;
  c.last_python_stack = {{"frames", {"<module> (t.py:3)", "step (t.py:9)"}}};
  const auto e = exit_evidence(dead_rank(ExitReason::kExit, 3, c));
  EXPECT_EQ(e["pid"], 4242);
  EXPECT_EQ(e["reason"], "exit");
  EXPECT_EQ(e["code"], 3);
  EXPECT_TRUE(e["signal"].is_null());
  EXPECT_TRUE(e["sender"].is_null());
  EXPECT_TRUE(e["oom"].is_null());
  EXPECT_EQ(e["last_python_stack"]["frames"][1], "step (t.py:9)");
  ExitCause k;
  k.signal = 9;
  k.sender_pid = 900;
  k.sender_comm = "kill";
  const auto s = exit_evidence(dead_rank(ExitReason::kSignal, 9, k));
  EXPECT_EQ(s["signal"], 9);
  EXPECT_EQ(s["signal_name"], "SIGKILL");
  EXPECT_EQ(s["sender"]["pid"], 900);
  EXPECT_EQ(s["sender"]["comm"], "kill");
  EXPECT_TRUE(s["last_python_stack"].is_null());
}

struct FixedClock : Clock {
  uint64_t monotonic_ns() const override { return 1; }
  double unix_seconds() const override { return 100; }
};

TEST(RankExit, RegistryKeepsTheCauseAndOomWinsOverTheSignal) {
  FixedClock clock;
  RankRegistry reg(clock, {"n", 30, 10, false});
  RankIdentity id;
  id.job_id = "J";
  id.rank = 0;
  reg.track(7, 1, "a", id, {});
  ExitCause c;
  c.oom = true;
  c.sender_pid = 0;
  reg.on_exit(7, 9, c);
  auto snap = reg.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].exit_reason, ExitReason::kOom);
  EXPECT_EQ(snap[0].exit_code, 9);
  EXPECT_EQ(snap[0].exit_cause.signal, 9);
  EXPECT_TRUE(snap[0].exit_cause.oom);
}

}  // namespace
}  // namespace argus
