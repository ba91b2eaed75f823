#!/usr/bin/env bash
# `make demo`: the agent watching a simulated 8-rank job in which rank 3 is 3x
# slow on the host. Prints the per-rank table for about 30 s, then stops
# everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=build/bin
PORT="${ARGUS_DEMO_PORT:-9745}"
DURATION="${ARGUS_DEMO_SECONDS:-30}"
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
"$BIN/argus-agent" --listen "127.0.0.1:${PORT}" --window 10 >"$WORK/agent.log" 2>&1 &
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

echo "demo: starting argus-sim: 8 ranks, job 'demo', rank 3 is 3x slow on the host"
"$BIN/argus-sim" --ranks 8 --steps 0 --step-ms 100 --job-id demo --straggler 3:3 --quiet \
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
echo "demo: rank 3 spends the least time waiting in collectives (WAIT%): the others wait for it."
echo "demo: Prometheus metrics are at ${AGENT_URL}/metrics while the demo runs, for example:"
curl -s "${AGENT_URL}/metrics" | grep -E '^argus_collective_wait_ratio|^argus_nccl_collectives_total\{.*all_reduce' | head -16 || true
