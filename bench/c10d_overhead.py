#!/usr/bin/env python3
"""What the c10d probes cost a PyTorch job (issue 31, part 5).

  sudo bench/c10d_overhead.py OUT_DIR [--calls 20000] [--rounds 3] [--steps 300]

a. Per call: a one-rank Gloo group (real torch, from the cached venv) times
   dist.all_reduce of one float, which passes through
   c10d::ProcessGroupGloo::allreduce once per call: with no tracer, with
   argus-agent as deployed (its c10d probes attached, and its kernel layer and
   Python sampler, which a Gloo call's thread hand-offs wake too), with the
   agent's probes alone (--offcpu off --python-sample-hz 0 --python-gc-probes
   off), and with bpftrace counting the same uprobe. Rounds alternate; the
   figures are each condition's median ns per call and the ratio to no tracer,
   all from this one run. A call costs ~100 us and this VM's noise between
   rounds is ~10%, more than a uprobe; so the kernel's own accounting
   (kernel.bpf_stats_enabled, on during the traced rounds) also gives each
   tracer's BPF program's ns per run: Argus's argus_c10d_coll_enter against
   bpftrace's counting program, on the same calls, and Argus's timing of the
   call's Work::wait (argus_c10d_wait_enter and its return).
b. The training loop: tests/python/pg_train.py, 2 ranks under torchrun (DDP,
   Gloo, no sleep between steps), steps per second with no agent, the agent as
   deployed, and its probes alone, alternating rounds.

Writes OUT_DIR/c10d.json and prints a summary. Needs root (the agent loads BPF).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import prog_stats, free_port, metrics, msum, stop  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bin")
VENV = os.path.join(os.environ.get("ARGUS_CACHE_DIR", "/var/cache/argus"), "torch-venv")
PYTHON = os.path.join(VENV, "bin", "python")
TORCHRUN = os.path.join(VENV, "bin", "torchrun")
ALLREDUCE = "_ZN4c10d16ProcessGroupGloo9allreduceERSt6vectorIN2at6TensorESaIS3_EERKNS_16AllreduceOptionsE"

# The timed loop: it says when it is ready (torch imported, group made), waits
# for the go file (the tracer attached), then prints ns per call.
CALLS = r"""
import json, os, sys, time
import torch, torch.distributed as dist
ready, go, n, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
t = torch.zeros(1)
for _ in range(200):
    dist.all_reduce(t)
open(ready, "w").write(str(os.getpid()))
while not os.path.exists(go):
    time.sleep(0.05)
t0 = time.perf_counter_ns()
for _ in range(n):
    dist.all_reduce(t)
print(json.dumps({"ns_per_call": (time.perf_counter_ns() - t0) / n}))
dist.destroy_process_group()
"""


def wait_for(path, proc, seconds=120):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def ns_per_run(before, after, calls, name=None):
    """The ns per run of the program that ran about once per call between the
    two readings (`name`, or any program new since `before`)."""
    for pid, (n, cnt, ns) in after.items():
        if name is not None and n != name:
            continue
        if name is None and pid in before:
            continue
        c0, t0 = (before[pid][1], before[pid][2]) if pid in before else (0, 0)
        if cnt - c0 >= 0.9 * calls:
            return (ns - t0) / (cnt - c0)
    return None


def torch_probes_attached(port):
    return msum(metrics(port), "argus_agent_probes_attached", library="torch")


def one_call_round(work, condition, calls, agent_port, bpf=None):
    ready, go = os.path.join(work, "ready"), os.path.join(work, "go")
    for f in (ready, go):
        if os.path.exists(f):
            os.remove(f)
    proc = subprocess.Popen([PYTHON, "-c", CALLS, ready, go, str(calls), str(free_port())],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    tracer = None
    try:
        if not wait_for(ready, proc):
            raise RuntimeError(f"{condition}: the timed loop did not start")
        if condition == "argus":
            end = time.time() + 60
            while torch_probes_attached(agent_port) < 1 and time.time() < end:
                time.sleep(0.2)
            if torch_probes_attached(agent_port) < 1:
                raise RuntimeError("argus: no c10d probe attached")
            time.sleep(0.5)
        elif condition == "bpftrace":
            lib = os.path.join(VENV, "lib", "python3.11", "site-packages", "torch", "lib", "libtorch_cpu.so")
            log = open(os.path.join(work, "bpftrace.log"), "w")
            tracer = subprocess.Popen(["bpftrace", "-e", f'uprobe:{lib}:{ALLREDUCE} {{ @calls[tid] = count(); }}'],
                                      stdout=log, stderr=subprocess.STDOUT)
            end = time.time() + 60
            while time.time() < end and "Attaching" not in open(os.path.join(work, "bpftrace.log")).read():
                time.sleep(0.1)
            time.sleep(1.0)
        before = prog_stats() if bpf is not None else {}
        open(go, "w").close()
        out, _ = proc.communicate(timeout=600)
        if bpf is not None:
            # In bpftrace's round every program is measured from 0 (new since `before`
            # means it was loaded for this round): its first reading is taken before it loaded.
            name = "argus_c10d_coll_enter" if condition == "argus" else None
            base = before if condition == "argus" else bpf.get("baseline", {})
            after = prog_stats()
            per_run = ns_per_run(base, after, calls, name)
            if per_run is not None:
                bpf.setdefault(condition, []).append(per_run)
            if condition == "argus":  # the synchronous call's Work::wait: entry and return
                waits = [ns_per_run(base, after, calls, n) for n in ("argus_c10d_wait_enter", "argus_c10d_wait_exit")]
                if None not in waits:
                    bpf.setdefault("argus_wait", []).append(sum(waits))
        return json.loads(out.strip().splitlines()[-1])["ns_per_call"]
    finally:
        if proc.poll() is None:
            stop(proc, timeout=10)
        if tracer:
            stop(tracer, timeout=10)


def train_round(work, steps, tries=3):
    """The job's steps per second; a job that fails to start (a rendezvous
    port taken meanwhile) is run again."""
    for attempt in range(tries):
        try:
            return train_once(work, steps)
        except subprocess.CalledProcessError:
            if attempt == tries - 1:
                raise
            print("torchrun failed; again", flush=True)


def train_once(work, steps):
    truth = tempfile.mkdtemp(dir=work)
    subprocess.run([TORCHRUN, "--nnodes", "1", "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                    f"127.0.0.1:{free_port()}", "--rdzv_id", "c10dbench",
                    os.path.join(ROOT, "tests", "python", "pg_train.py"), "--steps", str(steps), "--step-sleep", "0",
                    "--truth-dir", truth],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    rates = []
    for name in os.listdir(truth):
        t = json.load(open(os.path.join(truth, name)))
        rates.append(t["steps"] / (t["finished"] - t["started"]))
    shutil.rmtree(truth)
    return min(rates)  # the job runs at its slowest rank's pace


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("c10d_overhead: needs root (the agent loads eBPF)")
    if not os.path.exists(TORCHRUN):
        sys.exit(f"c10d_overhead: no torch venv at {VENV} (scripts/install-deps.sh)")
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="c10d-bench-")
    have_bpftrace = shutil.which("bpftrace") is not None
    port = free_port()
    calls = {"none": [], "argus": [], "argus_probes": [], "bpftrace": []}
    train = {"none": [], "argus": [], "argus_probes": []}
    probes_only = ["--offcpu", "off", "--python-sample-hz", "0", "--python-gc-probes", "off"]

    def with_agent(fn, extra=()):
        agent = subprocess.Popen([os.path.join(BIN, "argus-agent"), "--listen", f"127.0.0.1:{port}",
                                  "--log-level", "warn", *extra],
                                 stdout=open(os.path.join(a.out, "agent.log"), "a"), stderr=subprocess.STDOUT)
        try:
            end = time.time() + 30
            while not metrics(port) and time.time() < end:
                time.sleep(0.2)
            return fn()
        finally:
            stop(agent, timeout=60)

    stats_path = "/proc/sys/kernel/bpf_stats_enabled"
    stats_was = open(stats_path).read().strip() if os.path.exists(stats_path) else None
    bpf = {}
    for r in range(a.rounds):
        calls["none"].append(one_call_round(work, "none", a.calls, port))
        if stats_was is not None:
            open(stats_path, "w").write("1")
        calls["argus"].append(with_agent(lambda: one_call_round(work, "argus", a.calls, port)))
        calls["argus_probes"].append(with_agent(lambda: one_call_round(work, "argus", a.calls, port, bpf), probes_only))
        if have_bpftrace:
            bpf["baseline"] = prog_stats()
            calls["bpftrace"].append(one_call_round(work, "bpftrace", a.calls, port, bpf))
        if stats_was is not None:
            open(stats_path, "w").write(stats_was)
        train["none"].append(train_round(work, a.steps))
        train["argus"].append(with_agent(lambda: train_round(work, a.steps)))
        train["argus_probes"].append(with_agent(lambda: train_round(work, a.steps), probes_only))
        print(f"round {r}: ns/call none {calls['none'][-1]:.0f} argus {calls['argus'][-1]:.0f} "
              f"probes alone {calls['argus_probes'][-1]:.0f}"
              + (f" bpftrace {calls['bpftrace'][-1]:.0f}" if have_bpftrace else "")
              + f"; steps/s none {train['none'][-1]:.1f} argus {train['argus'][-1]:.1f} "
              f"probes alone {train['argus_probes'][-1]:.1f}", flush=True)
    shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in calls.items() if v}
    tmed = {k: statistics.median(v) for k, v in train.items()}
    bmed = {k: statistics.median(v) for k, v in bpf.items() if k != "baseline" and v}
    result = {"calls": calls, "train_steps_per_second": train, "median_ns_per_call": med,
              "median_steps_per_second": tmed, "bpf_ns_per_run": {k: v for k, v in bpf.items() if k != "baseline"},
              "median_bpf_ns_per_run": bmed}
    json.dump(result, open(os.path.join(a.out, "c10d.json"), "w"), indent=1)
    line = (f"c10d probes: dist.all_reduce (one rank, Gloo) {med['none']:.0f} ns/call unprobed; "
            f"with argus x{med['argus'] / med['none']:.3f} (+{med['argus'] - med['none']:.0f} ns), "
            f"its probes alone x{med['argus_probes'] / med['none']:.3f} (+{med['argus_probes'] - med['none']:.0f} ns)")
    if "bpftrace" in med:
        line += f", with bpftrace's uprobe x{med['bpftrace'] / med['none']:.3f} (+{med['bpftrace'] - med['none']:.0f} ns)"
    if "argus" in bmed:
        line += f"; BPF per call: argus_c10d_coll_enter {bmed['argus']:.0f} ns"
        if "argus_wait" in bmed:
            line += f" (and its Work::wait's entry and return {bmed['argus_wait']:.0f} ns)"
        if "bpftrace" in bmed:
            line += f", bpftrace's count {bmed['bpftrace']:.0f} ns (x{bmed['argus'] / bmed['bpftrace']:.2f})"
    line += (f"; 2-rank DDP training loop {tmed['none']:.1f} steps/s, with argus x{tmed['argus'] / tmed['none']:.3f}, "
             f"its probes alone x{tmed['argus_probes'] / tmed['none']:.3f}")
    print(line)
    open(os.path.join(a.out, "c10d.txt"), "w").write(line + "\n")


if __name__ == "__main__":
    main()
