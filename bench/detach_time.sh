#!/usr/bin/env bash
# How long argus-agent takes to stop (SIGTERM to exit) with ~100 uprobes
# attached, with one perf event per probe (--uprobe-links perf, what kernels
# before 6.6 get) and with uprobe_multi links (--uprobe-links multi).
#
#   sudo bench/detach_time.sh OUT_DIR        (also `make bench`, part h)
#
# Each round starts an agent with --probes deep, then processes that each map
# a fresh copy (a file, an inode, of their own) of the simulator's libnccl.so.2
# and libcuda.so.1 until the agent reports at least ARGUS_BENCH_DETACH_PROBES
# (100) probes attached, then stops the agent. The modes alternate for
# ARGUS_BENCH_DETACH_ROUNDS (3) rounds each. Also timed: the release of one
# library pair (its processes end; the agent detaches its probes off the event
# loop), as the time until argus_agent_probes_detaching is 0 again.
#
# Prints "mode round probes links_per_pair stop_s release_s" lines and a summary with
# the medians and their ratio; writes them to OUT_DIR/detach.txt.
set -euo pipefail
OUT=${1:?usage: bench/detach_time.sh OUT_DIR}
BUILD=${BUILD_DIR:-build}
ROUNDS=${ARGUS_BENCH_DETACH_ROUNDS:-3}
WANT=${ARGUS_BENCH_DETACH_PROBES:-100}
AGENT=$BUILD/bin/argus-agent
MAPPER=$BUILD/bin/lib_mapper
[ "$(id -u)" -eq 0 ] || { echo "detach_time: needs root (BPF)" >&2; exit 1; }
for f in "$AGENT" "$MAPPER" "$BUILD/lib/libnccl.so.2" "$BUILD/lib/libcuda.so.1"; do
  [ -x "$f" ] || [ -f "$f" ] || { echo "detach_time: $f missing (make build)" >&2; exit 1; }
done
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/argus-detach-XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
metric_sum() {  # metric_sum PORT NAME: the sum of a family's samples
  curl -fsS -m 5 "http://127.0.0.1:$1/metrics" 2>/dev/null | awk -v n="$2" '$1 ~ "^"n"({|$)" {s += $2} END {print s + 0}'
}
wait_until() {  # wait_until SECONDS CMD...: polls every 50 ms
  local deadline
  deadline=$(python3 -c "print($(now) + $1)")
  shift
  while ! "$@"; do
    python3 -c "import sys; sys.exit(0 if $(now) < $deadline else 1)" || return 1
    sleep 0.05
  done
}
healthy() { curl -fs -o /dev/null "http://127.0.0.1:$1/healthz" 2>/dev/null; }
probes_at_least() { [ "$(metric_sum "$1" argus_agent_probes_attached)" -ge "$2" ]; }
nothing_detaching() { [ "$(metric_sum "$1" argus_agent_probes_detaching)" -eq 0 ]; }
released_at_least() { [ "$(metric_sum "$1" argus_agent_probe_files_released_total)" -ge "$2" ]; }

# map_copy DIR: a process mapping its own copies of the shim libraries; its pid
# in MAPPED (not echoed: a $(...) subshell would lose its PIDS entry, and a
# failed round would leave it running).
MAPPED=
map_copy() {
  mkdir -p "$1"
  cp "$BUILD/lib/libnccl.so.2" "$BUILD/lib/libcuda.so.1" "$1/"
  "$MAPPER" "$1/libnccl.so.2" "$1/libcuda.so.1" >"$1/mapper.log" 2>&1 &
  MAPPED=$!
  PIDS+=("$MAPPED")
}
# settled PORT: the probe count, once two reads 0.3 s apart agree (one copy's
# libraries attach a few ms apart: a read between them would undercount); the
# last read after 30 s if it never does.
settled() {
  local a b
  b=$(metric_sum "$1" argus_agent_probes_attached)
  for _ in $(seq 1 100); do
    sleep 0.3
    a=$b
    b=$(metric_sum "$1" argus_agent_probes_attached)
    [ "$a" = "$b" ] && break
  done
  echo "$b"
}

round() {  # round MODE N
  local mode=$1 n=$2 port agent copies=0 probes links t0 stop_s release_s first
  port=$(free_port)
  "$AGENT" --listen "127.0.0.1:$port" --probes deep --uprobe-links "$mode" --probe-release-seconds 0.2 \
    --offcpu off --kmsg off --log-level info >"$WORK/agent-$mode-$n.log" 2>&1 &
  agent=$!
  PIDS+=("$agent")
  wait_until 15 healthy "$port" || { tail "$WORK/agent-$mode-$n.log" >&2; return 1; }
  # Probes on files other processes of the machine map count too: per copy is the difference.
  local base per_copy
  base=$(settled "$port")
  map_copy "$WORK/$mode-$n-0"
  first=$MAPPED
  copies=1
  wait_until 30 probes_at_least "$port" $((base + 1)) || { tail "$WORK/agent-$mode-$n.log" >&2; return 1; }
  per_copy=$(($(settled "$port") - base))
  # WANT probes still attached once the first pair is released.
  while [ $(((copies - 1) * per_copy)) -lt "$WANT" ]; do
    map_copy "$WORK/$mode-$n-$copies"
    copies=$((copies + 1))
  done
  wait_until 60 probes_at_least "$port" $((base + copies * per_copy)) || {
    echo "detach_time: $((base + copies * per_copy)) probes expected (base $base, $copies copies of $per_copy)," \
      "$(metric_sum "$port" argus_agent_probes_attached) attached" >&2
    tail "$WORK/agent-$mode-$n.log" >&2
    return 1
  }
  # Release one pair: its process ends, the agent detaches its probes.
  kill -TERM "$first"
  t0=$(now)
  wait_until 60 released_at_least "$port" 1
  wait_until 60 nothing_detaching "$port"
  release_s=$(python3 -c "print(round($(now) - $t0, 3))")
  probes=$(metric_sum "$port" argus_agent_probes_attached)
  # Links of one library pair: the agent logs "attached N probes (F failed) to KIND library PATH (L MODE links)".
  links=$(grep -o '([0-9]* [a-z]* links)' "$WORK/agent-$mode-$n.log" | tr -d '(' | awk 'NR <= 2 {s += $1} END {print s + 0}')
  t0=$(now)
  kill -TERM "$agent"
  wait "$agent" 2>/dev/null || true
  stop_s=$(python3 -c "print(round($(now) - $t0, 3))")
  printf '%s %s %s %s %s %s\n' "$mode" "$n" "$probes" "$links" "$stop_s" "$release_s" | tee -a "$OUT/detach.txt"
  for p in "${PIDS[@]}"; do [ "$p" != "$agent" ] && kill -TERM "$p" 2>/dev/null || true; done
  PIDS=()
}

: >"$OUT/detach.txt"
echo "mode round probes_at_stop links_per_pair stop_s release_one_pair_s"
for n in $(seq 1 "$ROUNDS"); do
  round perf "$n"
  round multi "$n"
done
python3 - "$OUT/detach.txt" <<'EOF' | tee "$OUT/detach-summary.txt"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {}
for mode in ("perf", "multi"):
    r = [x for x in rows if x[0] == mode]
    med[mode] = {k: statistics.median(float(x[i]) for x in r) for k, i in (("probes", 2), ("stop", 4), ("release", 5))}
    print(f"{mode}: median of {len(r)}: {med[mode]['probes']:.0f} probes at stop, stop {med[mode]['stop']:.2f} s, "
          f"release of one library pair {med[mode]['release']:.2f} s")
if med["multi"]["stop"] > 0 and med["multi"]["release"] > 0:
    print(f"perf / multi: stop {med['perf']['stop'] / med['multi']['stop']:.1f}x, "
          f"release {med['perf']['release'] / med['multi']['release']:.1f}x")
EOF
