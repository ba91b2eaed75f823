#!/usr/bin/env bash
# Argus overhead benchmarks (what `make bench` runs, after `make build`).
#
#  a. probe cost: bench/probe_cost_bench times cheap NCCL and CUDA calls in the sim's
#     shims (ncclAllReduce, cuStreamSynchronize, cuLaunchKernel) unprobed, under an
#     LD_PRELOAD interposer that counts them (bench/interpose_count.c: the floor of
#     in-process hooking), with argus-agent --probes default and deep, and with the
#     same uprobes placed by bpftrace, counting and (a peer doing Argus's kind of work) timing
#     each call into a histogram; against a plain call and a getppid syscall.
#  b. agent cost: argus-agent's CPU (share of one core) and RSS while it watches
#     an 8-rank argus-sim job, with --probes default and --probes deep; its floor
#     with no rank to watch; and its discovery cost under 10 execs/s of short-lived processes.
#  c. GPU layer (bench/gpu_handoff.sh): libargus-cupti.so's per-batch cost with and without
#     the agent attached (the USDT hand-off), records fired vs received, and the size of the
#     agent's per-step kernel sketch. Skipped when libargus-cupti.so was not built.
#  d. Python GC probes (bench/python_gc_bench.sh): gc.collect(0) with and without the agent's
#     collector probes (uprobe pair on gc_collect_main, and the USDT pair), per collection.
#  e. Python stack sampler (bench/python_sample.sh): a CPU-bound Python loop's throughput
#     with no agent, with the agent sampling at 19 Hz and at 99 Hz, as ratios; its summary
#     is in WORK/python/summary.txt.
#  f. Python stack dumps (bench/python_dump_bench.py): argusctl stacks on an 8-rank Python
#     job against py-spy dump of the same ranks, in wall time and in how long each stalls a rank.
#  g. sched_switch probe (bench/sched_switch.sh): context switches per second of a pipe
#     ping-pong without the agent, with it, and tracked as a rank, as ratios; BPF ns per run.
#  h. detach time (bench/detach_time.sh): the agent's stop with ~100 uprobes attached, one perf
#     event per probe against uprobe_multi links, and the release of one library pair.
#  i. idle floor (bench/agent_idle.sh): the agent's CPU with nothing to watch, thread by thread.
#     Then with one quiet rank (a process that maps NCCL and calls nothing).
#  j. attach latency (bench/attach_latency.py): a new NCCL file mapped (at exec, or dlopened 2 s
#     later) to its probes attached, p50/p99, with the machine idle and with every core busy.
#  k. ring-buffer events/s (bench/event_rate.py): 10^4..10^6 events/s of paced collectives, with
#     the default ring buffer and a small one: events sent, received, lost, the agent's CPU.
#  l. training-loop overhead (bench/train_overhead.sh): an 8-rank sim job at 10k and 100k
#     launches/s/rank, wall time with no agent, --probes default and deep, alternating rounds.
#  m. scale (bench/scale.sh): 8, 64 and 512 simulated ranks: /metrics bytes, series, scrape
#     time, the agent's CPU and RSS.
#  n. rules at scale (bench/rules_scale.py): the recording and alert rules evaluated by a real
#     Prometheus over a generated job of 1,296 and 12,960 ranks (an 8-rank agent scrape as the
#     template): evaluation time during the run and alone, head series, Prometheus CPU and RSS,
#     and whether the rules found exactly the injected straggler and down link.
#  o. GPU records folded (bench/gpu_fold.py): the agent's timeline cost per kernel when the
#     producer folds compute kernels (gpu/gpu_fold.h) against one record per kernel, the
#     records crossing per kernel, and the producer's folding cost per kernel; as root, the
#     whole agent end to end, and what crosses per step (spans across buffers or cut per buffer).
#  (p. stragglers and hangs over parallel layouts: bench/layout_detection.py.)
#  q. c10d probes (bench/c10d_overhead.py): a one-rank Gloo dist.all_reduce per call with no tracer,
#     the agent, its probes alone and bpftrace's uprobe; a 2-rank DDP loop's steps/s with and without.
#  r. device memory probes (bench/gpu_memory_overhead.py): cuMemAlloc/Free, cuMemAllocAsync/FreeAsync and
#     cuMemCreate/Map/Unmap/Release on the libcuda shim with no tracer, the agent and bpftrace doing the same
#     work, alternating rounds; BPF ns per call set; the share of a step at PyTorch's allocation rates; and
#     the agent's counts checked against the calls made.
#
# Every figure in the summary is a ratio between measurements of this one run
# (raw ns are shown next to them). Raw results stay in build/bench-results/<stamp>/.
# Needs root (BPF). Takes ~39 minutes on 2 CPUs (parts j-o ~28 of them; skip any with its knob).
#
# Knobs (environment): BUILD_DIR (build), ARGUS_BENCH_LOAD_SECONDS (20), ARGUS_BENCH_IDLE_SECONDS (8),
# ARGUS_BENCH_MIN_TIME (0.3 s per benchmark), ARGUS_BENCH_REPS (3),
# ARGUS_BENCH_SKIP_BPFTRACE=1, ARGUS_BENCH_SKIP_LOAD=1, ARGUS_BENCH_SKIP_CHURN=1, ARGUS_BENCH_SKIP_GPU=1, ARGUS_BENCH_SKIP_PYGC=1, ARGUS_BENCH_SKIP_PYTHON=1,
# ARGUS_BENCH_SKIP_SCHED=1 (and ARGUS_BENCH_SCHED_*: see bench/sched_switch.sh),
# ARGUS_BENCH_SKIP_DETACH=1 (and ARGUS_BENCH_DETACH_*: see bench/detach_time.sh),
# ARGUS_BENCH_SKIP_IDLE=1 (and ARGUS_BENCH_IDLE_*, ARGUS_BENCH_IDLE_RANK=0: see bench/agent_idle.sh), ARGUS_BENCH_BPF_STATS=0 (part a leaves kernel.bpf_stats_enabled alone),
# ARGUS_BENCH_SKIP_ATTACH=1 (and ARGUS_BENCH_ATTACH_N: see bench/attach_latency.py),
# ARGUS_BENCH_SKIP_RATE=1 (and ARGUS_BENCH_RATE*: see bench/event_rate.py),
# ARGUS_BENCH_SKIP_TRAIN=1 (and ARGUS_BENCH_TRAIN_*: see bench/train_overhead.sh),
# ARGUS_BENCH_SKIP_SCALE=1 (and ARGUS_BENCH_SCALE_*: see bench/scale.sh),
# ARGUS_BENCH_SKIP_RULES=1 (and ARGUS_BENCH_RULES_*: see bench/rules_scale.py), ARGUS_BENCH_SKIP_FOLD=1, ARGUS_BENCH_SKIP_LAYOUTS=1 (and ARGUS_BENCH_LAYOUT_RUNS, ARGUS_BENCH_LAYOUT_FP_SECONDS, ARGUS_BENCH_LAYOUT_FP_LAYOUTS: see bench/layout_detection.py), ARGUS_BENCH_SKIP_C10D=1, ARGUS_BENCH_SKIP_GPUMEM=1,
# ARGUS_BENCH_SKIP_PYDUMP=1 (and ARGUS_BENCH_PY*, ARGUS_NCCL, ARGUS_PYSPY: see bench/python_dump_bench.py)
# (and ARGUS_BENCH_GPU_*: see bench/gpu_handoff.sh),
# ARGUS_BENCH_ALLOW_OTHER_TRACERS=1 (measure even while another agent/bpftrace runs; flagged).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "${BUILD_DIR:-build}" 2>/dev/null && pwd) || {
  echo "bench: no build directory (${BUILD_DIR:-build}); run 'make build' first" >&2
  exit 1
}
LOAD_SECONDS=${ARGUS_BENCH_LOAD_SECONDS:-20}
IDLE_SECONDS=${ARGUS_BENCH_IDLE_SECONDS:-8}
MIN_TIME=${ARGUS_BENCH_MIN_TIME:-0.3}
REPS=${ARGUS_BENCH_REPS:-3}
RANKS=8

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: must run as root: argus-agent and bpftrace load BPF programs and attach uprobes" >&2
  echo "bench: (CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN); try: sudo make bench" >&2
  exit 1
fi

BENCH_BIN=$BUILD/bin/probe_cost_bench
AGENT=$BUILD/bin/argus-agent
SIM=$BUILD/bin/argus-sim
SHIM=$BUILD/lib/libnccl.so.2
CUDA_SHIM=$BUILD/lib/libcuda.so.1
INTERPOSER=$BUILD/lib/libargus_bench_interpose.so
for f in "$BENCH_BIN" "$AGENT" "$SIM" "$SHIM" "$CUDA_SHIM" "$INTERPOSER"; do
  [ -e "$f" ] || { echo "bench: missing $f; run 'make build' first" >&2; exit 1; }
done
for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "bench: needs $tool (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

STAMP=$(date -u +%Y%m%dT%H%M%SZ)
WORK=$BUILD/bench-results/$STAMP
mkdir -p "$WORK"
FACTS=$WORK/facts.txt
: >"$FACTS"
fact() { printf '%s=%s\n' "$1" "$2" >>"$FACTS"; }
log() { printf 'bench: %s\n' "$*" >&2; }
now() { date +%s.%N; }

# ---- cleanup: every process this script starts, by its id ----
AGENT_PID=""
BPFTRACE_PID=""
SIM_PID=""
BPF_STATS_OLD=""
cleanup() {
  local rc=$? pid
  bpf_stats_restore
  if [ -n "$SIM_PID" ]; then kill -TERM -- "-$SIM_PID" 2>/dev/null || true; fi
  if [ -n "$BPFTRACE_PID" ]; then kill -INT "$BPFTRACE_PID" 2>/dev/null || true; fi
  if [ -n "$AGENT_PID" ]; then kill -TERM "$AGENT_PID" 2>/dev/null || true; fi
  # An agent detaching its probes takes seconds (see stop_agent): wait, so that
  # none of our probes outlives the script, then reap.
  for _ in $(seq 1 300); do
    alive=0
    for pid in $SIM_PID $BPFTRACE_PID $AGENT_PID; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  if [ -n "$SIM_PID" ]; then kill -KILL -- "-$SIM_PID" 2>/dev/null || true; fi
  for pid in $BPFTRACE_PID $AGENT_PID; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in $SIM_PID $BPFTRACE_PID $AGENT_PID; do wait "$pid" 2>/dev/null || true; done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# BPF run time per program (kernel.bpf_stats_enabled) while part a's probed runs
# go: what each probe's program costs apart from the trap, Argus's and bpftrace's
# alike (the counting itself adds two clock reads to every program run, on both
# sides). ARGUS_BENCH_BPF_STATS=0 leaves the sysctl alone.
bpf_stats_on() {
  [ "${ARGUS_BENCH_BPF_STATS:-1}" = 1 ] && command -v bpftool >/dev/null || return 0
  BPF_STATS_OLD=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null) || return 0
  sysctl -q -w kernel.bpf_stats_enabled=1 || BPF_STATS_OLD=""
}
bpf_stats_restore() {
  [ -z "$BPF_STATS_OLD" ] || sysctl -q -w kernel.bpf_stats_enabled="$BPF_STATS_OLD" || true
  BPF_STATS_OLD=""
}
save_prog_stats() {  # save_prog_stats RUN: every loaded program's run count and time
  [ -z "$BPF_STATS_OLD" ] || bpftool prog show -j >"$WORK/progs-$1.json" 2>/dev/null || true
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# CPU time of a process in clock ticks (utime + stime, all threads).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
# The same in ns from the scheduler (threads alive now), finer than ticks.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
# Per thread: "tid ticks comm" lines (which of the agent's threads spends the CPU).
thread_ticks() {
  local t
  for t in /proc/"$1"/task/*; do
    [ -r "$t/stat" ] || continue
    printf '%s %s %s\n' "${t##*/}" "$(sed 's/.*) //' "$t/stat" | awk '{print $12 + $13}')" "$(cat "$t/comm")"
  done 2>/dev/null
}

# start_agent PROBESET LOGNAME: starts argus-agent, waits for /healthz.
start_agent() {
  local probes=$1 name=$2
  PORT=$(free_port)
  "$AGENT" --listen "127.0.0.1:$PORT" --probes "$probes" --log-level warn >"$WORK/agent-$name.log" 2>&1 &
  AGENT_PID=$!
  local t0
  t0=$(now)
  for _ in $(seq 1 150); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null; then
      fact "agent_${name}_ready_s" "$(python3 -c "print(round($(now) - $t0, 2))")"
      log "argus-agent --probes $probes up (pid $AGENT_PID, port $PORT)"
      return 0
    fi
    if ! kill -0 "$AGENT_PID" 2>/dev/null; then
      log "argus-agent --probes $probes exited before /healthz answered; its log:"
      tail -20 "$WORK/agent-$name.log" >&2
      AGENT_PID=""
      return 1
    fi
    sleep 0.1
  done
  log "argus-agent --probes $probes: no /healthz after 15 s; its log:"
  tail -20 "$WORK/agent-$name.log" >&2
  stop_agent "$name"
  return 1
}

# stop_agent NAME: records RSS, how long it takes to exit and how it ended.
# (Closing a uprobe's perf event waits an RCU grace period in the kernel, so a
# stop that detaches many probes can take seconds; waited for up to 90 s.)
stop_agent() {
  local name=$1 rc=0 ts
  [ -n "$AGENT_PID" ] || return 0
  if kill -0 "$AGENT_PID" 2>/dev/null; then
    grep -E '^(VmRSS|VmHWM):' "/proc/$AGENT_PID/status" | awk -v n="$name" '{printf "agent_%s_%s_kib=%s\n", n, tolower(substr($1, 1, length($1) - 1)), $2}' >>"$FACTS"
    fact "agent_${name}_probes_at_stop" "$(curl -fsS -m 5 "http://127.0.0.1:$PORT/metrics" 2>/dev/null | awk '/^argus_agent_probes_attached/ {s += $2} END {print s + 0}')"
    ts=$(now)
    kill -TERM "$AGENT_PID" 2>/dev/null || true
    for _ in $(seq 1 900); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 0.1; done
    fact "agent_${name}_stop_s" "$(python3 -c "print(round($(now) - $ts, 2))")"
    if kill -0 "$AGENT_PID" 2>/dev/null; then
      log "argus-agent ($name) still exiting 90 s after SIGTERM (kernel stack: $(tr '\n' ' ' <"/proc/$AGENT_PID/stack" 2>/dev/null | cut -c1-200)); sending SIGKILL"
      fact "agent_${name}_stop_hung" 1
      kill -KILL "$AGENT_PID" 2>/dev/null || true
    fi
  else
    log "argus-agent ($name) had already exited"
    fact "agent_${name}_died_early" 1
  fi
  wait "$AGENT_PID" 2>/dev/null || rc=$?
  fact "agent_${name}_exit_code" "$rc"
  [ "$rc" -eq 0 ] || log "argus-agent ($name) exited with status $rc (log: $WORK/agent-$name.log)"
  AGENT_PID=""
}

scrape() {  # scrape FILE-PREFIX: /metrics and /api/v1/ranks of the running agent
  curl -fsS -m 5 "http://127.0.0.1:$PORT/metrics" >"$1.metrics" 2>/dev/null || : >"$1.metrics"
  curl -fsS -m 5 "http://127.0.0.1:$PORT/api/v1/ranks" >"$1.ranks.json" 2>/dev/null || echo '{}' >"$1.ranks.json"
}

# run_bench NAME [ENV=VALUE...]: one run of probe_cost_bench, JSON into $WORK/bench-NAME.json.
run_bench() {
  local name=$1 rc=0
  shift
  env ARGUS_BENCH_NCCL_LIB="$BENCH_SHIM" ARGUS_BENCH_CUDA_LIB="$BENCH_CUDA" "$@" timeout 300 "$BENCH_BIN" \
    --benchmark_min_time="$MIN_TIME" --benchmark_repetitions="$REPS" \
    --benchmark_report_aggregates_only=true \
    --benchmark_out="$WORK/bench-$name.json" --benchmark_out_format=json \
    >"$WORK/bench-$name.txt" 2>&1 || rc=$?
  fact "bench_${name}_exit_code" "$rc"
  grep -E '^probe_cost_bench:' "$WORK/bench-$name.txt" >&2 || true
  return "$rc"
}

# run_part SKIP_VAR LABEL SCRIPT OUT LOG FACT: one sub-bench script (bench/SCRIPT OUT_DIR)
# unless SKIP_VAR=1; its output in $WORK/LOG, its status a fact; a failure is said, not fatal.
run_part() {
  local skip=$1 label=$2 script=$3 out=$4 logname=$5 factname=$6 rc=0
  if [ "${!skip:-0}" = 1 ]; then
    log "$label: skipped"
    return 0
  fi
  log "$label: bench/$script"
  BUILD_DIR=$BUILD "$ROOT/bench/$script" "$WORK/$out" >"$WORK/$logname" 2>&1 || rc=$?
  fact "$factname" "$rc"
  [ "$rc" -eq 0 ] || log "bench/$script failed (status $rc): $WORK/$logname"
}

# ---- the run ----
fact date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
fact kernel "$(uname -r)"
fact cpus "$(nproc)"
fact cpu_model "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
fact virt "$(systemd-detect-virt 2>/dev/null || echo unknown)"
fact loadavg_start "$(cut -d' ' -f1-3 /proc/loadavg)"
fact clk_tck "$(getconf CLK_TCK)"
fact git_head "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo none)"
# Another argus-agent (or bpftrace) on this machine would find the bench and
# the sim (they map NCCL) and probe them too: "unprobed" would not be. Wait a
# minute for them to go, then refuse (ARGUS_BENCH_ALLOW_OTHER_TRACERS=1: run
# anyway, flagged in the summary).
other_tracers() {
  local pid
  for pid in $(pgrep -x argus-agent; pgrep -x bpftrace); do
    [ "$pid" = "$AGENT_PID" ] || [ "$pid" = "$BPFTRACE_PID" ] || printf '%s ' "$pid"
  done
  true
}
check_tracers() {  # check_tracers PHASE
  local others
  others=$(other_tracers)
  [ -z "$others" ] || { log "other tracers running during $1: pids $others"; fact "other_tracers_$1" "$others"; }
}
others=$(other_tracers)
if [ -n "$others" ]; then
  log "other argus-agent/bpftrace processes are running (pids $others): they would probe what we time"
  if [ "${ARGUS_BENCH_ALLOW_OTHER_TRACERS:-0}" != 1 ]; then
    log "waiting up to 60 s for them to exit"
    for _ in $(seq 1 60); do others=$(other_tracers); [ -z "$others" ] && break; sleep 1; done
    if [ -n "$others" ]; then
      for pid in $others; do log "  $pid: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)"; done
      log "still running; stop them, or set ARGUS_BENCH_ALLOW_OTHER_TRACERS=1 to measure anyway (flagged)"
      exit 1
    fi
  fi
fi
check_tracers start
log "results in $WORK"

# The bench maps its own copies of the shims: files (inodes) of their own, which
# nobody else's agent has probed and nobody's rebuild replaces mid-run.
BENCH_SHIM=$WORK/libnccl.so.2
BENCH_CUDA=$WORK/libcuda.so.1
cp "$SHIM" "$BENCH_SHIM"
cp "$CUDA_SHIM" "$BENCH_CUDA"

# a. probe cost ------------------------------------------------------------
log "a. probe cost: unprobed"
unprobed_rc=0
run_bench unprobed ARGUS_BENCH_EXPECT_UNPROBED=1 || unprobed_rc=$?
if [ "$unprobed_rc" -eq 3 ] && [ "${ARGUS_BENCH_ALLOW_OTHER_TRACERS:-0}" = 1 ] && [ -s "$WORK/bench-unprobed.json" ]; then
  log "the unprobed run was probed by another tracer; going on (ARGUS_BENCH_ALLOW_OTHER_TRACERS=1), flagged"
  fact unprobed_run_was_probed 1
elif [ "$unprobed_rc" -ne 0 ]; then
  log "the unprobed run failed (status $unprobed_rc): $WORK/bench-unprobed.txt"
  exit 1
fi
check_tracers unprobed

log "a. probe cost: an LD_PRELOAD interposer counting the same calls"
if run_bench interpose LD_PRELOAD="$INTERPOSER" ARGUS_BENCH_EXPECT_UNPROBED=1; then
  counts=$(grep -m1 '^interpose_count:' "$WORK/bench-interpose.txt" | sed 's/^interpose_count: //')
  fact interpose_counts "$counts"
  # It must have seen every call it is timed on, or its figures are the unprobed ones.
  if [ -z "$counts" ] || echo "$counts" | grep -qE '(^| )0( |$)'; then
    log "the interposer did not count every call ($counts): its figures are not interposed"
    fact interpose_failed 1
  fi
else
  log "the interposer run failed: $WORK/bench-interpose.txt"
fi
check_tracers interpose

bpf_stats_on
log "a. probe cost: argus-agent --probes default"
if start_agent default bench; then
  t0=$(now); c0=$(cpu_ticks "$AGENT_PID")
  if run_bench argus ARGUS_BENCH_WAIT_PROBED=20; then :; else log "the probed run failed (did the agent attach?)"; fi
  t1=$(now); c1=$(cpu_ticks "$AGENT_PID" 2>/dev/null || echo "$c0")
  fact agent_bench_wall_s "$(python3 -c "print($t1 - $t0)")"
  fact agent_bench_cpu_ticks "$((c1 - c0))"
  scrape "$WORK/agent-bench"
  save_prog_stats argus
  check_tracers argus
  stop_agent bench
fi

log "a. probe cost: argus-agent --probes deep"
if start_agent deep bench-deep; then
  run_bench argus_deep ARGUS_BENCH_WAIT_PROBED=20 ARGUS_BENCH_WAIT_LAUNCH=1 ||
    log "the deep probed run failed (did the agent attach?)"
  save_prog_stats argus_deep
  check_tracers argus_deep
  stop_agent bench-deep
fi

if [ "${ARGUS_BENCH_SKIP_BPFTRACE:-0}" != 1 ] && command -v bpftrace >/dev/null; then
  log "a. probe cost: the same uprobes from bpftrace"
  BT_PROG="uprobe:$BENCH_SHIM:ncclAllReduce, uretprobe:$BENCH_SHIM:ncclAllReduce,
 uprobe:$BENCH_SHIM:ncclGroupStart, uprobe:$BENCH_SHIM:ncclGroupEnd,
 uprobe:$BENCH_CUDA:cuStreamSynchronize, uretprobe:$BENCH_CUDA:cuStreamSynchronize,
 uprobe:$BENCH_CUDA:cuLaunchKernel, uretprobe:$BENCH_CUDA:cuLaunchKernel { @c = count(); }"
  bpftrace -e "$BT_PROG" >"$WORK/bpftrace.log" 2>&1 &
  BPFTRACE_PID=$!
  run_bench bpftrace ARGUS_BENCH_WAIT_PROBED=30 ARGUS_BENCH_WAIT_LAUNCH=1 || log "the bpftrace run failed: $WORK/bpftrace.log"
  save_prog_stats bpftrace
  check_tracers bpftrace
  kill -INT "$BPFTRACE_PID" 2>/dev/null || true
  wait "$BPFTRACE_PID" 2>/dev/null || true
  BPFTRACE_PID=""

  # A peer doing the kind of work Argus does, not just counting: each call
  # timed entry->return into a histogram (a per-thread start, as Argus keeps).
  log "a. probe cost: bpftrace timing the same calls"
  BT_TIMED="uprobe:$BENCH_SHIM:ncclAllReduce, uprobe:$BENCH_CUDA:cuStreamSynchronize, uprobe:$BENCH_CUDA:cuLaunchKernel
 { @calls = count(); @start[tid] = nsecs; }
 uretprobe:$BENCH_SHIM:ncclAllReduce, uretprobe:$BENCH_CUDA:cuStreamSynchronize, uretprobe:$BENCH_CUDA:cuLaunchKernel
 /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }
 uprobe:$BENCH_SHIM:ncclGroupStart, uprobe:$BENCH_SHIM:ncclGroupEnd { @groups = count(); }"
  bpftrace -e "$BT_TIMED" >"$WORK/bpftrace-timed.log" 2>&1 &
  BPFTRACE_PID=$!
  run_bench bpftrace_timed ARGUS_BENCH_WAIT_PROBED=30 ARGUS_BENCH_WAIT_LAUNCH=1 ||
    log "the timed bpftrace run failed: $WORK/bpftrace-timed.log"
  save_prog_stats bpftrace_timed
  check_tracers bpftrace_timed
  kill -INT "$BPFTRACE_PID" 2>/dev/null || true
  wait "$BPFTRACE_PID" 2>/dev/null || true
  BPFTRACE_PID=""
else
  log "a. bpftrace: skipped"
fi
bpf_stats_restore

# b. agent cost at the sim's call rate --------------------------------------
if [ "${ARGUS_BENCH_SKIP_LOAD:-0}" != 1 ]; then
  for probes in default deep; do
    log "b. agent cost: --probes $probes, argus-sim --ranks $RANKS for ${LOAD_SECONDS} s"
    start_agent "$probes" "$probes" || continue
    # The agent with no rank to watch: its floor (/proc scans, exec events of
    # whatever else runs on the machine), subtracted from the loaded figure.
    sleep 1
    scrape "$WORK/idle-$probes-t0"
    t0=$(now); c0=$(cpu_ticks "$AGENT_PID"); n0=$(cpu_ns "$AGENT_PID")
    sleep "$IDLE_SECONDS"
    t1=$(now); c1=$(cpu_ticks "$AGENT_PID"); n1=$(cpu_ns "$AGENT_PID")
    scrape "$WORK/idle-$probes-t1"
    fact "idle_${probes}_wall_s" "$(python3 -c "print($t1 - $t0)")"
    fact "idle_${probes}_cpu_ticks" "$((c1 - c0))"
    fact "idle_${probes}_cpu_ns" "$((n1 - n0))"
    job="bench-$probes-$$"
    fact "sim_${probes}_job" "$job"
    setsid "$SIM" --ranks "$RANKS" --steps 0 --step-ms 100 --init-ms 200 --job-id "$job" \
      --out "$WORK/sim-$probes" --quiet >"$WORK/sim-$probes.log" 2>&1 &
    SIM_PID=$!
    ts=$(now)
    sleep 0.2
    pgid=$(ps -o pgid= -p "$SIM_PID" 2>/dev/null | tr -d ' ' || true)
    [ -z "$pgid" ] || [ "$pgid" = "$SIM_PID" ] || log "note: argus-sim pid $SIM_PID is in process group $pgid"
    # Wait until the agent tracks every rank (discovery latency), at most 15 s.
    tracked=0
    for _ in $(seq 1 150); do
      tracked=$(curl -fsS -m 2 "http://127.0.0.1:$PORT/api/v1/ranks" 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for r in d.get("ranks", []) if r.get("job_id") == sys.argv[1] and r.get("state") == "running"))' "$job" 2>/dev/null || echo 0)
      [ "$tracked" -ge "$RANKS" ] && break
      kill -0 "$SIM_PID" 2>/dev/null || break
      sleep 0.1
    done
    fact "sim_${probes}_ranks_tracked" "$tracked"
    fact "sim_${probes}_all_tracked_after_s" "$(python3 -c "print($(now) - $ts)")"
    [ "$tracked" -ge "$RANKS" ] || log "only $tracked of $RANKS ranks tracked (sim log: $WORK/sim-$probes.log)"
    sleep 2
    scrape "$WORK/load-$probes-t0"
    thread_ticks "$AGENT_PID" >"$WORK/load-$probes-t0.threads"
    t0=$(now); c0=$(cpu_ticks "$AGENT_PID"); n0=$(cpu_ns "$AGENT_PID")
    sleep "$LOAD_SECONDS"
    t1=$(now); c1=$(cpu_ticks "$AGENT_PID" 2>/dev/null || echo "$c0"); n1=$(cpu_ns "$AGENT_PID" 2>/dev/null || echo "$n0")
    thread_ticks "$AGENT_PID" >"$WORK/load-$probes-t1.threads"
    scrape "$WORK/load-$probes-t1"
    check_tracers "load_$probes"
    fact "load_${probes}_wall_s" "$(python3 -c "print($t1 - $t0)")"
    fact "load_${probes}_cpu_ticks" "$((c1 - c0))"
    fact "load_${probes}_cpu_ns" "$((n1 - n0))"
    kill -0 "$SIM_PID" 2>/dev/null || log "argus-sim exited early (log: $WORK/sim-$probes.log)"
    # Stop the job; its ranks write their truth files on the way out.
    kill -TERM "$SIM_PID" 2>/dev/null || true
    sim_rc=0
    for _ in $(seq 1 100); do kill -0 "$SIM_PID" 2>/dev/null || break; sleep 0.1; done
    kill -TERM -- "-$SIM_PID" 2>/dev/null || true
    wait "$SIM_PID" 2>/dev/null || sim_rc=$?
    fact "sim_${probes}_exit_code" "$sim_rc"
    SIM_PID=""
    sleep 1.5  # the agent decodes the last events and the exits
    scrape "$WORK/load-$probes-final"
    if [ "$probes" = default ] && [ "${ARGUS_BENCH_SKIP_CHURN:-0}" != 1 ]; then
      # Discovery cost: the agent looks at every new process (exec event, then
      # rechecks while it is young). 10 execs/s of processes that live 3 s (so
      # ~30 young non-rank processes alive at once), none of them a rank.
      log "b. agent cost: --probes default, 10 execs/s of 'sleep 3' for ${IDLE_SECONDS} s"
      t0=$(now); c0=$(cpu_ticks "$AGENT_PID"); n0=$(cpu_ns "$AGENT_PID")
      python3 -c '
import subprocess, sys, time
span = float(sys.argv[1]); t0 = time.monotonic(); kids = []
while time.monotonic() - t0 < span:
    kids.append(subprocess.Popen(["sleep", "3"]))
    time.sleep(max(0.0, len(kids) / 10.0 - (time.monotonic() - t0)))
print(len(kids))
for k in kids:
    if time.monotonic() - t0 > span + 0.5: k.kill()
    k.wait()' "$IDLE_SECONDS" >"$WORK/churn-execs.txt"
      t1=$(now); c1=$(cpu_ticks "$AGENT_PID"); n1=$(cpu_ns "$AGENT_PID")
      fact churn_wall_s "$(python3 -c "print($t1 - $t0)")"
      fact churn_execs "$(cat "$WORK/churn-execs.txt")"
      fact churn_cpu_ticks "$((c1 - c0))"
      fact churn_cpu_ns "$((n1 - n0))"
    fi
    stop_agent "$probes"
  done
fi

# c. GPU layer ---------------------------------------------------------------
if [ "${ARGUS_BENCH_SKIP_GPU:-0}" != 1 ] && [ -e "$BUILD/lib/libargus-cupti.so" ]; then
  log "c. GPU layer: bench/gpu_handoff.sh"
  gpu_rc=0
  BUILD_DIR=$BUILD "$ROOT/bench/gpu_handoff.sh" "$WORK/gpu" >"$WORK/gpu-handoff.log" 2>&1 || gpu_rc=$?
  fact gpu_handoff_exit_code "$gpu_rc"
  [ "$gpu_rc" -eq 0 ] || log "bench/gpu_handoff.sh failed (status $gpu_rc): $WORK/gpu-handoff.log"
else
  log "c. GPU layer: skipped"
fi

# d. Python GC probes ---------------------------------------------------------
PYGC_RC=skipped
if [ "${ARGUS_BENCH_SKIP_PYGC:-0}" != 1 ]; then
  log "d. Python GC probes: bench/python_gc_bench.sh"
  PYGC_RC=0
  BUILD_DIR=$BUILD "$ROOT/bench/python_gc_bench.sh" "$WORK/pygc" >"$WORK/python-gc.log" 2>&1 || PYGC_RC=$?
  fact python_gc_bench_exit_code "$PYGC_RC"
  [ "$PYGC_RC" = 0 ] || log "bench/python_gc_bench.sh failed (status $PYGC_RC): $WORK/python-gc.log"
else
  log "d. Python GC probes: skipped"
fi

# e. Python stack sampler ----------------------------------------------------
run_part ARGUS_BENCH_SKIP_PYTHON "e. Python stack sampler" python_sample.sh python python-sample.log python_sample_exit_code

# f. Python stack dumps ------------------------------------------------------
if [ "${ARGUS_BENCH_SKIP_PYDUMP:-0}" != 1 ]; then
  log "f. Python stack dumps: bench/python_dump_bench.py (8 ranks, argus vs py-spy)"
  pydump_rc=0
  BUILD_DIR=$BUILD python3 "$ROOT/bench/python_dump_bench.py" "$WORK/pydump" >"$WORK/python-dump.txt" \
    2>"$WORK/python-dump.log" || pydump_rc=$?
  fact python_dump_exit_code "$pydump_rc"
  [ "$pydump_rc" -eq 0 ] || log "bench/python_dump_bench.py failed (status $pydump_rc): $WORK/python-dump.log"
else
  log "f. Python stack dumps: skipped"
fi

# g. sched_switch probe (pipe ping-pong: no agent / agent / tracked rank) ----
run_part ARGUS_BENCH_SKIP_SCHED "g. sched_switch probe" sched_switch.sh sched sched-switch.log sched_switch_exit_code

# h. detach time (stop with ~100 probes: perf events vs uprobe_multi links) --
run_part ARGUS_BENCH_SKIP_DETACH "h. detach time" detach_time.sh detach detach.log detach_time_exit_code

# i. idle floor (the agent with nothing to watch, thread by thread) ---------
run_part ARGUS_BENCH_SKIP_IDLE "i. idle floor" agent_idle.sh idle idle.log agent_idle_exit_code

# j. attach latency (mapped to probes live; idle and every core busy) -------
run_part ARGUS_BENCH_SKIP_ATTACH "j. attach latency" attach_latency.py attach attach.log attach_latency_exit_code
run_part ARGUS_BENCH_SKIP_RATE "k. ring-buffer events/s" event_rate.py rate rate.log event_rate_exit_code
run_part ARGUS_BENCH_SKIP_TRAIN "l. training-loop overhead" train_overhead.sh train train.log train_overhead_exit_code
run_part ARGUS_BENCH_SKIP_SCALE "m. scale" scale.sh scale scale.log scale_exit_code
run_part ARGUS_BENCH_SKIP_RULES "n. rules at scale" rules_scale.py rules rules.log rules_scale_exit_code
run_part ARGUS_BENCH_SKIP_FOLD "o. GPU records folded" gpu_fold.py fold fold.log gpu_fold_exit_code
run_part ARGUS_BENCH_SKIP_LAYOUTS "p. stragglers and hangs over parallel layouts" layout_detection.py layouts layouts.log layout_detection_exit_code
run_part ARGUS_BENCH_SKIP_C10D "q. c10d probes (real torch, Gloo)" c10d_overhead.py c10d c10d.log c10d_overhead_exit_code
run_part ARGUS_BENCH_SKIP_GPUMEM "r. device memory probes" gpu_memory_overhead.py gpumem gpumem.log gpu_memory_overhead_exit_code
fact loadavg_end "$(cut -d' ' -f1-3 /proc/loadavg)"

python3 "$ROOT/bench/report.py" "$WORK" | tee "$WORK/summary.txt"
if [ "$PYGC_RC" = 0 ]; then tee -a "$WORK/summary.txt" <"$WORK/pygc/summary.txt"; fi
if [ -s "$WORK/python/summary.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/python/summary.txt"; fi
if [ -s "$WORK/python-dump.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/python-dump.txt"; fi
if [ -s "$WORK/sched/summary.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/sched/summary.txt"; fi
if [ -s "$WORK/detach/detach-summary.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/detach/detach-summary.txt"; fi
if [ -s "$WORK/idle/idle.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/idle/idle.txt"; fi
if [ -s "$WORK/idle/idle-rank.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/idle/idle-rank.txt"; fi
if [ -s "$WORK/attach/attach.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/attach/attach.txt"; fi
if [ -s "$WORK/rate/rate.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/rate/rate.txt"; fi
if [ -s "$WORK/train/train.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/train/train.txt"; fi
if [ -s "$WORK/layouts/layouts.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/layouts/layouts.txt"; fi
if [ -s "$WORK/scale/scale.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/scale/scale.txt"; fi
if [ -s "$WORK/rules/rules_scale.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/rules/rules_scale.txt"; fi
if [ -s "$WORK/fold/fold.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/fold/fold.txt"; fi
if [ -s "$WORK/c10d/c10d.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/c10d/c10d.txt"; fi
if [ -s "$WORK/gpumem/gpu_memory.txt" ]; then tee -a "$WORK/summary.txt" <"$WORK/gpumem/gpu_memory.txt"; fi
