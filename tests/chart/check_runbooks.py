#!/usr/bin/env python3
"""Every alert of helm/argus/rules/argus-rules.yaml has a runbook, and every runbook an alert.

  check_runbooks.py RULES_FILE RUNBOOK_DIR

Each alert's runbook_url must be <base>/<AlertName>.md with the repository's base
(the chart may swap the base; the file keeps this one) and RUNBOOK_DIR/<AlertName>.md
must exist and not be empty. A RUNBOOK_DIR/Argus*.md that no alert names is reported
too (a renamed alert leaves its old runbook behind).
"""
import os
import sys

import yaml

BASE = "https://github.com/argus-gpu/argus/blob/main/docs/runbooks"


def main(rules_file, runbook_dir):
    problems = []
    alerts = [r for g in yaml.safe_load(open(rules_file))["groups"] for r in g["rules"] if "alert" in r]
    if not alerts:
        problems.append(f"{rules_file} has no alerts")
    for r in alerts:
        name = r["alert"]
        url = (r.get("annotations") or {}).get("runbook_url")
        if url != f"{BASE}/{name}.md":
            problems.append(f"{name}: runbook_url is {url!r}, expected {BASE}/{name}.md")
        path = os.path.join(runbook_dir, f"{name}.md")
        if not os.path.isfile(path):
            problems.append(f"{name}: {path} does not exist")
        elif os.path.getsize(path) == 0:
            problems.append(f"{name}: {path} is empty")
    names = {r["alert"] for r in alerts}
    if os.path.isdir(runbook_dir):
        for f in sorted(os.listdir(runbook_dir)):
            if f.startswith("Argus") and f.endswith(".md") and f[:-3] not in names:
                problems.append(f"{os.path.join(runbook_dir, f)} belongs to no alert of {rules_file}")
    for p in problems:
        print("FAIL", p)
    print(f"{len(alerts)} alerts, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
