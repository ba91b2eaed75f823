#!/usr/bin/env bash
# The capabilities the chart's capabilities mode adds (helm/argus/values.yaml,
# capabilities.add) and the systemd unit grants (packaging/systemd/
# argus-agent.service: CapabilityBoundingSet, AmbientCapabilities) are exactly
# those the agent checks at start, as `argus-agent --list-capabilities` prints
# them (one per line: CAP_NAME<TAB>what needs it<TAB>what goes blind without it).
#   check_capabilities.sh BUILD/bin/argus-agent
set -euo pipefail
cd "$(dirname "$0")"
source ./lib.sh
AGENT=${1:?usage: check_capabilities.sh PATH/TO/argus-agent}
PY="$CHART_VENV/bin/python"
need python "$PY"
[ -x "$AGENT" ] || { echo "FAIL: $AGENT is not built (cmake --build build --target argus-agent)"; exit 1; }

if ! listed=$("$AGENT" --list-capabilities 2>&1); then
  echo "FAIL: '$AGENT --list-capabilities' failed; the flag is the source of the chart's list (notes/interfaces.md):"
  echo "$listed" | sed 's/^/     /'
  exit 1
fi
echo "$listed" | sed 's/^/agent: /'
"$PY" - "$listed" "$CHART/values.yaml" "$REPO_ROOT/packaging/systemd/argus-agent.service" <<'PY'
import re, sys, yaml
listed, values_file, unit_file = sys.argv[1:4]
problems = []
agent = []
for line in listed.splitlines():
    fields = line.split("\t")
    if len(fields) != 3 or not re.fullmatch(r"CAP_[A-Z_]+", fields[0]) or not all(f.strip() for f in fields[1:]):
        problems.append(f"agent line not CAP_NAME<TAB>need<TAB>without: {line!r}")
        continue
    agent.append(fields[0])
if not agent:
    problems.append("the agent listed no capability")
if len(set(agent)) != len(agent):
    problems.append(f"the agent lists a capability twice: {agent}")

def compare(where, got):
    if len(set(got)) != len(got):
        problems.append(f"{where} lists a capability twice: {got}")
    if set(got) != set(agent):
        problems.append(f"{where}: {sorted(got)}, the agent: {sorted(agent)} "
                        f"(missing {sorted(set(agent) - set(got))}, extra {sorted(set(got) - set(agent))})")

compare("values.yaml capabilities.add", yaml.safe_load(open(values_file))["capabilities"]["add"])
unit = {}
for line in open(unit_file):
    m = re.match(r"^(CapabilityBoundingSet|AmbientCapabilities)=(.*)$", line.strip())
    if m:
        unit.setdefault(m.group(1), []).extend(m.group(2).split())
for key in ("CapabilityBoundingSet", "AmbientCapabilities"):
    if key not in unit:
        problems.append(f"{unit_file} has no {key}=")
    else:
        compare(f"{unit_file} {key}", unit[key])
for p in problems:
    print("FAIL", p)
print(f"{len(agent)} capabilities; values.yaml and the systemd unit {'differ' if problems else 'agree'}")
sys.exit(1 if problems else 0)
PY
