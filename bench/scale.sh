#!/usr/bin/env bash
# Scale on one node: /metrics size, series and scrape time, the agent's CPU and
# RSS, with 8, 64 and 512 simulated ranks (ARGUS_BENCH_SCALE_RANKS).
#
#   sudo bench/scale.sh OUT_DIR        (also `make bench`, part m)
#
# For each rank count: argus-agent (default flags) and argus-sim --ranks N
# --step-ms 1000 (a collective a second per rank: the series, not the event
# rate, are measured here); once the agent tracks every rank and every rank
# has done 2 collectives (at most 300 s), ARGUS_BENCH_SCALE_SCRAPES
# (5) scrapes of /metrics (bytes, series, curl's total time, median), then the
# agent's CPU over ARGUS_BENCH_SCALE_WINDOW (10) seconds and its RSS. Writes
# OUT_DIR/scale.txt.
set -euo pipefail
OUT=${1:?usage: bench/scale.sh OUT_DIR}
BUILD=${BUILD_DIR:-build}
RANK_COUNTS=${ARGUS_BENCH_SCALE_RANKS:-8 64 512}
SCRAPES=${ARGUS_BENCH_SCALE_SCRAPES:-5}
WINDOW=${ARGUS_BENCH_SCALE_WINDOW:-10}
AGENT=$BUILD/bin/argus-agent
SIM=$BUILD/bin/argus-sim
[ "$(id -u)" -eq 0 ] || { echo "scale: needs root (BPF)" >&2; exit 1; }
for f in "$AGENT" "$SIM"; do [ -x "$f" ] || { echo "scale: $f missing (make build)" >&2; exit 1; }; done
mkdir -p "$OUT"
agent="" sim=""
cleanup() {
  [ -z "$sim" ] || kill -TERM -- "-$sim" 2>/dev/null || true
  [ -z "$agent" ] || kill -TERM "$agent" 2>/dev/null || true
  for p in $sim $agent; do wait "$p" 2>/dev/null || true; done
}
trap cleanup EXIT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

echo "ranks tracked_after_s stepping metrics_bytes series series_per_rank scrape_ms_median agent_cpu_pct agent_rss_mib" >"$OUT/scale.raw"
for n in $RANK_COUNTS; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$AGENT" --listen "127.0.0.1:$port" --log-level warn --kmsg off >"$OUT/agent-$n.log" 2>&1 &
  agent=$!
  for _ in $(seq 1 150); do curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break; sleep 0.1; done
  job="scale-$n-$$"
  t0=$(date +%s.%N)
  setsid "$SIM" --ranks "$n" --steps 0 --step-ms 1000 --init-ms 500 --job-id "$job" --quiet >"$OUT/sim-$n.log" 2>&1 &
  sim=$!
  tracked=0
  for _ in $(seq 1 600); do
    tracked=$(curl -fsS -m 5 "http://127.0.0.1:$port/api/v1/ranks" 2>/dev/null |
      python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(1 for r in d.get("ranks", []) if r.get("job_id") == sys.argv[1] and r.get("state") == "running"))' "$job" 2>/dev/null || echo 0)
    [ "$tracked" -ge "$n" ] && break
    sleep 0.2
  done
  after=$(python3 -c "print(round($(date +%s.%N) - $t0, 1))")
  # Every rank past its communicator's init and into its steps: all its series
  # exist (512 ranks take a while to init a communicator on 2 cores).
  stepping=0
  for _ in $(seq 1 300); do
    stepping=$(curl -fsS -m 30 "http://127.0.0.1:$port/metrics" 2>/dev/null |
      awk -v j="job_id=\"$job\"" 'index($0, "argus_nccl_last_seq{") == 1 && index($0, j) && $NF >= 2 {n++} END {print n + 0}')
    [ "$stepping" -ge "$n" ] && break
    sleep 1
  done
  sleep 2
  : >"$OUT/scrapes-$n.txt"
  for _ in $(seq 1 "$SCRAPES"); do
    curl -fsS -m 30 -o "$OUT/metrics-$n.txt" -w '%{time_total}\n' "http://127.0.0.1:$port/metrics" >>"$OUT/scrapes-$n.txt"
  done
  bytes=$(stat -c %s "$OUT/metrics-$n.txt")
  series=$(grep -vc '^#' "$OUT/metrics-$n.txt" || true)
  scrape_ms=$(sort -n "$OUT/scrapes-$n.txt" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)] * 1000}')
  c0=$(ticks "$agent"); w0=$(date +%s.%N)
  sleep "$WINDOW"
  c1=$(ticks "$agent"); w1=$(date +%s.%N)
  cpu=$(python3 -c "print(round(100 * ($c1 - $c0) / $(getconf CLK_TCK) / ($w1 - $w0), 2))")
  rss=$(awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$agent/status")
  echo "$n $tracked/$n@${after}s $stepping/$n $bytes $series $(python3 -c "print(round($series / $n, 1))") $scrape_ms $cpu $rss" >>"$OUT/scale.raw"
  kill -TERM -- "-$sim" 2>/dev/null || true
  wait "$sim" 2>/dev/null || true
  sim=""
  kill -TERM "$agent"
  wait "$agent" 2>/dev/null || true
  agent=""
done
{
  echo "scale on one node (argus-sim, 1 s steps; /metrics median of $SCRAPES scrapes; agent CPU over $WINDOW s)"
  column -t "$OUT/scale.raw"
} | tee "$OUT/scale.txt"
