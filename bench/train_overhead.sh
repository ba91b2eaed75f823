#!/usr/bin/env bash
# Training-loop overhead: an 8-rank simulated job's wall time for a fixed number
# of steps with no agent, with argus-agent --probes default and --probes deep,
# in alternating rounds; the median ratio against no agent and its spread.
#
#   sudo bench/train_overhead.sh OUT_DIR        (also `make bench`, part l)
#
# The job: argus-sim --ranks 8 --step-ms 10 (async NCCL semantics, one
# all-reduce per step: a collective every ~10 ms), --kernels-per-step K for each
# K in ARGUS_BENCH_TRAIN_KERNELS ("100 1000": 10k and 100k launches/s per rank
# at 10 ms steps), ARGUS_BENCH_TRAIN_STEPS (200) steps, ARGUS_BENCH_TRAIN_ROUNDS
# (5) rounds; the agent settles 2 s before each job. The default probes trap
# on the collective and the synchronize, deep on every launch too; offcpu-off
# is the default without the scheduler tracepoints. The sim folds its GPU
# records (--gpu-fold), as libargus-cupti.so does by default (ARGUS_CUPTI_FOLD);
# ARGUS_BENCH_TRAIN_SIM_ARGS replaces that ("" sends every kernel, as
# ARGUS_CUPTI_FOLD=0 would). Writes OUT_DIR/train.txt.
set -euo pipefail
OUT=${1:?usage: bench/train_overhead.sh OUT_DIR}
BUILD=${BUILD_DIR:-build}
ROUNDS=${ARGUS_BENCH_TRAIN_ROUNDS:-5}
STEPS=${ARGUS_BENCH_TRAIN_STEPS:-200}
KERNELS=${ARGUS_BENCH_TRAIN_KERNELS:-100 1000}
read -r -a SIM_ARGS <<<"${ARGUS_BENCH_TRAIN_SIM_ARGS---gpu-fold}"
# Agent profiles besides "none": default, deep, offcpu-off (default probes, --offcpu off:
# no scheduler tracepoints, which every context switch on the node pays).
MODES=${ARGUS_BENCH_TRAIN_MODES:-default deep offcpu-off}
AGENT=$BUILD/bin/argus-agent
SIM=$BUILD/bin/argus-sim
[ "$(id -u)" -eq 0 ] || { echo "train_overhead: needs root (BPF)" >&2; exit 1; }
for f in "$AGENT" "$SIM"; do [ -x "$f" ] || { echo "train_overhead: $f missing (make build)" >&2; exit 1; }; done
mkdir -p "$OUT"
agent=""
trap '[ -z "$agent" ] || kill -KILL "$agent" 2>/dev/null || true' EXIT

start_agent() {  # start_agent MODE: up and answering
  local port flags
  case $1 in
    offcpu-off) flags=(--probes default --offcpu off) ;;
    *) flags=(--probes "$1") ;;
  esac
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$AGENT" --listen "127.0.0.1:$port" "${flags[@]}" --log-level warn --kmsg off >>"$OUT/agent-$1.log" 2>&1 &
  agent=$!
  for _ in $(seq 1 150); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "train_overhead: the agent did not start; see $OUT/agent-$1.log" >&2
  exit 1
}
stop_agent() {
  [ -n "$agent" ] || return 0
  kill -TERM "$agent"
  wait "$agent" 2>/dev/null || true
  agent=""
}
run_job() {  # run_job K: the job's wall seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$SIM" --ranks 8 --steps "$STEPS" --step-ms 10 --kernels-per-step "$1" --init-ms 500 --quiet \
    "${SIM_ARGS[@]}" --job-id "train-overhead-$$" >>"$OUT/sim.log" 2>&1
  t1=$(date +%s.%N)
  python3 -c "print($t1 - $t0)"
}

: >"$OUT/samples.txt"
for k in $KERNELS; do
  for r in $(seq 1 "$ROUNDS"); do
    for mode in none $MODES; do
      [ "$mode" = none ] || { start_agent "$mode"; sleep 2; }  # its start-up scan is done
      w=$(run_job "$k")
      stop_agent
      echo "$k $r $mode $w" >>"$OUT/samples.txt"
    done
  done
done

ARGUS_BENCH_TRAIN_SIM_ARGS="${SIM_ARGS[*]}" python3 - "$OUT" "$STEPS" $MODES <<'PY' | tee "$OUT/train.txt"
import collections, os, statistics, sys
out, steps, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows = collections.defaultdict(dict)
for line in open(out + "/samples.txt"):
    k, r, mode, w = line.split()
    rows[(int(k), int(r))][mode] = float(w)
sim_args = os.environ.get("ARGUS_BENCH_TRAIN_SIM_ARGS", "")
print(f"training-loop overhead: argus-sim 8 ranks {sim_args}, {steps} steps of 10 ms (+0.5 s start-up), wall time ratio "
      "to no agent (median of alternating rounds [min-max])")
print("kernels/step  launches/s/rank (no agent)  no agent (s)  " + "".join("%-25s" % (m + " ratio") for m in modes))
for k in sorted({k for k, _ in rows}):
    rs = [v for (kk, _), v in rows.items() if kk == k and len(v) == 1 + len(modes)]
    none = statistics.median(v["none"] for v in rs)
    cells = []
    for mode in modes:
        ratios = [v[mode] / v["none"] for v in rs]
        cells.append("%.4f [%.3f-%.3f]" % (statistics.median(ratios), min(ratios), max(ratios)))
    rate = k * steps / max(none - 0.5, 1e-9)  # measured: the steps took longer than 10 ms
    print("%-12d %26.0f %13.2f  %s" % (k, rate, none, "".join("%-25s" % c for c in cells)))
PY
