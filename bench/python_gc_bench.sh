#!/usr/bin/env bash
# What the Python GC probes cost per collection, in one run.
#
# A Python loop calls gc.collect(0) N times (a young-generation collection of a
# near-empty heap: the cheapest collection there is, so the probes' share is at
# its largest), timed inside the interpreter with time.perf_counter_ns, best of
# REPS. Phases, each a fresh process:
#   unprobed  no agent;
#   attached  argus-agent running (--only-env: it tracks only this script's
#             ranks), the rank's collector probed and its py_procs entry
#             written (argus_python_info shows it) before the loop starts;
#   after     no agent again (the drift check).
# In the same processes: os.getppid() (a syscall) and an empty loop, for scale.
#
# Two interpreters, each a private copy (an inode no other agent on the machine
# has probed): pyenv 3.12's libpython (anchor gc_collect_main: uprobe +
# uretprobe) and Debian's /usr/bin/python3.11 (anchor usdt: gc__start/gc__done).
#
#   bench/python_gc_bench.sh [OUT_DIR]     (bench/run.sh runs it with OUT_DIR = its results dir/pygc)
#
# Knobs: BUILD_DIR (build), ARGUS_BENCH_PYGC_N (20000 collections per rep),
# ARGUS_BENCH_PYGC_REPS (5). Needs root. Takes ~30 s.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "${BUILD_DIR:-build}" 2>/dev/null && pwd) || {
  echo "python_gc_bench: no build directory; run 'make build' first" >&2
  exit 1
}
OUT=${1:-$BUILD/bench-results/pygc-$(date -u +%Y%m%dT%H%M%SZ)}
N=${ARGUS_BENCH_PYGC_N:-20000}
REPS=${ARGUS_BENCH_PYGC_REPS:-5}
AGENT=$BUILD/bin/argus-agent
[ -x "$AGENT" ] || { echo "python_gc_bench: missing $AGENT" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "python_gc_bench: must run as root (the agent loads BPF)" >&2; exit 1; }
mkdir -p "$OUT"
log() { printf 'python_gc_bench: %s\n' "$*" >&2; }

PYENV_ROOT=${PYENV_ROOT:-$HOME/.pyenv}
PY312=$(ls -d "$PYENV_ROOT"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -1 || true)
DEB311=/usr/bin/python3.11

cat >"$OUT/gcloop.py" <<'PY'
import gc, json, os, sys, time
out, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
open(out + ".ready", "w").close()
while not os.path.exists(out + ".go"):
    time.sleep(0.01)
collect, getppid, clock = gc.collect, os.getppid, time.perf_counter_ns
def best(fn):
    b = None
    for _ in range(reps):
        t0 = clock()
        for _ in range(n):
            fn()
        dt = (clock() - t0) / n
        b = dt if b is None or dt < b else b
    return b
before = [s["collections"] for s in gc.get_stats()]
res = {"collect0_ns": best(lambda: collect(0)), "getppid_ns": best(getppid), "empty_ns": best(lambda: None)}
res["collections"] = sum(s["collections"] for s in gc.get_stats()) - sum(before)
with open(out + ".tmp", "w") as f:
    json.dump(res, f)
os.rename(out + ".tmp", out)
PY

AGENT_PID=""
PY_PID=""
cleanup() {
  [ -n "$PY_PID" ] && kill -TERM "$PY_PID" 2>/dev/null || true
  if [ -n "$AGENT_PID" ]; then
    kill -TERM "$AGENT_PID" 2>/dev/null || true
    wait "$AGENT_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)

start_agent() {
  "$AGENT" --listen "127.0.0.1:$PORT" --only-env ARGUS_BENCH_PYGC=1 --log-level info >"$OUT/agent.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && return 0
    sleep 0.1
  done
  log "agent did not start: $OUT/agent.log"
  return 1
}
stop_agent() {
  kill -TERM "$AGENT_PID" 2>/dev/null || true
  wait "$AGENT_PID" 2>/dev/null || true
  AGENT_PID=""
}

# run NAME PHASE ENV... -- CMD...: one process of the loop; with the agent, the
# loop starts once the agent follows the rank's collector.
run() {
  local name=$1 phase=$2 job
  shift 2
  local res=$OUT/$name-$phase.json
  job="pygc-bench-$name"
  rm -f "$res" "$res".*
  env ARGUS_BENCH_PYGC=1 RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 TORCHELASTIC_RUN_ID="$job" "$@" "$OUT/gcloop.py" "$res" "$N" "$REPS" &
  PY_PID=$!
  for _ in $(seq 1 200); do [ -e "$res.ready" ] && break; sleep 0.05; done
  if [ "$phase" = attached ]; then
    local ok=0
    for _ in $(seq 1 200); do
      if curl -s "http://127.0.0.1:$PORT/metrics" | grep -q "^argus_python_info{job_id=\"$job\".*gc_anchor=\"[a-z_]*\"} 1"; then
        ok=1
        break
      fi
      sleep 0.1
    done
    [ "$ok" = 1 ] || { log "the agent never followed $name: $OUT/agent.log"; return 1; }
    curl -s "http://127.0.0.1:$PORT/metrics" | grep "^argus_python_info{job_id=\"$job\"" >"$OUT/$name-anchor.txt"
  fi
  touch "$res.go"
  wait "$PY_PID" || true
  PY_PID=""
  if [ "$phase" = attached ]; then
    # What the agent timed of this process: one pause per collection.
    curl -s "http://127.0.0.1:$PORT/metrics" | grep "job_id=\"$job\"" >"$OUT/$name-metrics.txt" || true
  fi
}

declare -A CMD
if [ -n "$PY312" ]; then
  cp "$(dirname "$PY312")/../lib/libpython3.12.so.1.0" "$OUT/libpython3.12.so.1.0"
  CMD[pyenv312]="env LD_LIBRARY_PATH=$OUT $PY312"
else
  log "no pyenv 3.12: skipped"
fi
if [ -x "$DEB311" ]; then
  cp "$DEB311" "$OUT/python3.11-copy"
  CMD[debian311]="$OUT/python3.11-copy"
else
  log "no $DEB311: skipped"
fi
[ "${#CMD[@]}" -gt 0 ] || { log "no interpreter to measure"; exit 1; }

NAMES=$(printf '%s\n' "${!CMD[@]}" | sort)
for name in $NAMES; do
  # shellcheck disable=SC2086
  run "$name" unprobed ${CMD[$name]}
done
start_agent
for name in $NAMES; do
  # shellcheck disable=SC2086
  run "$name" attached ${CMD[$name]}
done
stop_agent
for name in $NAMES; do
  # shellcheck disable=SC2086
  run "$name" after ${CMD[$name]}
done

{
  echo "Python GC probe cost per collection: gc.collect(0) x $N, best of $REPS ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -r))"
  for name in $NAMES; do
    python3 - "$OUT" "$name" <<'PY'
import json, re, sys
out, name = sys.argv[1], sys.argv[2]
r = {p: json.load(open(f"{out}/{name}-{p}.json")) for p in ("unprobed", "attached", "after")}
anchor = re.search(r'gc_anchor="([a-z_]+)"', open(f"{out}/{name}-anchor.txt").read()).group(1)
metrics = open(f"{out}/{name}-metrics.txt").read()
m = re.search(r"^argus_python_gc_pause_seconds_count\{[^}]*\} (\S+)", metrics, re.M)
timed = float(m.group(1)) if m else float("nan")
base = (r["unprobed"]["collect0_ns"] + r["after"]["collect0_ns"]) / 2
att = r["attached"]["collect0_ns"]
print(f"  {name} (anchor {anchor}): {base:.0f} ns unprobed (after: {r['after']['collect0_ns']:.0f}), "
      f"{att:.0f} ns attached: x{att / base:.2f}, +{(att - base) / 1000:.2f} us per collection; "
      f"getppid {r['attached']['getppid_ns']:.0f} ns, empty call {r['attached']['empty_ns']:.0f} ns; "
      f"agent timed {timed:.0f} pauses of {r['attached']['collections']} collections")
PY
  done
} | tee "$OUT/summary.txt"
