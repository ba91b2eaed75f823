#!/usr/bin/env python3
"""Stragglers and hangs over the layouts people train (make bench, part p).

  sudo bench/layout_detection.py OUT_DIR [--runs 50] [--fp-seconds 600] [--seed N]
      [--layouts L,..] [--kinds host,gpu_sync,hang,none] [--modes async,blocking]
      [--gpu-layer random|on|off] [--fp-layouts L,..]

Randomized runs: each picks a layout (DP 8; TP 2 x DP 4; PP 2 x DP 4 with 4
micro-batches; TP 2 x PP 2 x DP 2 with 2; EP 4 x DP 8 with MoE all-to-alls), an
NCCL mode, a jitter of 0-20%, and a fault (a slow host, a slow GPU behind a
loss.item(), with the GPU layer in half of them, a hang, or none), on a random rank, as the simulator injects it
and records it in its truth file. One agent watches every run. Per run: the
latency from the injection the rank recorded to the first moment
/api/v1/ranks names it (straggler flag, or hang_missing), whether anyone else
was named, and the reason. Then the false-positive runs: for each of --fp-layouts
(every layout above unless told), a healthy job with
30% jitter, an evaluation pause every 100 steps and a 4-s checkpoint on rank 0
every 150 steps, for --fp-seconds: every straggler or hang event of it is a
false positive.

Prints: detection latency P50/P90, precision (named runs whose named ranks
were all the injected one), recall (faulty runs whose rank was named in time),
reason accuracy (named stragglers with a reason of the fault's kind), and the
false positives; writes OUT_DIR/layouts.json.
"""
import argparse, json, os, random, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import stop  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(os.environ.get("BUILD_DIR", os.path.join(ROOT, "build")), "bin")

LAYOUTS = {
    "dp8": [],
    "tp2_dp4": ["--tp", "2"],
    "pp2_dp4_accum4": ["--pp", "2", "--accum", "4"],
    "tp2_pp2_dp2_accum2": ["--tp", "2", "--pp", "2", "--accum", "2"],
    "ep4_dp8": ["--ep", "4"],
}
FAULTS = {  # kind -> (sim args with R for the rank, truth fault kind, field, right reasons)
    "host": (["--straggler", "R:{f:.2f}@{s}"], "straggler", "straggler", {"host", "compute"}),
    "gpu_sync": (["--gpu-slow", "R:{f:.2f}@{s}", "--sync-before-coll"], "gpu_slow", "straggler", {"gpu", "sync"}),
    "hang": (["--hang", "R:{s}"], "hang", "hang_missing", None),
    "none": ([], None, "straggler", None),
}


def get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def percentile(v, p):
    v = sorted(v)
    if not v:
        return None
    k = (len(v) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def pick(rng, choices, only):
    """A random choice, among `only` where given (a rerun of one kind of case)."""
    return rng.choice([c for c in choices if c in only] if only else choices)


def run_one(port, i, rng, step_ms, timeout_s, only):
    layout = pick(rng, sorted(LAYOUTS), only["layouts"])
    kind = pick(rng, ["host", "host", "gpu_sync", "hang", "none"], only["kinds"])
    mode = pick(rng, ["async", "async", "blocking"], only["modes"])
    jitter = rng.choice([0, 5, 10, 20])
    rank = rng.randrange(8)
    factor = rng.uniform(1.6, 3.0) if kind == "host" else rng.uniform(2.0, 3.0)
    onset = 30
    job = f"lay-{i}-{layout}-{kind}-{rank}"
    out = tempfile.mkdtemp(prefix="argus-layout-")
    args, truth_kind, field, reasons = FAULTS[kind]
    argv = [os.path.join(BIN, "argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", str(step_ms), "--init-ms",
            "200", "--job-id", job, "--out", out, "--quiet", "--nccl-mode", mode, "--jitter", str(jitter)]
    argv += LAYOUTS[layout]
    argv += [a.replace("R:", f"{rank}:").format(f=factor, s=onset) for a in args]
    gpu_layer = kind == "gpu_sync" and rng.random() < 0.5
    if kind == "gpu_sync" and only["gpu_layer"] != "random":
        gpu_layer = only["gpu_layer"] == "on"
    env = dict(os.environ, ARGUS_SIM_GPU_ACTIVITY="1" if gpu_layer else "0")
    sim = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    detected_at, named, reason = None, set(), None
    deadline = time.time() + (timeout_s if kind != "none" else 30)
    try:
        while time.time() < deadline:
            doc = get(port, "/api/v1/ranks")
            now = {r["rank"] for r in doc["ranks"] if r.get("job_id") == job and r.get(field)}
            named |= now
            if kind != "none" and rank in now and detected_at is None:
                detected_at = time.time()
                reason = next((r.get("straggler_reason") for r in doc["ranks"]
                               if r.get("job_id") == job and r.get("rank") == rank), None)
                deadline = min(deadline, time.time() + 3)  # a few seconds more: anyone else named?
            time.sleep(0.1)
    finally:
        stop(sim, timeout=20)
    injected = None
    if truth_kind:
        try:
            truth = json.load(open(os.path.join(out, f"rank-{rank}.json")))
            injected = next((f["injected_at"] for f in truth.get("faults", []) if f.get("kind") == truth_kind), None)
        except (OSError, ValueError):
            pass
    latency = detected_at - injected if detected_at and injected else None
    return {"layout": layout, "kind": kind, "mode": mode, "jitter": jitter, "rank": rank, "factor": round(factor, 2),
            "gpu_layer": gpu_layer, "latency": latency, "named": sorted(named), "reason": reason,
            "right_reason": (reason in reasons) if reasons and reason else None}


def false_positive_run(port, seconds, step_ms, layout):
    job = f"fp-{layout}"
    start = time.time()
    sim = subprocess.Popen([os.path.join(BIN, "argus-sim"), "--ranks", "8", "--steps", "0", "--step-ms", str(step_ms),
                            "--init-ms", "200", "--job-id", job, "--quiet", *LAYOUTS[layout],
                            "--jitter", "30", "--eval-every", "100:1500", "--checkpoint", "0:150:4000"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(seconds)
        events = get(port, f"/api/v1/events?since={start}")["events"]
    finally:
        stop(sim, timeout=20)
    bad = [e for e in events if e["kind"] in ("straggler", "hang") and e.get("job_id") == job]
    return {"layout": layout, "seconds": seconds, "false_positives": len(bad), "events": [e["summary"] for e in bad]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--runs", type=int, default=int(os.environ.get("ARGUS_BENCH_LAYOUT_RUNS", 50)))
    ap.add_argument("--fp-seconds", type=int, default=int(os.environ.get("ARGUS_BENCH_LAYOUT_FP_SECONDS", 600)))
    ap.add_argument("--step-ms", type=int, default=60)
    ap.add_argument("--timeout", type=int, default=45)
    ap.add_argument("--port", type=int, default=9763)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--layouts", default="", help="comma list: draw only these layouts")
    ap.add_argument("--kinds", default="", help="comma list of faults to draw: host, gpu_sync, hang, none")
    ap.add_argument("--modes", default="", help="comma list of NCCL modes to draw: async, blocking")
    ap.add_argument("--gpu-layer", choices=["random", "on", "off"], default="random",
                    help="the GPU layer of the slow-GPU runs (random: on in half of them)")
    ap.add_argument("--fp-layouts", default=os.environ.get("ARGUS_BENCH_LAYOUT_FP_LAYOUTS", ",".join(sorted(LAYOUTS))),
                    help="comma list: a false-positive run of --fp-seconds for each")
    a = ap.parse_args()
    only = {k: [x for x in getattr(a, k).split(",") if x] for k in ("layouts", "kinds", "modes")}
    only["gpu_layer"] = a.gpu_layer
    if os.geteuid() != 0:
        sys.exit("layout_detection: needs root (the agent loads eBPF)")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    agent = subprocess.Popen([os.path.join(BIN, "argus-agent"), "--listen", f"127.0.0.1:{a.port}", "--window", "5",
                              "--log-level", "warn", "--exit-grace", "10"],
                             stdout=open(os.path.join(a.out, "agent.log"), "w"), stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                get(a.port, "/api/v1/ranks")
                break
            except (OSError, ValueError):
                time.sleep(0.2)
        runs = []
        for i in range(a.runs):
            r = run_one(a.port, i, rng, a.step_ms, a.timeout, only)
            runs.append(r)
            print(f"run {i}: {r['layout']} {r['mode']} jitter {r['jitter']}% {r['kind']}{' (GPU layer)' if r['gpu_layer'] else ''} rank {r['rank']}: "
                  f"{'%.1f s' % r['latency'] if r['latency'] is not None else '-'} named {r['named']} "
                  f"reason {r['reason']}", flush=True)
        fp = [false_positive_run(a.port, a.fp_seconds, a.step_ms, l) for l in a.fp_layouts.split(",") if l] \
            if a.fp_seconds > 0 else []
        for f in fp:
            print(f"false-positive run {f['layout']} {f['seconds']} s: {f['false_positives']} events", flush=True)
    finally:
        stop(agent, timeout=60)
    faulty = [r for r in runs if r["kind"] != "none"]
    lat = [r["latency"] for r in faulty if r["latency"] is not None]
    named_runs = [r for r in runs if r["named"]]
    correct = [r for r in named_runs if r["kind"] != "none" and r["named"] == [r["rank"]]]
    stragglers = [r for r in faulty if r["kind"] in ("host", "gpu_sync") and r["latency"] is not None]
    summary = {
        "seed": a.seed, "runs": len(runs), "step_ms": a.step_ms,
        "latency_p50_s": percentile(lat, 0.5), "latency_p90_s": percentile(lat, 0.9),
        "precision": len(correct) / len(named_runs) if named_runs else None,
        "recall": len(lat) / len(faulty) if faulty else None,
        "reason_accuracy": (sum(1 for r in stragglers if r["right_reason"]) / len(stragglers)) if stragglers else None,
        "healthy_runs_named": sum(1 for r in runs if r["kind"] == "none" and r["named"]),
        "false_positive_runs": fp,
    }
    json.dump({"summary": summary, "runs": runs}, open(os.path.join(a.out, "layouts.json"), "w"), indent=1)
    fmt = lambda x, f="%.2f": (f % x) if x is not None else "n/a"
    line = (f"layouts: {len(runs)} runs (seed {a.seed}, step {a.step_ms} ms): latency P50 {fmt(summary['latency_p50_s'], '%.1f')} s, "
            f"P90 {fmt(summary['latency_p90_s'], '%.1f')} s; precision {fmt(summary['precision'])}, recall {fmt(summary['recall'])}, "
            f"reason accuracy {fmt(summary['reason_accuracy'])}; healthy runs with a rank named: {summary['healthy_runs_named']}")
    for f in fp:
        line += f"; false-positive run {f['layout']} {f['seconds']} s with 30% jitter: {f['false_positives']} events"
    print(line)
    open(os.path.join(a.out, "layouts.txt"), "w").write(line + "\n")


if __name__ == "__main__":
    main()
