#!/usr/bin/env python3
"""Rank-churn soak: the agent's RSS, fds and probes over time while short-lived
ranks come and go, each with its own copy of a library it probes.

Each "rank" is tests' lib_mapper mapping (as the loader maps libraries) the
shared sim libnccl.so.2 and its own fresh copy of gpu_bad_producer (a GPU
activity producer: 5 USDT sites, 5 spec slots), living --life seconds. Ranks
start at an even pace so that --ranks of them fit in --seconds. Every
--sample seconds the agent's VmRSS, open fds (perf-event and other), probes
attached and detaching, probed files, USDT slots used and files released are
written to a CSV; the summary compares the last fifth of the run with the
second fifth (after the first release grace period), as ratios.

Why a producer copy and not a private libnccl: the kernel detaches a perf
uprobe in ~0.1 s, one at a time (docs/performance.md); 30 probes of a private
libnccl per rank would need ~3 s of detaching each, more than a 0.6 s pace.

Needs root and a build (build/bin/argus-agent, lib_mapper, gpu_bad_producer).
  sudo bench/churn_soak.py [--seconds 600] [--ranks 1000] [--life 3] [--release 60]
"""
import argparse
import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from benchlib import metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def total(text, name, label=None):
    """Sum of a metric's samples (those with `label` when given)."""
    s = 0.0
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if label and label not in line:
            continue
        s += float(line.rsplit(" ", 1)[1])
    return s


def proc_sample(pid):
    rss = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
    perf = other = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "perf_event" in target:
            perf += 1
        elif not target.startswith("socket:"):
            other += 1
    return rss, perf, other


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--life", type=float, default=3.0)
    ap.add_argument("--release", type=float, default=60.0, help="--probe-release-seconds of the agent")
    ap.add_argument("--sample", type=float, default=10.0)
    ap.add_argument("--build", default=os.path.join(ROOT, os.environ.get("BUILD_DIR", "build")))
    ap.add_argument("--out", default=None, help="CSV path (default: <build>/bench-results/churn_soak.csv)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("churn_soak: must run as root (the agent loads BPF)")
    agent_bin = os.path.join(a.build, "bin", "argus-agent")
    mapper = os.path.join(a.build, "bin", "lib_mapper")
    producer = os.path.join(a.build, "bin", "gpu_bad_producer")
    nccl = os.path.join(a.build, "lib", "libnccl.so.2")
    for p in (agent_bin, mapper, producer, nccl):
        if not os.path.exists(p):
            sys.exit(f"churn_soak: {p} is missing; run 'make build' first")
    out = a.out or os.path.join(a.build, "bench-results", "churn_soak.csv")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    work = tempfile.mkdtemp(prefix="argus-soak-")
    port = 19000 + os.getpid() % 1000
    log = open(os.path.join(work, "agent.log"), "w")
    agent = subprocess.Popen([agent_bin, "--listen", f"127.0.0.1:{port}", "--probe-release-seconds", str(a.release)],
                             stdout=log, stderr=subprocess.STDOUT)
    rows = []
    live = []
    try:
        for _ in range(100):
            if metrics(port):
                break
            time.sleep(0.2)
        time.sleep(2)
        t0 = time.monotonic()
        pace = a.seconds / a.ranks
        started = 0
        next_sample = 0.0
        while True:
            now = time.monotonic() - t0
            while started < a.ranks and started * pace <= now:
                d = os.path.join(work, f"r{started}")
                os.mkdir(d)
                copy = os.path.join(d, "libproducer.so")
                shutil.copy(producer, copy)
                live.append(subprocess.Popen([mapper, "--sleep-ms", str(int(a.life * 1000)), nccl, copy],
                                             stdout=subprocess.DEVNULL))
                started += 1
            live = [p for p in live if p.poll() is None]
            if now >= next_sample:
                m = metrics(port)
                rss, perf, other = proc_sample(agent.pid)
                rows.append({"t_s": round(now, 1), "ranks_started": started, "rss_kib": rss, "perf_fds": perf,
                             "other_fds": other, "probes": total(m, "argus_agent_probes_attached"),
                             "detaching": total(m, "argus_agent_probes_detaching"),
                             "probed_files": total(m, "argus_agent_probed_files"),
                             "usdt_slots_used": total(m, "argus_agent_usdt_spec_slots", 'state="used"'),
                             "released_total": total(m, "argus_agent_probe_files_released_total"),
                             "tracked": total(m, "argus_agent_tracked_processes")})
                print(rows[-1], flush=True)
                next_sample += a.sample
            if now >= a.seconds and started >= a.ranks:
                break
            time.sleep(0.05)
    finally:
        for p in live:
            p.kill()
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=120)
        except subprocess.TimeoutExpired:
            agent.kill()
        shutil.rmtree(work, ignore_errors=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    n = len(rows)
    early, late = rows[n // 5: 2 * n // 5], rows[4 * n // 5:]

    def mean(rs, k):
        return sum(r[k] for r in rs) / max(1, len(rs))

    print(f"\nchurn soak: {a.ranks} ranks over {a.seconds:.0f} s (each {a.life} s, release after {a.release} s); CSV: {out}")
    for k in ("rss_kib", "perf_fds", "other_fds", "probes", "probed_files", "usdt_slots_used", "detaching"):
        e, l = mean(early, k), mean(late, k)
        ratio = f"{l / e:.2f}" if e else "n/a"
        print(f"  {k:16s} second fifth {e:10.1f}   last fifth {l:10.1f}   last/second {ratio}")
    print(f"  files released: {rows[-1]['released_total']:.0f}")


if __name__ == "__main__":
    main()
