#!/usr/bin/env bash
# What the GPU layer costs (issue item 8), in one run:
#
#  1. The injection library's hand-off, per batch of 256 records: the real
#     libargus-cupti.so converts a hand-built buffer of CUDA 13 CUPTI records
#     and fires argus:gpu_batch (build/bin/cupti_inject_bench --fire-batches N),
#     first with no agent ("unprobed"), then with argus-agent attached to the
#     library's USDT probes ("attached"), then with no agent again ("after",
#     the drift check). Ratio attached / unprobed, and the absolute delta per
#     batch = the USDT hand-off (trap + BPF copy of the batch into the ring
#     buffer). The agent's received records (argus_gpu_records_total) are
#     compared with the records the library fired, and
#     argus_agent_events_lost_total{source="gpu"} / argus_gpu_records_lost_total
#     show that nothing was lost.
#  2. The per-step kernel sketch the agent keeps: argus_gpu_step_summary_bytes
#     of an argus-sim job (8 ranks, 100 steps of 50 ms) under the same agent,
#     and the unit test's realistic step (2 400 kernels, 150 names).
#
#   bench/gpu_handoff.sh [OUT_DIR]     (bench/run.sh runs it with OUT_DIR = its results dir/gpu)
#
#  0. The library's CPU per 10^5 records and per batch, no agent
#     (cupti_inject_bench's Google Benchmarks on the same library copy).
#
# Needs root for the attached part (the agent loads BPF). Takes ~1 minute.
# The library is copied into OUT_DIR first: a file (inode) of its own that no
# other agent has probed. The agent runs with --only-env, so it tracks only this
# script's processes. Summary: python3 bench/report.py --gpu OUT_DIR.
#
# Each attached run is one process (one pid: one timeline in the agent), and
# the next starts only when the agent has received every record of the
# previous one. The bench fires the SAME buffer again and again, so every batch
# repeats the previous one's timestamps: the agent's timeline, which keeps
# kernels sorted by start and inserts from the back, walks back over every kept
# kernel for each record (quadratic; ~38 ms of agent CPU per batch once it holds
# 10^5 records). Real producers' timestamps advance, so that is an artefact of
# this bench; it is why runs are short (200 batches) and why the agent's CPU
# here is not a figure for real jobs (the sim's is: part 2).
#
# Knobs: BUILD_DIR (build), ARGUS_BENCH_GPU_BATCHES (200 batches per run),
# ARGUS_BENCH_GPU_REPS (5 runs per phase), ARGUS_BENCH_GPU_RINGBUF_KB (65536:
# the bench fires far faster than any real producer, so the ring buffer holds a
# whole run), ARGUS_BENCH_GPU_MIN_TIME (0.2 s per Google Benchmark),
# ARGUS_BENCH_ALLOW_OTHER_TRACERS=1 (run while another argus-agent/bpftrace
# runs; flagged).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "${BUILD_DIR:-build}" 2>/dev/null && pwd) || {
  echo "gpu_handoff: no build directory (${BUILD_DIR:-build}); run 'make build' first" >&2
  exit 1
}
BATCHES=${ARGUS_BENCH_GPU_BATCHES:-200}
# Each firing process waits this long (untimed) before it fires: the agent takes
# batches only from processes it tracks, and a run fires for a few milliseconds.
START_AFTER_MS=${ARGUS_BENCH_GPU_START_AFTER_MS:-1000}
REPS=${ARGUS_BENCH_GPU_REPS:-5}
RINGBUF_KB=${ARGUS_BENCH_GPU_RINGBUF_KB:-65536}
MIN_TIME=${ARGUS_BENCH_GPU_MIN_TIME:-0.2}
SIM_RANKS=8
SIM_STEPS=100
SIM_STEP_MS=50

BENCH=$BUILD/bin/cupti_inject_bench
LIB=$BUILD/lib/libargus-cupti.so
AGENT=$BUILD/bin/argus-agent
SIM=$BUILD/bin/argus-sim
UNIT=$BUILD/bin/unit_tests
for f in "$BENCH" "$AGENT" "$SIM"; do
  [ -e "$f" ] || { echo "gpu_handoff: missing $f; run 'make build' first" >&2; exit 1; }
done
if [ ! -e "$LIB" ]; then
  echo "gpu_handoff: $LIB was not built (no CUPTI headers at build time): nothing to measure" >&2
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "gpu_handoff: must run as root: argus-agent loads BPF programs and attaches USDT probes" >&2
  exit 1
fi
for tool in python3 curl; do
  command -v "$tool" >/dev/null || { echo "gpu_handoff: needs $tool" >&2; exit 1; }
done

OUT=${1:-$BUILD/bench-results/$(date -u +%Y%m%dT%H%M%SZ)-gpu}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
FACTS=$OUT/facts.txt
: >"$FACTS"
fact() { printf '%s=%s\n' "$1" "$2" >>"$FACTS"; }
log() { printf 'gpu_handoff: %s\n' "$*" >&2; }
now() { date +%s.%N; }
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# Every process of this run carries this pair; the agent tracks only those.
TAG=gpu-handoff-$$
export ARGUS_BENCH_GPU_TAG=$TAG
# This part measures the hand-off of every record: the library sends each kernel
# (folding off). What folding saves is part o (bench/gpu_fold.py).
export ARGUS_CUPTI_FOLD=0
JOB=gpu-handoff-$$
SIM_JOB=gpu-sketch-$$

AGENT_PID=""
HOLDER_PID=""
SIM_PID=""
cleanup() {
  local rc=$? pid
  [ -z "$SIM_PID" ] || kill -TERM -- "-$SIM_PID" 2>/dev/null || true
  [ -z "$HOLDER_PID" ] || kill -TERM "$HOLDER_PID" 2>/dev/null || true
  [ -z "$AGENT_PID" ] || kill -TERM "$AGENT_PID" 2>/dev/null || true
  for _ in $(seq 1 300); do
    local alive=0
    for pid in $SIM_PID $HOLDER_PID $AGENT_PID; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  [ -z "$SIM_PID" ] || kill -KILL -- "-$SIM_PID" 2>/dev/null || true
  for pid in $HOLDER_PID $AGENT_PID; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in $SIM_PID $HOLDER_PID $AGENT_PID; do wait "$pid" 2>/dev/null || true; done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Another agent (or bpftrace) would find the bench's library copy and probe it
# too: "unprobed" would not be.
other_tracers() {
  local pid
  for pid in $(pgrep -x argus-agent; pgrep -x bpftrace); do
    [ "$pid" = "$AGENT_PID" ] || printf '%s ' "$pid"
  done
  true
}
others=$(other_tracers)
if [ -n "$others" ] && [ "${ARGUS_BENCH_ALLOW_OTHER_TRACERS:-0}" != 1 ]; then
  log "other argus-agent/bpftrace processes are running (pids $others); waiting up to 60 s for them to exit"
  for _ in $(seq 1 60); do others=$(other_tracers); [ -z "$others" ] && break; sleep 1; done
  if [ -n "$others" ]; then
    log "still running (pids $others); stop them, or set ARGUS_BENCH_ALLOW_OTHER_TRACERS=1 (flagged)"
    exit 1
  fi
fi
[ -z "$others" ] || fact other_tracers_gpu_start "$others"

fact date "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
fact kernel "$(uname -r)"
fact cpus "$(nproc)"
fact loadavg_start "$(cut -d' ' -f1-3 /proc/loadavg)"
fact batches_per_run "$BATCHES"
fact reps "$REPS"
fact ringbuf_kb "$RINGBUF_KB"
fact job "$JOB"
fact sim_job "$SIM_JOB"

COPY=$OUT/libargus-cupti.so
cp "$LIB" "$COPY"
log "results in $OUT"

# fire NAME [ENV=VALUE...]: one cupti_inject_bench --fire-batches run; its
# key=value output plus the process's CPU time (getrusage of the child) go to
# $OUT/fire-NAME.txt.
fire() {
  local name=$1
  shift
  # The rank's environment goes to the firing process only: the agent counts a
  # child that inherits its parent rank's RANK/job as the same rank (a data
  # loader worker), so a wrapper holding it would be the rank and the bench not.
  python3 - "$OUT/fire-$name.txt" env "$@" "$BENCH" --fire-batches "$BATCHES" --lib "$COPY" \
    --start-after-ms "$START_AFTER_MS" <<'EOF'
import resource, subprocess, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.monotonic()
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
t1 = time.monotonic()
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out, "w") as f:
    f.write(p.stdout)
    f.write("exit_code=%d\nprocess_wall_s=%.6f\nprocess_user_s=%.6f\nprocess_sys_s=%.6f\n" % (
        p.returncode, t1 - t0, r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime))
sys.exit(p.returncode)
EOF
}

# 0. the library's own CPU, no agent -------------------------------------------
"$BENCH" --lib "$COPY" --benchmark_filter='BM_ConvertBatch|BM_SoProcessBuffer|BM_UsdtFireBatch|BM_NoopBatch' \
  --benchmark_min_time="$MIN_TIME" --benchmark_out="$OUT/gbench.json" --benchmark_out_format=json \
  >"$OUT/gbench.txt" 2>&1 || log "cupti_inject_bench benchmarks failed: $OUT/gbench.txt"

# 1a. unprobed --------------------------------------------------------------
for i in $(seq 1 "$REPS"); do
  fire "unprobed-$i" || log "unprobed run $i failed: $OUT/fire-unprobed-$i.txt"
done
log "unprobed: $(grep -h '^ns_per_batch=' "$OUT"/fire-unprobed-*.txt | tr '\n' ' ')"

# 1b. attached --------------------------------------------------------------
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URL=http://127.0.0.1:$PORT
"$AGENT" --listen "127.0.0.1:$PORT" --only-env "ARGUS_BENCH_GPU_TAG=$TAG" --ringbuf-kb "$RINGBUF_KB" \
  --log-level info >"$OUT/agent.log" 2>&1 &
AGENT_PID=$!
fact agent_pid "$AGENT_PID"
for _ in $(seq 1 150); do
  curl -fsS -o /dev/null "$URL/healthz" 2>/dev/null && break
  kill -0 "$AGENT_PID" 2>/dev/null || { log "argus-agent exited; its log:"; tail -20 "$OUT/agent.log" >&2; exit 1; }
  sleep 0.1
done
curl -fsS -o /dev/null "$URL/healthz" || { log "argus-agent: no /healthz after 15 s"; exit 1; }

# The agent attaches to a library when a process it tracks maps it. A process
# that maps the copy and does nothing else makes it do so, outside any timing;
# from then on every process that maps the copy is seen from its first batch.
t0=$(now)
python3 -c 'import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); time.sleep(120)' "$COPY" &
HOLDER_PID=$!
attached=0
for _ in $(seq 1 300); do
  if grep -qF "attached GPU activity probes to" "$OUT/agent.log" && grep -F "attached GPU activity probes to" "$OUT/agent.log" | grep -qF "$COPY"; then
    attached=1
    break
  fi
  sleep 0.1
done
fact attach_after_s "$(python3 -c "print(round($(now) - $t0, 2))")"
kill -TERM "$HOLDER_PID" 2>/dev/null || true
wait "$HOLDER_PID" 2>/dev/null || true
HOLDER_PID=""
curl -fsS -m 5 "$URL/metrics" >"$OUT/attached-t0.metrics"
gpu_probes=$(awk '/^argus_agent_probes_attached\{.*library="gpu"/ {s += $NF} END {print s + 0}' "$OUT/attached-t0.metrics")
fact agent_gpu_probes_attached "$gpu_probes"
if [ "$attached" != 1 ]; then
  log "the agent did not attach to $COPY within 30 s (argus_agent_probes_attached{library=\"gpu\"} = $gpu_probes); its log:"
  tail -20 "$OUT/agent.log" >&2
  exit 1
fi
log "agent attached to the library copy ($gpu_probes GPU probes)"

# received: every GPU record the agent counts for the bench's job.
received() {
  curl -fsS -m 5 "$URL/metrics" 2>/dev/null |
    awk -v j="job_id=\"$JOB\"" '/^argus_gpu_records_total\{/ && index($0, j) {s += $NF} END {printf "%d\n", s}'
}
# Every fired record counts: the library's own counter (timed part) plus the
# warm-up batch each run fires before timing (its kernel names).
fired() {
  python3 -c '
import sys
n = 0
for p in sys.argv[2:]:
    for line in open(p):
        if line.startswith("records_fired="): n += int(line.split("=")[1]) + int(sys.argv[1])
print(n)' 256 "$@"
}
c0=$(cpu_ticks "$AGENT_PID")
t0=$(now)
fire_s=0
expected=0
received=0
for i in $(seq 1 "$REPS"); do
  ts=$(now)
  fire "attached-$i" RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 ARGUS_JOB_ID="$JOB" ||
    log "attached run $i failed: $OUT/fire-attached-$i.txt"
  fire_s=$(python3 -c "print($fire_s + $(now) - $ts)")
  expected=$(fired "$OUT"/fire-attached-*.txt)
  # Wait until the agent has taken this run out of the ring buffer (at most
  # 60 s, or 3 s without progress).
  prev=-1
  stable=0
  for _ in $(seq 1 600); do
    received=$(received)
    [ "$received" -ge "$expected" ] && break
    if [ "$received" = "$prev" ]; then stable=$((stable + 1)); else stable=0; fi
    [ "$stable" -ge 30 ] && break
    prev=$received
    sleep 0.1
  done
  fact "records_fired_after_run_$i" "$expected"
  fact "records_received_after_run_$i" "$received"
done
fact records_fired_attached "$expected"

c1=$(cpu_ticks "$AGENT_PID")
t1=$(now)
fact fire_phase_wall_s "$(python3 -c "print(round($fire_s, 3))")"
fact attached_phase_wall_s "$(python3 -c "print(round($t1 - $t0, 3))")"
fact agent_cpu_ticks_attached "$((c1 - c0))"
fact clk_tck "$(getconf CLK_TCK)"
fact records_received_attached "$received"
curl -fsS -m 5 "$URL/metrics" >"$OUT/attached-t1.metrics"
curl -fsS -m 5 "$URL/api/v1/ranks" >"$OUT/attached-t1.ranks.json" || echo '{}' >"$OUT/attached-t1.ranks.json"
log "attached: $(grep -h '^ns_per_batch=' "$OUT"/fire-attached-*.txt | tr '\n' ' ')records fired $expected, received $received"

# 2. the sim's per-step sketches, under the same agent ------------------------
log "argus-sim --ranks $SIM_RANKS --steps $SIM_STEPS --step-ms $SIM_STEP_MS"
setsid "$SIM" --ranks "$SIM_RANKS" --steps "$SIM_STEPS" --step-ms "$SIM_STEP_MS" --init-ms 200 \
  --job-id "$SIM_JOB" --out "$OUT/sim" --quiet >"$OUT/sim.log" 2>&1 &
SIM_PID=$!
cs0=$(cpu_ticks "$AGENT_PID")
ts0=$(now)
sim_rc=0
for _ in $(seq 1 600); do kill -0 "$SIM_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SIM_PID" 2>/dev/null; then
  log "argus-sim still running after 60 s; stopping it"
  kill -TERM -- "-$SIM_PID" 2>/dev/null || true
fi
wait "$SIM_PID" 2>/dev/null || sim_rc=$?
SIM_PID=""
fact sim_exit_code "$sim_rc"
sleep 2  # the agent decodes the last batches and the exits
fact agent_cpu_ticks_sim "$(( $(cpu_ticks "$AGENT_PID") - cs0 ))"
fact sim_phase_wall_s "$(python3 -c "print(round($(now) - $ts0, 3))")"
curl -fsS -m 5 "$URL/metrics" >"$OUT/sim.metrics"
curl -fsS -m 5 "$URL/api/v1/ranks" >"$OUT/sim.ranks.json" || echo '{}' >"$OUT/sim.ranks.json"
grep -E '^(VmRSS|VmHWM):' "/proc/$AGENT_PID/status" | awk '{printf "agent_%s_kib=%s\n", tolower(substr($1, 1, length($1) - 1)), $2}' >>"$FACTS"

ts=$(now)
kill -TERM "$AGENT_PID" 2>/dev/null || true
for _ in $(seq 1 600); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 0.1; done
kill -KILL "$AGENT_PID" 2>/dev/null || true
agent_rc=0
wait "$AGENT_PID" 2>/dev/null || agent_rc=$?
AGENT_PID=""
fact agent_exit_code "$agent_rc"
fact agent_stop_s "$(python3 -c "print(round($(now) - $ts, 2))")"

# 1c. unprobed again (drift of the machine over the run) ---------------------
for i in $(seq 1 "$REPS"); do
  fire "after-$i" || log "after run $i failed: $OUT/fire-after-$i.txt"
done
log "after: $(grep -h '^ns_per_batch=' "$OUT"/fire-after-*.txt | tr '\n' ' ')"

# The unit test's realistic step (tests/unit/gpu_timeline_test.cpp).
if [ -x "$UNIT" ]; then
  "$UNIT" --gtest_filter=StepSketch.RealisticStepStaysUnderTwoKilobytes \
    --gtest_output="xml:$OUT/sketch-unit-test.xml" >"$OUT/sketch-unit-test.txt" 2>&1 || true
  fact unit_realistic_step_bytes "$(grep -o 'name="bytes_per_step" value="[0-9]*"' "$OUT/sketch-unit-test.xml" 2>/dev/null | grep -o '[0-9][0-9]*' || echo '')"
fi
others=$(other_tracers)
[ -z "$others" ] || fact other_tracers_gpu_end "$others"
fact loadavg_end "$(cut -d' ' -f1-3 /proc/loadavg)"

python3 "$ROOT/bench/report.py" --gpu "$OUT" | tee "$OUT/summary.txt"
