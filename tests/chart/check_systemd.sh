#!/usr/bin/env bash
# packaging/systemd/argus-agent.service:
#   1. `systemd-analyze verify` on a copy whose ExecStart names the built agent
#      (verify requires the binary to exist); any line it prints fails the
#      test: verify reports unknown keys and bad values as warnings with exit 0;
#   2. `systemd-analyze security --offline` scores the hardening: overall
#      exposure must stay at or below 5.0 (the unit scores 4.5, "OK").
#   check_systemd.sh BUILD/bin/argus-agent
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
AGENT=$(realpath "${1:?usage: check_systemd.sh PATH/TO/argus-agent}")
need systemd-analyze "$(command -v systemd-analyze || echo /nonexistent/systemd-analyze)"
[ -x "$AGENT" ] || { echo "FAIL: $AGENT is not built"; exit 1; }
UNIT="$REPO_ROOT/packaging/systemd/argus-agent.service"
grep -q '^ExecStart=/usr/local/bin/argus-agent ' "$UNIT" || { echo "FAIL: $UNIT: ExecStart is not /usr/local/bin/argus-agent"; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
sed "s#^ExecStart=/usr/local/bin/argus-agent #ExecStart=$AGENT #" "$UNIT" > "$WORK/argus-agent.service"

rc=0
out=$(systemd-analyze verify --man=no "$WORK/argus-agent.service" 2>&1) || rc=$?
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  echo "FAIL: systemd-analyze verify (exit $rc):"
  echo "$out" | sed 's/^/     /'
  exit 1
fi
echo "ok   systemd-analyze verify: no warnings"
if ! systemd-analyze security --offline=true --threshold=50 --no-pager "$WORK/argus-agent.service" > "$WORK/security" 2>&1; then
  echo "FAIL: systemd-analyze security --offline: exposure above 5.0:"
  sed 's/^/     /' "$WORK/security"
  exit 1
fi
echo "ok   $(grep 'Overall exposure' "$WORK/security")"
