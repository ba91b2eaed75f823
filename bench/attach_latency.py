#!/usr/bin/env python3
"""Attach latency: from a process mapping an NCCL file the agent has not seen to
that file's probes being attached, with the machine idle and with every core busy.

    sudo BUILD_DIR=build python3 bench/attach_latency.py OUT_DIR     (also `make bench`, part j)

Two shapes of rank, each ARGUS_BENCH_ATTACH_N (20) times per load, each with a
fresh copy (an inode of its own) of the simulator's libnccl.so.2:
  exec:      lib_mapper maps the copy right after exec (a launcher that links NCCL);
  dlopen@2s: python3 sleeps 2 s, then dlopens the copy (`import torch` loads NCCL
             seconds after exec: the case exec follow-ups do not cover).
t0 is when the process says it has mapped the file (its "ready" line, read at
once), or for dlopen when it says it is about to call dlopen (the agent may
attach before dlopen returns); t1 is the agent's own log line "attached N probes ... to nccl library
PATH" (millisecond timestamps). Busy: one spinning process per CPU, started
before the round. Prints p50, p90, p99 and max per case and load, and writes
them to OUT_DIR/attach.txt with every sample in OUT_DIR/attach-samples.txt.
"""
import datetime
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchlib import free_port

DLOPEN_AFTER_S = 2.0
PY_DLOPEN = (
    "import ctypes, sys, time\n"
    f"time.sleep({DLOPEN_AFTER_S})\n"
    "print('dlopen', flush=True)\n"
    "ctypes.CDLL(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "time.sleep(3600)\n"
)


def healthy(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def log_time(line):
    # "2026-12-04T13:01:02.345 info ...": the agent's local time, ms.
    stamp = line.split(" ", 1)[0]
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def attached_at(log_path, lib_path, deadline):
    pattern = re.compile(r"attached \d+ probes \(\d+ failed\) to nccl library " + re.escape(lib_path) + r"( |$)")
    while time.time() < deadline:
        with open(log_path, errors="replace") as f:
            for line in f:
                if pattern.search(line):
                    return log_time(line)
        time.sleep(0.02)
    return None


def percentile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: attach_latency.py OUT_DIR")
    out = sys.argv[1]
    build = os.environ.get("BUILD_DIR", "build")
    n = int(os.environ.get("ARGUS_BENCH_ATTACH_N", "20"))
    agent_bin = os.path.join(build, "bin", "argus-agent")
    mapper = os.path.join(build, "bin", "lib_mapper")
    shim = os.path.join(build, "lib", "libnccl.so.2")
    for f in (agent_bin, mapper, shim):
        if not os.path.exists(f):
            sys.exit(f"attach_latency: {f} missing (make build)")
    if os.geteuid() != 0:
        sys.exit("attach_latency: needs root (BPF)")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="argus-attach-")
    port = free_port()
    log_path = os.path.join(out, "agent-attach.log")
    agent = subprocess.Popen([agent_bin, "--listen", f"127.0.0.1:{port}", "--log-level", "info", "--kmsg", "off"],
                             stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    spinners = []
    samples = {}
    try:
        t_end = time.time() + 15
        while not healthy(port):
            if agent.poll() is not None or time.time() > t_end:
                sys.exit("attach_latency: the agent did not start; see " + log_path)
            time.sleep(0.1)
        time.sleep(2)  # the start-up scan is done
        for load in ("idle", "busy"):
            if load == "busy":
                spinners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(os.cpu_count() or 1)]
                time.sleep(1)
            for shape in ("exec", "dlopen@2s"):
                key = (shape, load)
                samples[key] = []
                for i in range(n):
                    d = os.path.join(work, f"{shape.replace('@', '-')}-{load}-{i}")
                    os.makedirs(d)
                    lib = os.path.join(d, "libnccl.so.2")
                    shutil.copy(shim, lib)
                    if shape == "exec":
                        argv = [mapper, lib]
                    else:
                        argv = [sys.executable, "-c", PY_DLOPEN, lib]
                    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                    try:
                        if shape != "exec":
                            if proc.stdout.readline().strip() != "dlopen":
                                sys.exit(f"attach_latency: {argv[0]} did not start")
                            t0 = time.time()
                        if proc.stdout.readline().strip() != "ready":
                            sys.exit(f"attach_latency: {argv[0]} did not map {lib}")
                        if shape == "exec":
                            t0 = time.time()
                        t1 = attached_at(log_path, os.path.realpath(lib), time.time() + 15)
                        samples[key].append(None if t1 is None else t1 - t0)
                    finally:
                        proc.kill()
                        proc.wait()
    finally:
        for s in spinners:
            s.kill()
            s.wait()
        agent.terminate()
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.kill()
        shutil.rmtree(work, ignore_errors=True)

    lines = [f"attach latency, seconds from mapped to probes attached ({n} per row; busy = {os.cpu_count()} spinners)",
             "shape load p50 p90 p99 max missed"]
    with open(os.path.join(out, "attach-samples.txt"), "w") as f:
        for (shape, load), xs in samples.items():
            f.write(f"{shape} {load} " + " ".join("none" if x is None else f"{x:.3f}" for x in xs) + "\n")
            got = [max(0.0, x) for x in xs if x is not None]
            missed = len(xs) - len(got)
            if not got:
                lines.append(f"{shape} {load} - - - - {missed}")
                continue
            lines.append(f"{shape} {load} {statistics.median(got):.3f} {percentile(got, 0.9):.3f} "
                         f"{percentile(got, 0.99):.3f} {max(got):.3f} {missed}")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "attach.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
