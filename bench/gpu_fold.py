#!/usr/bin/env python3
"""Part o of `make bench`: what folding GPU records in the producer saves the agent.

1. Runs build/bin/timeline_cost_bench (no root, no GPU) and reports, from that one
   run, the agent's timeline cost per kernel when every kernel crosses as a record
   against when the producer folds compute kernels (gpu/gpu_fold.h), the records
   that cross per kernel, and what folding costs the producer per kernel.
2. As root: the whole agent (BPF copy, ring buffer, decoding, timeline) watching a
   kernel-heavy argus-sim job, rounds alternating without and with --gpu-fold: the
   agent's CPU per 10^6 kernels received, and every kernel counted.

Usage: bench/gpu_fold.py OUT_DIR   (BUILD_DIR, default build; ARGUS_BENCH_REPS, default 3;
       ARGUS_BENCH_FOLD_ROUNDS, default 3 (0 skips part 2); ARGUS_BENCH_FOLD_KERNELS, default 2000
       kernels a step; ARGUS_BENCH_FOLD_STEPS, default 100; ARGUS_BENCH_FOLD_RANKS, default 2)
Writes OUT_DIR/timeline-cost.json, OUT_DIR/fold.txt. Exit 1 when the bench fails.
"""
import json
import os
import statistics
import subprocess
import sys
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


def end_to_end(build, out):
    """Part 2: lines for the summary, or [] when skipped; raises on failure."""
    rounds = int(os.environ.get("ARGUS_BENCH_FOLD_ROUNDS", "3"))
    if rounds <= 0:
        return []
    if os.geteuid() != 0:
        return ["  end to end: skipped (needs root)"]
    kernels = os.environ.get("ARGUS_BENCH_FOLD_KERNELS", "2000")
    steps = os.environ.get("ARGUS_BENCH_FOLD_STEPS", "100")
    ranks = os.environ.get("ARGUS_BENCH_FOLD_RANKS", "2")
    port = free_port()
    log = open(os.path.join(out, "agent.log"), "w")
    agent = subprocess.Popen([os.path.join(build, "bin", "argus-agent"), "--listen", "127.0.0.1:%d" % port,
                              "--log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
    res = {0: [], 1: [], 2: []}  # 0: every kernel sent, 1: folded, 2: no GPU records at all (the floor)
    try:
        for _ in range(150):
            if metrics(port):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("the agent did not start; see %s" % log.name)
        for rnd in range(rounds):
            for fold in (0, 1, 2):
                job = "fold-e2e-%d-%d-%d" % (os.getpid(), rnd, fold)
                args = [os.path.join(build, "bin", "argus-sim"), "--ranks", ranks, "--steps", steps, "--step-ms",
                        "20", "--kernels-per-step", kernels, "--init-ms", "300", "--job-id", job, "--quiet"]
                if fold == 1:
                    args.append("--gpu-fold")
                env = dict(os.environ, ARGUS_SIM_GPU_ACTIVITY="0" if fold == 2 else "1")
                c0, t0 = cpu_s(agent.pid), time.time()
                subprocess.run(args, check=True, capture_output=True, timeout=600, env=env)
                time.sleep(1.0)  # the agent drains every 50 ms; one scrape after, the same in every mode
                c1, t1 = cpu_s(agent.pid), time.time()
                got = msum(metrics(port), "argus_gpu_records_total", job_id=job, kind="kernel")
                res[fold].append((c1 - c0, got, t1 - t0))
                print("  round %d fold %d: agent %.2f s CPU for %d kernels in %.1f s" % (rnd, fold, c1 - c0, got,
                                                                                          t1 - t0), flush=True)
    finally:
        stop(agent)
        log.close()
    launched = max([n for _, n, _ in res[0] + res[1]] or [0])  # the same job launches the same kernels
    if not launched or any(n != launched for _, n, _ in res[0] + res[1]):
        raise RuntimeError("kernels counted differ between runs: %s" % res)
    per = {f: [1e6 * cpu / launched for cpu, _, _ in res[f]] for f in res}
    lines = ["  end to end (argus-agent watching argus-sim --ranks %s --kernels-per-step %s --step-ms 20: %d kernels "
             "a run, about %.0f/s per rank; %d rounds alternating), agent CPU per 10^6 kernels launched:"
             % (ranks, kernels, launched, launched / int(ranks) / statistics.median([w for _, _, w in res[0]]), rounds)]
    for f, what in ((0, "every kernel sent"), (1, "--gpu-fold"), (2, "no GPU records")):
        lines.append("    %-18s median %.3f s (%s)" % (what, statistics.median(per[f]),
                                                      ", ".join("%.3f" % v for v in per[f])))
    floor = statistics.median(per[2])
    sent, folded = statistics.median(per[0]) - floor, statistics.median(per[1]) - floor
    lines.append("    the GPU records' share (minus the floor): %.3f s sent one by one, %.3f s folded: x%.1f less"
                 % (sent, folded, sent / folded if folded > 0 else float("inf")))
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
