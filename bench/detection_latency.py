#!/usr/bin/env python3
"""Detection latency: time from fault injection (recorded by the simulator) to
the agent's metric flipping, over random ranks and factors.

  sudo bench/detection_latency.py [--runs 20] [--hang-runs 10] [--gpu-runs 10] [--sync-runs 10]
                                  [--ranks 8] [--nccl-mode async|blocking]

Straggler runs: `--straggler R:F@S` with R random, F in [1.5, 4]; latency = the
first moment /api/v1/ranks shows `straggler: true` for rank R minus the
injection time the slow rank wrote in its truth file. Any other rank flagged
during the run is a false positive. Hang runs: `--hang R:S`; latency until
`hang_missing` is true for R (and for no other rank). GPU runs: `--gpu-slow R:F@S`
(the GPU slow, the host on time); latency until R is flagged a straggler with
reason `gpu`. Sync runs: `--gpu-slow R:F@S --sync-before-coll` with the GPU
layer off (ARGUS_SIM_GPU_ACTIVITY=0): the rank's host waits for its slow GPU
before every collective; latency until R is flagged with reason `sync`.
The simulator runs with `--nccl-mode` (default async: real NCCL's semantics).
"""
import argparse, json, os, random, signal, statistics, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin")


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        body = r.read()
    return json.loads(body) if path.startswith("/api/") else body


def run_one(port, kind, rank, factor, step, ranks, step_ms, timeout_s, seed, mode="async"):
    job = f"lat-{kind}-{seed}"
    out = tempfile.mkdtemp(prefix="argus-lat-")
    args = [os.path.join(BIN, "argus-sim"), "--ranks", str(ranks), "--steps", "0", "--step-ms", str(step_ms),
            "--init-ms", "200", "--job-id", job, "--out", out, "--quiet", "--nccl-mode", mode]
    env = dict(os.environ)
    if kind == "straggler":
        args += ["--straggler", f"{rank}:{factor:.2f}@{step}"]
    elif kind in ("gpu_slow", "sync"):
        args += ["--gpu-slow", f"{rank}:{factor:.2f}@{step}"]
        if kind == "sync":
            args += ["--sync-before-coll"]
            env["ARGUS_SIM_GPU_ACTIVITY"] = "0"
    else:
        args += ["--hang", f"{rank}:{step}"]
    sim = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    field = "hang_missing" if kind == "hang" else "straggler"
    want_reason = {"gpu_slow": "gpu", "sync": "sync"}.get(kind)
    detected_at, others = None, set()
    deadline = time.time() + timeout_s
    try:
        while time.time() < deadline:
            doc = get(port, "/api/v1/ranks")
            flagged = {r["rank"] for r in doc["ranks"] if r.get("job_id") == job and r.get(field)
                       and (want_reason is None or r.get("straggler_reason") == want_reason)}
            others |= flagged - {rank}
            if rank in flagged:
                detected_at = time.time()
                break
            time.sleep(0.1)
    finally:
        sim.send_signal(signal.SIGTERM)
        try:
            sim.wait(timeout=20)
        except subprocess.TimeoutExpired:
            sim.kill()
    injected = None
    try:
        truth = json.load(open(os.path.join(out, f"rank-{rank}.json")))
        for f in truth.get("faults", []):
            if f.get("kind") == ("gpu_slow" if kind == "sync" else kind):
                injected = f["injected_at"]
    except (OSError, ValueError):
        pass
    latency = detected_at - injected if detected_at and injected else None
    return latency, sorted(others)


def summarize(name, results, target):
    lat = [r["latency"] for r in results if r["latency"] is not None]
    missed = sum(1 for r in results if r["latency"] is None)
    fps = sum(len(r["others"]) for r in results)
    line = f"{name}: {len(results)} runs, detected {len(lat)}, missed {missed}, other ranks flagged {fps}"
    if lat:
        line += f", median {statistics.median(lat):.1f} s, worst {max(lat):.1f} s (target {target})"
    print(line)
    return line


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--hang-runs", type=int, default=10)
    ap.add_argument("--gpu-runs", type=int, default=10)
    ap.add_argument("--sync-runs", type=int, default=10)
    ap.add_argument("--nccl-mode", choices=["async", "blocking"], default="async")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--step-ms", type=int, default=100)
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("--port", type=int, default=9762)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("detection_latency: needs root (the agent loads eBPF)")
    rng = random.Random(a.seed)
    agent = subprocess.Popen([os.path.join(BIN, "argus-agent"), "--listen", f"127.0.0.1:{a.port}",
                              "--window", str(a.window), "--log-level", "warn", "--exit-grace", "30"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                get(a.port, "/healthz")
                break
            except (OSError, ValueError):
                time.sleep(0.2)
        m = a.nccl_mode
        # (kind, runs, factor range or None, timeout s, seed tag). GPU factors from 2: below ~1.7
        # the emulated GPU (busy 60% of a step) still keeps up with the host. "sync": a slow GPU
        # the host waits for before each collective (loss.item()), no GPU layer.
        plan = [("straggler", a.runs, (1.5, 4.0), 40, ""), ("hang", a.hang_runs, None, 60, "h"),
                ("gpu_slow", a.gpu_runs, (2.0, 4.0), 40, "g"), ("sync", a.sync_runs, (2.0, 4.0), 40, "s")]
        results = {kind: [] for kind, *_ in plan}
        results["nccl_mode"] = m
        for kind, runs, factors, timeout_s, tag in plan:
            for i in range(runs):
                rank = rng.randrange(a.ranks)
                factor = rng.uniform(*factors) if factors else 1
                lat, others = run_one(a.port, kind, rank, factor, 30, a.ranks, a.step_ms, timeout_s,
                                      f"{a.seed}-{tag}{i}", m)
                run = {"rank": rank, "latency": lat, "others": others}
                if factors:
                    run["factor"] = factor
                results[kind].append(run)
                print(f"{kind} run {i}: rank {rank}{' x%.2f' % factor if factors else ''}: "
                      f"{'%.1f s' % lat if lat is not None else 'not detected'}{' others ' + str(others) if others else ''}",
                      flush=True)
        print(f"seed {a.seed}, {a.ranks} ranks, step {a.step_ms} ms, window {a.window} s, nccl-mode {m}")
        summarize("straggler", results["straggler"], "<= 10 s")
        summarize("hang", results["hang"], f"<= 2 windows = {2 * a.window:.0f} s")
        summarize("gpu_slow", results["gpu_slow"], "<= 10 s")
        summarize("sync", results["sync"], "<= 10 s")
        os.makedirs(os.path.join(ROOT, "build", "bench-results"), exist_ok=True)
        with open(os.path.join(ROOT, "build", "bench-results", f"detection-latency-{a.seed}.json"), "w") as f:
            json.dump(results, f, indent=1)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(timeout=60)
        except subprocess.TimeoutExpired:
            agent.kill()


if __name__ == "__main__":
    main()
