#!/usr/bin/env python3
"""Part o of `make bench`: what folding GPU records in the producer saves the agent.

1. Runs build/bin/timeline_cost_bench (no root, no GPU) and reports, from that one
   run, the agent's timeline cost per kernel when every kernel crosses as a record
   against when the producer folds compute kernels (gpu/gpu_fold.h), the records
   that cross per kernel, and what folding costs the producer per kernel.
2. As root: the whole agent (BPF copy, ring buffer, decoding, timeline) watching a
   kernel-heavy argus-sim job, rounds alternating every kernel sent, folded, folded
   with spans cut at each emulated buffer (as before spans went on across buffers)
   and no GPU records: the agent's CPU per 10^6 kernels received, every kernel counted.
3. Same agent, folded: its GPU cost per step at 200, 2 000 and 10 000 kernels a step
   of the sim's 4 kernel names, and at 2 000 a step of 150 names, each +-3% from
   launch to launch (--kernel-names, ARGUS_SIM_GPU_JITTER_PCT: a real step's shape).

Usage: bench/gpu_fold.py OUT_DIR   (BUILD_DIR, default build; ARGUS_BENCH_REPS, default 3;
       ARGUS_BENCH_FOLD_ROUNDS, default 3 (0 skips parts 2 and 3); ARGUS_BENCH_FOLD_KERNELS, default 2000
       kernels a step; ARGUS_BENCH_FOLD_STEPS, default 100; ARGUS_BENCH_FOLD_RANKS, default 2;
       ARGUS_BENCH_FOLD_STEP_KERNELS, default 200,10000: part 3's other step sizes;
       ARGUS_BENCH_FOLD_NAMES, default 150: part 3's many-name shape, 4 or less skips it)
Writes OUT_DIR/timeline-cost.json, OUT_DIR/fold.txt. Exit 1 when the bench fails.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, metrics, msum, stop  # noqa: E402


def cpu_s(pid):
    """CPU seconds of the process's live threads, from the scheduler (ns; clock ticks are too coarse)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total / 1e9


MODES = {0: "every kernel sent", 1: "--gpu-fold", 3: "--gpu-fold, cut per buffer", 2: "no GPU records"}


def run_job(build, agent, port, kernels, steps, ranks, mode, tag, names=4):
    """One sim job in `mode` (0 sent, 1 folded, 3 folded with spans cut at each
    emulated buffer, as before spans went on across buffers, 2 no GPU records):
    (agent CPU s, kernels the agent counted, wall s, (records, batches) that crossed
    argus:gpu_batch by the sim's own count)."""
    job = "fold-e2e-%d-%s-%d" % (os.getpid(), tag, mode)
    truth = tempfile.mkdtemp(prefix="fold-truth-")
    args = [os.path.join(build, "bin", "argus-sim"), "--ranks", ranks, "--steps", steps, "--step-ms",
            "20", "--kernels-per-step", str(kernels), "--init-ms", "300", "--job-id", job, "--quiet",
            "--out", truth, "--kernel-names", str(names)]
    if mode in (1, 3):
        args.append("--gpu-fold")
    env = dict(os.environ, ARGUS_SIM_GPU_ACTIVITY="0" if mode == 2 else "1",
               ARGUS_SIM_GPU_FOLD_PER_BUFFER="1" if mode == 3 else "0",
               ARGUS_SIM_GPU_JITTER_PCT="3" if names > 4 else "0")
    c0, t0 = cpu_s(agent.pid), time.time()
    subprocess.run(args, check=True, capture_output=True, timeout=600, env=env)
    time.sleep(1.0)  # the agent drains every 50 ms; one scrape after, the same in every mode
    c1, t1 = cpu_s(agent.pid), time.time()
    got = msum(metrics(port), "argus_gpu_records_total", job_id=job, kind="kernel")
    crossed = [0, 0]
    for r in range(int(ranks)):
        with open(os.path.join(truth, "rank-%d.json" % r)) as f:
            g = json.load(f).get("gpu", {})
        crossed[0] += g.get("records", 0)
        crossed[1] += g.get("batches", 0)
    shutil.rmtree(truth, ignore_errors=True)
    print("  %s mode %d (%s): agent %.3f s CPU for %d kernels in %.1f s; %d records in %d batches crossed"
          % (tag, mode, MODES[mode], c1 - c0, got, t1 - t0, crossed[0], crossed[1]), flush=True)
    return c1 - c0, got, t1 - t0, tuple(crossed)


def end_to_end(build, out):
    """Parts 2 and 3: lines for the summary, or [] when skipped; raises on failure."""
    rounds = int(os.environ.get("ARGUS_BENCH_FOLD_ROUNDS", "3"))
    if rounds <= 0:
        return []
    if os.geteuid() != 0:
        return ["  end to end: skipped (needs root)"]
    kernels = int(os.environ.get("ARGUS_BENCH_FOLD_KERNELS", "2000"))
    steps = os.environ.get("ARGUS_BENCH_FOLD_STEPS", "100")
    ranks = os.environ.get("ARGUS_BENCH_FOLD_RANKS", "2")
    per_step_kernels = [int(k) for k in os.environ.get("ARGUS_BENCH_FOLD_STEP_KERNELS", "200,10000").split(",") if k]
    names = int(os.environ.get("ARGUS_BENCH_FOLD_NAMES", "150"))
    shapes = [(k, 4) for k in per_step_kernels] + ([(kernels, names)] if names > 4 else [])
    port = free_port()
    log = open(os.path.join(out, "agent.log"), "w")
    agent = subprocess.Popen([os.path.join(build, "bin", "argus-agent"), "--listen", "127.0.0.1:%d" % port,
                              "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    res = {m: [] for m in MODES}
    by_k = {}  # kernels a step -> mode -> [(cpu, kernels, wall)], folded and the floor
    try:
        for _ in range(150):
            if metrics(port):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the agent did not start; see %s" % log.name)
        for rnd in range(rounds):
            for mode in (0, 1, 3, 2):
                res[mode].append(run_job(build, agent, port, kernels, steps, ranks, mode, "r%d" % rnd))
            for k, n in shapes:
                for mode in (1, 3, 2):
                    by_k.setdefault((k, n), {}).setdefault(mode, []).append(
                        run_job(build, agent, port, k, steps, ranks, mode, "r%dk%dn%d" % (rnd, k, n), n))
    finally:
        stop(agent)
        log.close()
    launched = max([r[1] for r in res[0] + res[1]] or [0])  # the same job launches the same kernels
    if not launched or any(r[1] != launched for r in res[0] + res[1] + res[3]):
        raise RuntimeError("kernels counted differ between runs: %s" % res)
    per = {f: [1e6 * r[0] / launched for r in res[f]] for f in res}
    lines = ["  end to end (argus-agent watching argus-sim --ranks %s --kernels-per-step %d --step-ms 20: %d kernels "
             "a run, about %.0f/s per rank; %d rounds alternating), agent CPU per 10^6 kernels launched:"
             % (ranks, kernels, launched, launched / int(ranks) / statistics.median([r[2] for r in res[0]]), rounds)]
    for f in (0, 1, 3, 2):
        lines.append("    %-28s median %.3f s (%s)" % (MODES[f], statistics.median(per[f]),
                                                      ", ".join("%.3f" % v for v in per[f])))
    sent, folded, cut = (statistics.median([a - b for a, b in zip(per[m], per[2])]) for m in (0, 1, 3))
    lines.append("    the GPU records' share (each run minus the round's run without GPU records, median): %.1f ns/kernel sent one by one, %.1f folded "
                 "(x%.1f less), %.1f folded with spans cut per buffer"
                 % (sent * 1e3, folded * 1e3, sent / folded if folded > 0 else float("inf"), cut * 1e3))
    # Part 3: the agent's GPU cost per step as the kernels per step grow (folded).
    nsteps = int(steps) * int(ranks)
    by_k.setdefault((kernels, 4), {1: res[1], 3: res[3], 2: res[2]})
    lines.append("  per step, folded (%d steps a run; records and batches crossing by the sim's count, the same "
                 "every round; agent CPU: the GPU records' share, each run minus its round's run without GPU records, "
                 "median):" % nsteps)
    for k, n in sorted(by_k, key=lambda kn: (kn[1], kn[0])):
        runs = by_k[(k, n)]
        # Paired by round (the runs of a round are back to back): the median of
        # (mode - no GPU records), steadier than a difference of medians here.
        f, c = (statistics.median([a[0] - b[0] for a, b in zip(runs[m], runs[2])]) for m in (1, 3))
        z = statistics.median([r[0] for r in runs[2]])
        counted = statistics.median([r[1] for r in runs[1]])
        rec = {m: statistics.median([r[3][0] for r in runs[m]]) for m in (1, 3)}
        bat = {m: statistics.median([r[3][1] for r in runs[m]]) for m in (1, 3)}
        lines.append("    %6d kernels/step of %3d names%s: %.1f records in %.2f batches a step (cut per buffer: %.1f "
                     "in %.2f); agent %.1f us/step (cut per buffer %.1f), floor %.1f us/step; %d kernels counted"
                     % (k, n, " +-3%" if n > 4 else "", rec[1] / nsteps, bat[1] / nsteps, rec[3] / nsteps,
                        bat[3] / nsteps,
                        1e6 * f / nsteps, 1e6 * c / nsteps, 1e6 * z / nsteps, counted))
    return lines


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    build = os.environ.get("BUILD_DIR", "build")
    reps = os.environ.get("ARGUS_BENCH_REPS", "3")
    exe = os.path.join(build, "bin", "timeline_cost_bench")
    if not os.access(exe, os.X_OK):
        print("gpu_fold: %s not built; run 'make build' first" % exe, file=sys.stderr)
        return 1
    js = os.path.join(out, "timeline-cost.json")
    r = subprocess.run([exe, "--benchmark_repetitions=" + reps, "--benchmark_out=" + js,
                        "--benchmark_out_format=json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900)
    with open(os.path.join(out, "timeline-cost.txt"), "w") as f:
        f.write(r.stdout)
    if r.returncode != 0:
        print("gpu_fold: timeline_cost_bench failed (status %d)" % r.returncode, file=sys.stderr)
        return 1
    runs = {}
    for b in json.load(open(js))["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        runs.setdefault(b["run_name"], []).append(b)

    def med(name, key):
        vals = [b[key] for b in runs.get(name, []) if key in b]
        if not vals:
            return float("nan")
        # Inverted rates (ns_per_*) are written in seconds per item.
        return statistics.median(vals) * (1e9 if key.startswith("ns_per_") else 1)

    lines = ["o. GPU records folded by the producer (bench/timeline_cost_bench, %s repetitions, medians)" % reps]
    def name(kernels, shaped, fold):
        return "BM_TimelineAddFolded/kernels:%d/shaped:%d/fold:%d/iterations:300" % (kernels, shaped, fold)

    for kernels in (200, 2000):
        for shaped, what in ((0, "harsh durations"), (1, "shaped names, +-3%")):
            folded = med(name(kernels, shaped, 1), "ns_per_kernel")
            direct = med(name(kernels, shaped, 0), "ns_per_kernel")
            lines.append("  %5d kernels/step, %-18s: agent %.1f ns/kernel folded vs %.1f sent one by one "
                         "(x%.1f less); records crossing per kernel %.3f; sketch %d B/step"
                         % (kernels, what, folded, direct, direct / folded if folded else float("nan"),
                            med(name(kernels, shaped, 1), "records_per_kernel"),
                            med(name(kernels, shaped, 1), "sketch_bytes_per_step")))
    fold = med("BM_FoldKernels", "ns_per_kernel")
    lines.append("  producer: folding costs %.1f ns per kernel (CUPTI's buffer thread)" % fold)
    for rate in (1e4, 1e5):
        lines.append("  at %.0e kernels/s per rank (2000-kernel shaped steps): agent timeline %.2f%% of a core folded, "
                     "%.2f%% unfolded; producer +%.2f%%"
                     % (rate, rate * med(name(2000, 1, 1), "ns_per_kernel") / 1e7,
                        rate * med(name(2000, 1, 0), "ns_per_kernel") / 1e7, rate * fold / 1e7))
    try:
        lines += end_to_end(build, out)
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        print("gpu_fold: end to end failed: %s" % e, file=sys.stderr)
        return 1
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "fold.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
