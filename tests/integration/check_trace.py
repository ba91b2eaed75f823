#!/usr/bin/env python3
"""Checks a Chrome trace written by `argusctl trace` with Python's own JSON
parser: every rank of the job is a process, every track's complete events are
well nested (disjoint or contained, never partly overlapping), and the trace
holds GPU kernels, NCCL kernels, collectives, synchronize waits and bubbles.

usage: check_trace.py TRACE.json JOB_ID RANKS [--folded]"""
import json
import sys
from collections import defaultdict


def main():
    path, job, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # "--folded": the producer folded its compute kernels, drawn as "kernels" spans.
    compute = "kernels" if sys.argv[4:] == ["--folded"] else "kernel"
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    names = {}
    for e in events:
        if e["ph"] == "M" and e["name"] == "process_name":
            names[e["pid"]] = e["args"]["name"]
    ours = {pid for pid, n in names.items() if f"(job {job}," in n}
    problems = []
    if len(ours) != ranks:
        problems.append(f"expected {ranks} ranks of job {job}, found {sorted(names.values())}")
    tracks = defaultdict(list)
    cats = defaultdict(int)
    for e in events:
        if e["ph"] != "X" or e["pid"] not in ours:
            continue
        if e["dur"] < 0 or e["ts"] < 0:
            problems.append(f"negative time: {e}")
        tracks[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], e["name"]))
        cats[e["cat"]] += 1
    eps = 1e-6  # µs, printing slack
    for key, spans in tracks.items():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for s in spans:
            while stack and stack[-1][1] <= s[0] + eps:
                stack.pop()
            if stack and s[1] > stack[-1][1] + eps:
                problems.append(f"track {key}: {s} partly overlaps {stack[-1]}")
                break
            stack.append(s)
    for cat in (compute, "nccl_kernel", "collective", "sync", "bubble"):
        if cats[cat] == 0:
            problems.append(f"no '{cat}' spans (have {dict(cats)})")
    if problems:
        print("\n".join(problems[:20]))
        return 1
    print(f"ok: {sum(cats.values())} spans on {len(tracks)} tracks of {len(ours)} ranks: {dict(cats)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
