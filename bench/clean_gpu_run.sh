#!/bin/bash
# A clean pipeline job with the GPU layer on: the agent's CPU over 60 s and any
# straggler or pipeline_bubble event it raised (there should be none).
#   sudo bench/clean_gpu_run.sh   (from the repository root, after make build; ~2 min)
set -u
PORT=9771
build/bin/argus-agent --listen 127.0.0.1:$PORT --window 10 --log-level warn > "${TMPDIR:-/tmp}/clean-gpu-agent.log" 2>&1 &
AG=$!
sleep 2
build/bin/argus-sim --ranks 8 --steps 0 --step-ms 100 --job-id clean-pp --pp 4 --quiet > "${TMPDIR:-/tmp}/clean-gpu-sim.log" 2>&1 &
SIM=$!
sleep 15
t0=$(awk '{print $14+$15}' /proc/$AG/stat); s0=$(date +%s.%N)
sleep 60
t1=$(awk '{print $14+$15}' /proc/$AG/stat); s1=$(date +%s.%N)
hz=$(getconf CLK_TCK)
echo "agent CPU over 60 s: $(python3 -c "print(f'{($t1-$t0)/$hz/($s1-$s0)*100:.2f}% of a core')")  RSS: $(awk '/VmRSS/{print $2/1024 " MiB"}' /proc/$AG/status)  load: $(cut -d' ' -f1-3 /proc/loadavg)"
sleep 45
curl -s "127.0.0.1:$PORT/api/v1/events?since=0" | python3 -c '
import json,sys
ev=[e for e in json.load(sys.stdin)["events"] if e["job_id"]=="clean-pp"]
print("events of clean-pp:", [(e["kind"], e["rank"]) for e in ev if e["kind"]!="rank_exit"])'
curl -s "127.0.0.1:$PORT/metrics" | grep -E '^argus_(pipeline_bubble_ratio|gpu_busy_ratio|gpu_step_summary_bytes)\{job_id="clean-pp",rank="[04]"' 
kill $SIM; wait $SIM 2>/dev/null; kill $AG; wait $AG 2>/dev/null
