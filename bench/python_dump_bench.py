#!/usr/bin/env python3
"""Python stack dumps of an 8-rank job: argus (argusctl stacks, through the agent's
route) against py-spy dump, in wall time and in how long each stops the target.

Each rank is a real interpreter that loads the real NCCL (so the agent tracks it),
sits in a three-deep call like a rank waiting in a collective, and runs a ticker
thread that sleeps 0.5 ms in a loop and notes every wake-up 1 ms late or more (CLOCK_MONOTONIC):
a dump that stops the process shows up as a gap covering the dump. Gaps that fall
inside a tool's dump windows are that tool's pause; the same count over an equal
stretch with no dump is the machine's own noise.

usage: python_dump_bench.py OUT_DIR   (root; BUILD_DIR, ARGUS_BENCH_PY, ARGUS_NCCL,
       ARGUS_PYSPY, ARGUS_BENCH_PY_REPS override the defaults)
"""
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time

from benchlib import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")))
RANKS = 8
REPS = int(os.environ.get("ARGUS_BENCH_PY_REPS", "5"))
NCCL = os.environ.get("ARGUS_NCCL", "/usr/local/cuda/lib/libnccl.so.2")
PYSPY = os.environ.get("ARGUS_PYSPY", "/var/cache/argus/tools-venv/bin/py-spy")

RANK_SCRIPT = r'''
import ctypes, sys, threading, time
ctypes.CDLL(sys.argv[1])
def ticker(out):
    while True:
        last = time.monotonic_ns()
        time.sleep(0.0005)
        now = time.monotonic_ns()
        if now - last > 1_500_000:  # 1 ms late or more
            out.write(f"{last} {now - last}\n"); out.flush()
def inner(): time.sleep(3600)
def middle(): inner()
def outer(): middle()
threading.Thread(target=ticker, args=(open(sys.argv[2], "w"),), daemon=True).start()
print("ready", flush=True)
outer()
'''


def pick_python():
    if os.environ.get("ARGUS_BENCH_PY"):
        return os.environ["ARGUS_BENCH_PY"]
    root = os.environ.get("PYENV_ROOT", "/root/.pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", "3.12.*", "bin", "python3.12")))
    return found[-1] if found else sys.executable


def get(url):
    import urllib.request
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read()


def gaps_in(files, windows):
    """The longest gap of each rank that overlaps a window, summed over windows (max per window)."""
    worst = []
    gaps = []
    for f in files:
        with open(f) as fh:
            for line in fh:
                a, d = line.split()
                gaps.append((int(a), int(a) + int(d)))
    for (w0, w1) in windows:
        longest = 0
        for (g0, g1) in gaps:
            if g0 < w1 and g1 > w0:
                longest = max(longest, g1 - g0)
        worst.append(longest / 1e6)
    return worst


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = os.path.abspath(sys.argv[1])
    os.makedirs(out, exist_ok=True)
    agent_bin, argusctl = os.path.join(BUILD, "bin", "argus-agent"), os.path.join(BUILD, "bin", "argusctl")
    for f in (agent_bin, argusctl, NCCL):
        if not os.path.exists(f):
            print(f"python_dump_bench: missing {f}", file=sys.stderr)
            return 1
    have_spy = os.path.exists(PYSPY)
    py = pick_python()
    script = os.path.join(out, "rank.py")
    with open(script, "w") as fh:
        fh.write(RANK_SCRIPT)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    procs = []
    try:
        agent = subprocess.Popen([agent_bin, "--listen", f"127.0.0.1:{port}", "--debug-routes", "--log-level", "warn"],
                                 stdout=open(os.path.join(out, "agent.log"), "w"), stderr=subprocess.STDOUT)
        procs.append(agent)
        ticks = []
        for r in range(RANKS):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(RANKS),
                       LOCAL_WORLD_SIZE=str(RANKS), TORCHELASTIC_RUN_ID="pybench")
            tick = os.path.join(out, f"gaps-{r}.txt")
            ticks.append(tick)
            procs.append(subprocess.Popen([py, "-u", script, NCCL, tick], env=env, stdout=subprocess.DEVNULL))
        rank_pids = {r: procs[1 + r].pid for r in range(RANKS)}
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                _, body = get(url + "/api/v1/ranks")
                doc = json.loads(body)
                n = sum(1 for x in doc["ranks"] if x.get("job_id") == "pybench" and x.get("state") == "running")
                if n == RANKS:
                    break
            except Exception:
                pass
            time.sleep(0.2)
        else:
            print("python_dump_bench: the agent did not find the 8 ranks", file=sys.stderr)
            return 1
        time.sleep(1)

        def timed(cmd):
            t0 = time.monotonic_ns()
            rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
            t1 = time.monotonic_ns()
            return rc, t0, t1

        results = {"argus_job": [], "argus_route_rank": [], "pyspy_job": [], "pyspy_nonblocking_job": []}
        windows = {"argus": [], "pyspy": [], "pyspy_nonblocking": [], "idle": []}
        for _ in range(REPS):
            rc, t0, t1 = timed([argusctl, "stacks", "pybench", "--agent", url])
            assert rc == 0, "argusctl stacks failed"
            results["argus_job"].append((t1 - t0) / 1e6)
            windows["argus"].append((t0, t1))
            for r in range(RANKS):
                t0 = time.monotonic_ns()
                status, _ = get(f"{url}/api/v1/ranks/pybench/{r}/python-stacks")
                t1 = time.monotonic_ns()
                assert status == 200
                results["argus_route_rank"].append((t1 - t0) / 1e6)
                windows["argus"].append((t0, t1))
            if have_spy:
                for key, extra in (("pyspy", []), ("pyspy_nonblocking", ["--nonblocking"])):
                    j0 = time.monotonic_ns()
                    for r in range(RANKS):
                        rc, t0, t1 = timed([PYSPY, "dump", "--pid", str(rank_pids[r])] + extra)
                        windows[key].append((t0, t1))
                    results[key + "_job"].append((time.monotonic_ns() - j0) / 1e6)
            # An equal stretch with no dump: the machine's own gaps.
            t0 = time.monotonic_ns()
            time.sleep(max(results["argus_job"][-1], 50) / 1e3)
            windows["idle"].append((t0, time.monotonic_ns()))
        time.sleep(0.2)
        pauses = {k: gaps_in(ticks, v) for k, v in windows.items()}
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL if p is not procs[0] else signal.SIGTERM)
        for p in procs:
            p.wait()

    med = lambda xs: statistics.median(xs) if xs else float("nan")
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": py, "ranks": RANKS, "reps": REPS,
        "argus_stacks_job_ms": med(results["argus_job"]),
        "argus_route_per_rank_ms": med(results["argus_route_rank"]),
        "pyspy_dump_job_ms": med(results["pyspy_job"]),
        "pyspy_nonblocking_job_ms": med(results["pyspy_nonblocking_job"]),
        "target_pause_ms_max": {k: (max(v) if v else 0.0) for k, v in pauses.items()},
        "target_pause_ms_median": {k: med(v) for k, v in pauses.items()},
    }
    with open(os.path.join(out, "python-dump.json"), "w") as fh:
        json.dump(summary, fh, indent=2)
    lines = [f"f. Python stack dumps, {RANKS} ranks ({os.path.basename(py)}), median of {REPS}:",
             f"   argusctl stacks JOB (all ranks, grouped): {summary['argus_stacks_job_ms']:.1f} ms;"
             f" one rank through the route: {summary['argus_route_per_rank_ms']:.1f} ms"]
    if have_spy:
        lines.append(f"   py-spy dump, the 8 ranks one by one: {summary['pyspy_dump_job_ms']:.1f} ms"
                     f" ({summary['pyspy_dump_job_ms'] / summary['argus_stacks_job_ms']:.1f}x argus);"
                     f" --nonblocking: {summary['pyspy_nonblocking_job_ms']:.1f} ms")
    tm, tp = summary["target_pause_ms_median"], summary["target_pause_ms_max"]
    lines.append("   rank stall inside a dump window (ms; a 0.5 ms sleep loop woken >=1 ms late), median / max: "
                 + ", ".join(f"{k} {tm[k]:.1f} / {tp[k]:.1f}" for k in tp))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
