#!/usr/bin/env bash
# What the Python stack sampler costs a CPU-bound Python rank: the throughput of
# a pure-Python loop (outer -> middle -> inner, iterations per second) with no
# agent, with argus-agent sampling at 19 Hz (the default) and at 99 Hz, and with
# no agent again (the drift check), interleaved, in one run. Also the BPF
# program's own run time per sample (kernel.bpf_stats_enabled, restored after).
#
#   sudo bench/python_sample.sh [OUT_DIR]    # ~1.5 minutes; bench/run.sh runs it as part d
#
# Knobs: BUILD_DIR (build), ARGUS_BENCH_PY (python3), ARGUS_BENCH_PY_SECONDS (6 per run),
# ARGUS_BENCH_PY_REPS (3 runs per phase and round), ARGUS_BENCH_PY_ROUNDS (2).
# The rank is found by the agent through the sim's libnccl.so.2, which the loop
# loads with ctypes (nothing in it is called).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "${BUILD_DIR:-build}" 2>/dev/null && pwd) || {
  echo "python_sample: no build directory; run 'make build' first" >&2
  exit 1
}
OUT=${1:-$BUILD/bench-results/python-sample-$(date -u +%Y%m%dT%H%M%SZ)}
PY=${ARGUS_BENCH_PY:-python3}
SECONDS_PER_RUN=${ARGUS_BENCH_PY_SECONDS:-6}
REPS=${ARGUS_BENCH_PY_REPS:-3}
ROUNDS=${ARGUS_BENCH_PY_ROUNDS:-2}
AGENT=$BUILD/bin/argus-agent
NCCL=$BUILD/lib/libnccl.so.2
[ "$(id -u)" -eq 0 ] || { echo "python_sample: must run as root (BPF)" >&2; exit 1; }
for f in "$AGENT" "$NCCL"; do [ -e "$f" ] || { echo "python_sample: missing $f; run 'make build'" >&2; exit 1; }; done
mkdir -p "$OUT"
RESULTS=$OUT/runs.txt
: >"$RESULTS"
log() { printf 'python_sample: %s\n' "$*" >&2; }

cat >"$OUT/loop.py" <<'PY'
import ctypes, sys, time
ctypes.CDLL(sys.argv[1])


def inner(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def middle(n):
    return inner(n)


def outer(n):
    return middle(n)


time.sleep(float(sys.argv[3]))  # the agent finds the rank and locates its interpreter meanwhile
t0 = time.perf_counter()
end = t0 + float(sys.argv[2])
n = 0
while time.perf_counter() < end:
    outer(1000)
    n += 1
print(n / (time.perf_counter() - t0))
PY

AGENT_PID=""
STATS_BEFORE=""
cleanup() {
  local rc=$?
  if [ -n "$AGENT_PID" ]; then
    kill -TERM "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
  fi
  [ -z "$STATS_BEFORE" ] || sysctl -q -w kernel.bpf_stats_enabled="$STATS_BEFORE" >/dev/null 2>&1 || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start_agent() {  # start_agent HZ
  PORT=$(free_port)
  "$AGENT" --listen "127.0.0.1:$PORT" --debug-routes --python-sample-hz "$1" --log-level info \
    >"$OUT/agent-$1hz.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 1 150); do
    curl -fsS -o /dev/null "http://127.0.0.1:$PORT/healthz" 2>/dev/null && return 0
    kill -0 "$AGENT_PID" 2>/dev/null || { log "agent exited; see $OUT/agent-$1hz.log"; exit 1; }
    sleep 0.1
  done
  log "agent: no /healthz after 15 s"
  exit 1
}
stop_agent() {
  kill -TERM "$AGENT_PID" 2>/dev/null || true
  wait "$AGENT_PID" 2>/dev/null || true
  AGENT_PID=""
}

# run PHASE: one measured run; with an agent up, also the samples it took of it.
run() {
  local phase=$1 job rate samples=0 out
  job="pysample-$phase-$RANDOM"
  out=$(RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 TORCHELASTIC_RUN_ID=$job "$PY" "$OUT/loop.py" "$NCCL" "$SECONDS_PER_RUN" 2.5)
  rate=$out
  if [ -n "$AGENT_PID" ]; then
    samples=$(curl -fsS -m 5 "http://127.0.0.1:$PORT/api/v1/ranks/$job/0/profile?seconds=600" 2>/dev/null |
      awk '/outer/ {s += $NF} END {print s + 0}')
  fi
  printf '%s %s %s\n' "$phase" "$rate" "$samples" >>"$RESULTS"
  log "$phase: $rate iterations/s, $samples samples in outer"
}

STATS_BEFORE=$(sysctl -n kernel.bpf_stats_enabled 2>/dev/null || echo "")
[ -z "$STATS_BEFORE" ] || sysctl -q -w kernel.bpf_stats_enabled=1 >/dev/null 2>&1 || STATS_BEFORE=""
{
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "python=$("$PY" -c 'import sys; print(sys.version.split()[0])')"
  echo "kernel=$(uname -r)"
  echo "cpus=$(nproc)"
  echo "loadavg_start=$(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/facts.txt"

for round in $(seq 1 "$ROUNDS"); do
  for phase in none 19 99; do
    if [ "$phase" != none ]; then start_agent "$phase"; fi
    for _ in $(seq 1 "$REPS"); do run "$([ "$phase" = none ] && echo none || echo "${phase}hz")"; done
    if [ "$phase" != none ]; then
      # The program's run time per sample, while it ran for this phase (bpftool: run_time_ns / run_cnt).
      bpftool prog show name argus_py_sample -j 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print("bpf %s %d %d" % (sys.argv[1], d.get("run_time_ns",0), d.get("run_cnt",0)))' "${phase}hz" >>"$RESULTS" || true
      stop_agent
    fi
  done
done
for _ in $(seq 1 "$REPS"); do run none; done
echo "loadavg_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/facts.txt"

python3 - "$RESULTS" "$OUT/facts.txt" <<'PYREPORT' | tee "$OUT/summary.txt"
import statistics, sys
rates, samples, bpf = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "bpf":
        t, c = bpf.get(f[1], (0, 0))
        bpf[f[1]] = (t + int(f[2]), c + int(f[3]))
        continue
    rates.setdefault(f[0], []).append(float(f[1]))
    samples.setdefault(f[0], []).append(int(f[2]))
facts = dict(l.strip().split("=", 1) for l in open(sys.argv[2]) if "=" in l)
print("Python stack sampler overhead (%s, Python %s, %s CPUs, load %s -> %s)" % (
    facts.get("date"), facts.get("python"), facts.get("cpus"), facts.get("loadavg_start"), facts.get("loadavg_end")))
base = statistics.median(rates["none"])
print("  no agent: median %.0f iterations/s of outer(1000) over %d runs (min %.0f, max %.0f)" % (
    base, len(rates["none"]), min(rates["none"]), max(rates["none"])))
for ph in ("19hz", "99hz"):
    if ph not in rates:
        continue
    med = statistics.median(rates[ph])
    line = "  %s: median %.0f iterations/s over %d runs, ratio to no agent %.4f (%+.2f%%); samples per run %s" % (
        ph, med, len(rates[ph]), med / base, (med / base - 1) * 100, samples[ph])
    if ph in bpf and bpf[ph][1]:
        us = bpf[ph][0] / bpf[ph][1] / 1e3
        line += ("; BPF %.1f us per run of the program (%d runs, all CPUs): %d Hz x %.1f us = %.3f%% of the rank's CPU"
                 % (us, bpf[ph][1], int(ph[:-2]), us, int(ph[:-2]) * us / 1e4))
    print(line)
PYREPORT
