#!/usr/bin/env bash
# The sched_switch probe's cost: context switches per second of
# bench/sched_switch_bench (two processes ping-ponging a byte on one CPU),
# (a) without the agent, (b) with the agent running (the bench not a rank),
# (c) with the bench tracked as a rank (it maps libnccl.so.2 and has the
# launcher's variables), in alternating rounds; and the BPF run time per
# program from the kernel's BPF stats during (c).
#
#   bench/sched_switch.sh WORKDIR        (root; BUILD_DIR, ARGUS_BENCH_SCHED_ROUNDS=3,
#                                          ARGUS_BENCH_SCHED_SECONDS=3, ARGUS_NCCL)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(cd "$ROOT" && cd "${BUILD_DIR:-build}" && pwd)
WORK=${1:?usage: sched_switch.sh WORKDIR}
ROUNDS=${ARGUS_BENCH_SCHED_ROUNDS:-3}
SECONDS_PER_RUN=${ARGUS_BENCH_SCHED_SECONDS:-3}
NCCL=${ARGUS_NCCL:-/usr/local/cuda/lib/libnccl.so.2}
[ -e "$NCCL" ] || NCCL=$BUILD/lib/libnccl.so.2  # the sim's shim: discovery takes it all the same
BENCH=$BUILD/bin/sched_switch_bench
AGENT=$BUILD/bin/argus-agent
mkdir -p "$WORK"
PORT=${ARGUS_BENCH_SCHED_PORT:-19761}
AGENT_PID=""
STATS_BEFORE=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo 0)
cleanup() {
  if [ -n "$AGENT_PID" ]; then kill -TERM "$AGENT_PID" 2>/dev/null || true; wait "$AGENT_PID" 2>/dev/null || true; fi
  sysctl -qw kernel.bpf_stats_enabled="$STATS_BEFORE" 2>/dev/null || true
}
trap cleanup EXIT

start_agent() {
  "$AGENT" --listen 127.0.0.1:$PORT --log-level warn >"$WORK/agent.log" 2>&1 &
  AGENT_PID=$!
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "sched_switch.sh: the agent did not start: $WORK/agent.log" >&2
  return 1
}
stop_agent() { kill -TERM "$AGENT_PID"; wait "$AGENT_PID" || true; AGENT_PID=""; }
run_plain() { "$BENCH" "$SECONDS_PER_RUN" 0 | awk '{print $2}'; }
run_rank() {
  env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 TORCHELASTIC_RUN_ID=sched-bench "$BENCH" "$SECONDS_PER_RUN" 0 "$NCCL" |
    awk '{print $2}'
}

: >"$WORK/runs.txt"
for r in $(seq "$ROUNDS"); do
  echo "round $r none $(run_plain)" >>"$WORK/runs.txt"
  start_agent
  echo "round $r agent $(run_plain)" >>"$WORK/runs.txt"
  sysctl -qw kernel.bpf_stats_enabled=1
  echo "round $r tracked $(run_rank)" >>"$WORK/runs.txt"
  # The probes' own time, as the kernel counts it (bench tracked, last round's agent).
  if [ "$r" = "$ROUNDS" ] && command -v bpftool >/dev/null; then
    bpftool -j prog show >"$WORK/bpf-progs.json" 2>/dev/null || true
  fi
  sysctl -qw kernel.bpf_stats_enabled="$STATS_BEFORE"
  stop_agent
done
cat "$WORK/runs.txt"
python3 - "$WORK" <<'PY'
import json, statistics, sys
work = sys.argv[1]
runs = {}
for line in open(f"{work}/runs.txt"):
    _, _, mode, v = line.split()
    runs.setdefault(mode, []).append(float(v))
med = {m: statistics.median(v) for m, v in runs.items()}
out = [f"switches_per_s_median none={med['none']:.0f} agent={med['agent']:.0f} tracked={med['tracked']:.0f}",
       f"ratio agent/none={med['agent'] / med['none']:.3f} tracked/none={med['tracked'] / med['none']:.3f}"]
try:
    for p in json.load(open(f"{work}/bpf-progs.json")):
        name = p.get("name", "")
        if name.startswith("argus_sched") and p.get("run_cnt"):
            out.append(f"bpf {name}: {p['run_cnt']} runs, {p['run_time_ns'] / p['run_cnt']:.0f} ns/run")
except (OSError, ValueError):
    pass
open(f"{work}/summary.txt", "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
