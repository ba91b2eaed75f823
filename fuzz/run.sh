#!/usr/bin/env bash
# Runs one libFuzzer target for SECONDS over its checked-in corpus.
#   fuzz/run.sh BINARY CORPUS_DIR WORK_DIR SECONDS
# New inputs go to WORK_DIR/corpus (the checked-in corpus is only read), crashes to
# WORK_DIR/artifacts; exit status non-zero on any finding (ASan, UBSan, abort, timeout).
# ARGUS_FUZZ_SEED=N fixes libFuzzer's seed: ctest sets it, so that `make test` tries the
# same inputs on every machine (a slower one tries a prefix of them) and a landing is
# never failed by chance; `make fuzz` leaves it unset and explores anew each run.
set -euo pipefail
bin=$1 corpus=$2 work=$3 seconds=$4
name=$(basename "$bin")
mkdir -p "$work/corpus" "$work/artifacts"
# UBSan halts on the first finding; ASan's leak check stays on.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
# -timeout: one input taking longer than this is a finding (a parser must be fast).
# -rss_limit_mb: the agent's parsers must not need more than this for one input.
seed=()
[ -n "${ARGUS_FUZZ_SEED:-}" ] && seed=(-seed="$ARGUS_FUZZ_SEED")
exec "$bin" "${seed[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/$name-" \
  "$work/corpus" "$corpus"
