#!/usr/bin/env bash
# False positives of the straggler and hang detectors over a clean run: the
# agent watches an 8-rank simulated job with no fault for DURATION seconds
# (default 600); every straggler or hang event is a false positive.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${1:-${ARGUS_FP_SECONDS:-600}}"
RANKS="${ARGUS_FP_RANKS:-8}"
MODE="${ARGUS_FP_NCCL_MODE:-async}"   # the simulator's NCCL semantics (async: real NCCL)
PORT="${ARGUS_FP_PORT:-9761}"
BIN=build/bin
OUT="build/bench-results/false-positives-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$OUT"
[ "$(id -u)" -eq 0 ] || { echo "false_positives: needs root (the agent loads eBPF)" >&2; exit 1; }

AGENT=""; SIM=""
cleanup() {
  [ -n "$SIM" ] && kill -TERM "$SIM" 2>/dev/null && wait "$SIM" 2>/dev/null || true
  [ -n "$AGENT" ] && kill -TERM "$AGENT" 2>/dev/null && wait "$AGENT" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

"$BIN/argus-agent" --listen "127.0.0.1:$PORT" --window 10 --log-level warn >"$OUT/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 1 100); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.2; done
START=$(date +%s)
"$BIN/argus-sim" --ranks "$RANKS" --steps 0 --step-ms 100 --init-ms 200 --job-id clean-run --quiet --nccl-mode "$MODE" \
  >"$OUT/sim.log" 2>&1 &
SIM=$!
sleep "$DURATION"
curl -s "127.0.0.1:$PORT/api/v1/events?since=$START" >"$OUT/events.json"
curl -s "127.0.0.1:$PORT/api/v1/ranks" >"$OUT/ranks.json"
python3 - "$OUT" "$DURATION" "$RANKS" <<'PY'
import json, sys
out, duration, ranks = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
events = json.load(open(f"{out}/events.json"))["events"]
bad = [e for e in events if e["kind"] in ("straggler", "hang") and e.get("job_id") == "clean-run"]
doc = json.load(open(f"{out}/ranks.json"))
calls = sum(r.get("nccl", {}).get("all_reduce", {}).get("calls", 0) for r in doc["ranks"] if r.get("job_id") == "clean-run")
print(f"clean run: {duration:.0f} s, {ranks} ranks, {calls} all-reduce calls watched, "
      f"{len(bad)} false positives (straggler/hang events)")
for e in bad:
    print("  ", e["time"], e["kind"], e["summary"])
open(f"{out}/summary.txt", "w").write(f"duration_s={duration} ranks={ranks} false_positives={len(bad)}\n")
PY
