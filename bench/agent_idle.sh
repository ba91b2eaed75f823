#!/usr/bin/env bash
# The agent's floor: its CPU, thread by thread, with no rank to watch.
#
#   sudo bench/agent_idle.sh OUT_DIR        (also `make bench`, part i)
#
# Starts argus-agent (default flags but the port and log level), lets it settle
# for ARGUS_BENCH_IDLE_SETTLE (8) seconds, then reads each thread's scheduler
# run time (/proc/PID/task/TID/schedstat, ns) over ARGUS_BENCH_IDLE_WINDOW (60)
# seconds. Prints one line per thread (name, CPU µs, share of one core, run
# slices in the window) and the total, and writes them to OUT_DIR/idle.txt. Then
# the same with one quiet rank tracked (OUT_DIR/idle-rank.txt; ARGUS_BENCH_IDLE_RANK=0
# skips it). Other processes
# starting on the machine meanwhile (exec events, /proc rechecks) are part of
# what it measures: run it on a quiet machine.
set -euo pipefail
OUT=${1:?usage: bench/agent_idle.sh OUT_DIR}
BUILD=${BUILD_DIR:-build}
SETTLE=${ARGUS_BENCH_IDLE_SETTLE:-8}
WINDOW=${ARGUS_BENCH_IDLE_WINDOW:-60}
AGENT=$BUILD/bin/argus-agent
[ "$(id -u)" -eq 0 ] || { echo "agent_idle: needs root (BPF)" >&2; exit 1; }
[ -x "$AGENT" ] || { echo "agent_idle: $AGENT missing (make build)" >&2; exit 1; }
mkdir -p "$OUT"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$AGENT" --listen "127.0.0.1:$port" --log-level warn >"$OUT/agent-idle.log" 2>&1 &
agent=$!
trap 'kill -KILL $agent 2>/dev/null || true' EXIT
sleep "$SETTLE"
kill -0 "$agent" || { echo "agent_idle: the agent exited; its log:" >&2; cat "$OUT/agent-idle.log" >&2; exit 1; }

# Nothing in the window may start a process: each exec is work for the agent
# (an exec event, follow-up reads of its maps, a parse of libraries it has not
# seen). So the window is read with shell builtins only, before and after, and
# the arithmetic comes after the second read.
declare -A before after
read_threads() {  # $1: name of the array to fill with "run_ns slices" per thread
  local -n into=$1
  local t ns waited slices
  into=()
  for t in /proc/"$agent"/task/*; do
    read -r ns waited slices <"$t/schedstat"
    into[$t]="$ns $slices"
  done
}
# measure TITLE FILE: the agent's threads over one window, into OUT/FILE.
measure() {
  local procs_before=0 p t ns slices ns0 slices0 d total=0 load
  for p in /proc/[0-9]*; do procs_before=$((procs_before + 1)); done
  read_threads before
  sleep "$WINDOW"
  read_threads after
  load=$(</proc/loadavg)
  {
    echo "$1: thread cpu_us share_of_core_pct slices_in_window (window ${WINDOW} s, $procs_before processes on the machine, load ${load% * *})"
    for t in "${!after[@]}"; do
      read -r ns slices <<<"${after[$t]}"
      read -r ns0 slices0 <<<"${before[$t]:-0 0}"
      d=$((ns - ns0))
      total=$((total + d))
      printf '%s %d %.4f %d\n' "$(cat "$t/comm")" $((d / 1000)) "$(python3 -c "print($d / ($WINDOW * 1e9) * 100)")" $((slices - slices0))
    done
    printf 'total %d %.4f\n' $((total / 1000)) "$(python3 -c "print($total / ($WINDOW * 1e9) * 100)")"
  } | tee "$OUT/$2"
}
measure "nothing to watch" idle.txt

# Then one quiet rank: a process that maps a copy of the simulator's NCCL and
# calls nothing (a job waiting on its data, a rank between long steps). The
# agent tracks it; what it costs over the floor is the price of watching.
if [ "${ARGUS_BENCH_IDLE_RANK:-1}" = 1 ] && [ -x "$BUILD/bin/lib_mapper" ] && [ -e "$BUILD/lib/libnccl.so.2" ]; then
  mkdir -p "$OUT/rank"
  cp "$BUILD/lib/libnccl.so.2" "$OUT/rank/libnccl.so.2"
  "$BUILD/bin/lib_mapper" --sleep-ms $(((SETTLE + WINDOW + 30) * 1000)) "$OUT/rank/libnccl.so.2" >"$OUT/rank/mapper.log" 2>&1 &
  mapper=$!
  trap 'kill -KILL $agent $mapper 2>/dev/null || true' EXIT
  sleep "$SETTLE"
  measure "one quiet rank (pid $mapper maps NCCL, calls nothing)" idle-rank.txt
  kill -KILL "$mapper" 2>/dev/null || true
  wait "$mapper" 2>/dev/null || true
fi
kill -TERM "$agent"
wait "$agent" 2>/dev/null || true
trap - EXIT
