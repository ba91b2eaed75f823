#!/usr/bin/env bash
# `make demo`: the agent watching a simulated 8-rank job with an injected fault.
# Prints the per-rank table for about 30 s, what the agent detected, and saves
# a Perfetto trace, then stops everything it started.
#   ARGUS_DEMO_FAULT=host   (default) rank 3 is 3x slow on the host
#   ARGUS_DEMO_FAULT=gpu    rank 3's GPU is 3x slow; its host is on time
#   ARGUS_DEMO_FAULT=bubble 4 pipeline stages; stage 2 (ranks 4, 5) idles 40 ms more per step
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=build/bin
PORT="${ARGUS_DEMO_PORT:-9745}"
DURATION="${ARGUS_DEMO_SECONDS:-30}"
FAULT="${ARGUS_DEMO_FAULT:-host}"
case "$FAULT" in
  host) FAULT_ARGS=(--straggler 3:3); FAULT_TEXT="rank 3 is 3x slow on the host" ;;
  gpu) FAULT_ARGS=(--gpu-slow 3:3); FAULT_TEXT="rank 3's GPU is 3x slow (its host is on time)" ;;
  bubble) FAULT_ARGS=(--pp 4 --bubble 2:40); FAULT_TEXT="4 pipeline stages, stage 2 (ranks 4, 5) waits 40 ms more for its input" ;;
  *) echo "demo: ARGUS_DEMO_FAULT must be host, gpu or bubble (got '$FAULT')" >&2; exit 2 ;;
esac
AGENT_URL="http://127.0.0.1:${PORT}"
WORK="$(mktemp -d /tmp/argus-demo.XXXXXX)"

if [ "$(id -u)" -ne 0 ]; then
  echo "demo: the agent loads eBPF programs; run as root (sudo make demo)" >&2
  exit 1
fi

AGENT_PID=""
SIM_PID=""
cleanup() {
  [ -n "$SIM_PID" ] && kill -TERM "$SIM_PID" 2>/dev/null && wait "$SIM_PID" 2>/dev/null || true
  [ -n "$AGENT_PID" ] && kill -TERM "$AGENT_PID" 2>/dev/null && wait "$AGENT_PID" 2>/dev/null || true
  echo "demo: stopped the agent and the simulated job; logs in $WORK"
}
trap cleanup EXIT INT TERM

echo "demo: starting argus-agent on 127.0.0.1:${PORT} (log: $WORK/agent.log)"
"$BIN/argus-agent" --listen "127.0.0.1:${PORT}" --window 10 --debug-routes >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 1 100); do
  if "$BIN/argusctl" ranks --agent "$AGENT_URL" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$AGENT_PID" 2>/dev/null; then
    echo "demo: the agent failed to start:" >&2
    tail -5 "$WORK/agent.log" >&2
    exit 1
  fi
  sleep 0.2
done

echo "demo: starting argus-sim: 8 ranks, job 'demo', $FAULT_TEXT"
"$BIN/argus-sim" --ranks 8 --steps 0 --step-ms 100 --job-id demo "${FAULT_ARGS[@]}" --quiet \
  --out "$WORK/truth" >"$WORK/sim.log" 2>&1 &
SIM_PID=$!

end=$((SECONDS + DURATION))
while [ $SECONDS -lt $end ]; do
  sleep 3
  if ! kill -0 "$SIM_PID" 2>/dev/null; then
    echo "demo: the simulated job ended early:" >&2
    tail -5 "$WORK/sim.log" >&2
    exit 1
  fi
  printf '\n==== %s  argusctl ranks --agent %s --job demo  (%ds left)\n' "$(date +%T)" "$AGENT_URL" $((end - SECONDS))
  "$BIN/argusctl" ranks --agent "$AGENT_URL" --job demo || true
done

echo
case "$FAULT" in
  host) echo "demo: NCCL is asynchronous (as real NCCL): no rank waits inside the collective calls (COLL%); the others wait for rank 3 in their next synchronize (SYNC%), because rank 3 issues every collective last." ;;
  gpu) echo "demo: every host waits alike (SYNC%), but rank 3's NCCL kernels run least (NCCL_K%): the others' GPUs wait for its GPU." ;;
  bubble) echo "demo: ranks 4 and 5 sit idle before their pipeline receives (BUBBLE%) far more than the other stages." ;;
esac
printf '\n==== argusctl events --agent %s --last %s\n' "$AGENT_URL" "$DURATION"
"$BIN/argusctl" events --agent "$AGENT_URL" --last "$DURATION" || true
"$BIN/argusctl" trace --agent "$AGENT_URL" --seconds 2 -o "$WORK/trace.json" || true
echo "demo: the last 2 s as a trace (GPU kernels, collectives, synchronize waits): $WORK/trace.json (open in https://ui.perfetto.dev)"
echo "demo: Prometheus metrics are at ${AGENT_URL}/metrics while the demo runs, for example:"
curl -s "${AGENT_URL}/metrics" | grep -E '^argus_collective_wait_ratio|^argus_sync_wait_ratio|^argus_gpu_nccl_kernel_ratio|^argus_pipeline_bubble_ratio' | grep 'job_id="demo"' | head -24 || true
