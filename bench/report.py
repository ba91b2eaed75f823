#!/usr/bin/env python3
"""Summary of one bench/run.sh run: reads the raw files it left in WORK_DIR and
prints the ratios (and writes WORK_DIR/results.json). Every ratio is between two
measurements of the same run; raw nanoseconds are secondary. One file (~680
lines): each part's reader is small, and the summary reads them all in one order.

  report.py WORK_DIR         bench/run.sh's summary (with WORK_DIR/gpu, if there, appended)
  report.py --gpu GPU_DIR    only the GPU layer's figures (bench/gpu_handoff.sh's OUT_DIR)"""
import glob
import json
import os
import re
import sys

# Probe hits per call, per the agent's attach plan (userspace/attach/attach_plan.cpp):
# an entry uprobe is one trap; a uretprobe is a trap at entry plus one at return;
# an entry uprobe and a uretprobe on one function share the entry trap.
NCCL_COLL_HITS = 2  # entry + return
GROUP_HITS = 1      # ncclGroupStart, ncclGroupEnd: an entry probe each
INIT_HITS = 2
SYNC_HITS = 2
CHECKED_HITS = 2    # uretprobe only: entry trap + return
LAUNCH_HITS = 2     # deep: entry + return
CUDA_SYNC = {"cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuEventSynchronize", "cuCtxSynchronize",
             "cuCtxSynchronize_v2"}
CUDA_CHECKED = {"cuInit", "cuCtxCreate", "cuCtxCreate_v2", "cuCtxCreate_v3", "cuCtxCreate_v4", "cuMemAlloc",
                "cuMemAlloc_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz", "cuMemAllocFromPoolAsync",
                "cuMemAllocFromPoolAsync_ptsz", "cuMemAllocManaged", "cuMemAllocHost", "cuMemAllocHost_v2",
                "cuMemAllocPitch_v2"}
CUDA_LAUNCH = {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
               "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz"}

BENCHES = [  # (benchmark, label, calls per iteration, probe hits per call: default, deep)
    ("BM_NoopCall", "plain call (fn pointer)", 1, 0, 0),
    ("BM_SyscallGetppid", "getppid syscall", 1, 0, 0),
    ("BM_NcclGetVersion", "ncclGetVersion (never probed)", 1, 0, 0),
    ("BM_NcclAllReduce1Rank", "ncclAllReduce 1-rank", 1, NCCL_COLL_HITS, NCCL_COLL_HITS),
    ("BM_NcclGroupStartEnd", "ncclGroupStart + ncclGroupEnd", 2, GROUP_HITS, GROUP_HITS),
    ("BM_CuStreamSynchronize", "cuStreamSynchronize", 1, SYNC_HITS, SYNC_HITS),
    ("BM_CuLaunchKernel", "cuLaunchKernel (deep only)", 1, 0, LAUNCH_HITS),
]
# The runs of part a: unprobed, the LD_PRELOAD interposer, the agent's two probe
# sets, bpftrace (entry + return on every timed call).
PROBE_RUNS = ("unprobed", "interpose", "argus", "argus_deep", "bpftrace", "bpftrace_timed")


def load_json(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


# Which programs run on one call of each timed function: Argus's (run, entry,
# return; argus_timed_exit is shared by collectives and synchronizes, so its
# figure is their average) and bpftrace's (named after the symbol, cut to 15).
BPF_PAIRS = [
    ("ncclAllReduce", "argus", ("argus_nccl_coll_enter", "argus_timed_exit"), "ncclAllReduce"),
    ("cuStreamSynchronize", "argus", ("argus_cuda_sync_enter", "argus_timed_exit"), "cuStreamSynchronize"),
    ("cuLaunchKernel (deep)", "argus_deep", ("argus_cuda_count", "argus_cuda_launch_exit"), "cuLaunchKernel"),
]


def prog_ns_per_run(work, run):
    """name -> [ns per run of each loaded program of that name] from bpftool's JSON of a part-a run."""
    out = {}
    for prog in load_json(os.path.join(work, "progs-%s.json" % run), []) or []:
        cnt, t = prog.get("run_cnt", 0), prog.get("run_time_ns", 0)
        if cnt > 1000:
            out.setdefault(prog.get("name", ""), []).append(t / cnt)
    return out


def bpf_pair_rows(work):
    """Per timed call: Argus's, bpftrace's (counting) and bpftrace's (timing) BPF ns per call (entry +
    return), None where not measured. bpftrace names a program after its probe's first symbol."""
    rows = []
    for label, run, names, symbol in BPF_PAIRS:
        mine = prog_ns_per_run(work, run)
        argus = sum(mine[n][0] for n in names) if all(n in mine for n in names) else None
        peers = []
        for bt_run in ("bpftrace", "bpftrace_timed"):
            progs = prog_ns_per_run(work, bt_run)
            theirs = [v for name, vs in progs.items() if name and symbol.startswith(name) for v in vs]
            peers.append(sum(theirs) if len(theirs) == 2 else None)
        rows.append((label, argus, *peers))
    return rows


def read_facts(work):
    facts = {}
    try:
        with open(os.path.join(work, "facts.txt")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                facts[k] = v
    except OSError:
        pass
    return facts


def bench_times(path):
    """benchmark -> (cpu ns per call, real ns per call), medians when repeated."""
    doc = load_json(path)
    if not doc:
        return None
    per = {name: calls for name, _, calls, _, _ in BENCHES}
    out, plain = {}, {}
    for b in doc.get("benchmarks", []):
        name = b.get("run_name", b.get("name", ""))
        if name not in per or b.get("error_occurred"):
            continue
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        t = (b["cpu_time"] * scale / per[name], b["real_time"] * scale / per[name])
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                out[name] = t
        else:
            plain.setdefault(name, []).append(t)
    for name, ts in plain.items():
        if name not in out:
            ts.sort()
            out[name] = ts[len(ts) // 2]
    return out


def metrics(path):
    """[(name, {labels}, value)] from Prometheus text."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)', line)
                if not m:
                    continue
                labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
                try:
                    rows.append((m.group(1), labels, float(m.group(4))))
                except ValueError:
                    pass
    except OSError:
        pass
    return rows


def msum(rows, name, **match):
    return sum(v for n, l, v in rows if n == name and all(l.get(k) == want for k, want in match.items()))


def rank_totals(path, job):
    """Sums over the job's ranks in an /api/v1/ranks document."""
    doc = load_json(path, {}) or {}
    t = {"ranks": 0, "coll": 0, "sync": 0, "launches": 0, "launches_known": False, "pids": []}
    for r in doc.get("ranks", []):
        if r.get("job_id") != job:
            continue
        t["ranks"] += 1
        t["pids"].append(r.get("pid"))
        t["coll"] += sum(op.get("calls", 0) for op in (r.get("nccl") or {}).values())
        cuda = r.get("cuda") or {}
        t["sync"] += sum(s.get("calls", 0) for s in (cuda.get("sync") or {}).values())
        if cuda.get("kernel_launches") is not None:
            t["launches"] += cuda["kernel_launches"]
            t["launches_known"] = True
    t["tracked_processes"] = doc.get("tracked_processes")
    return t


def truth_totals(work, probes):
    files = sorted(glob.glob(os.path.join(work, "sim-" + probes, "rank-*.json")))
    if not files:
        return None
    t = {"ranks": 0, "coll": 0, "group": 0, "init": 0, "sync": 0, "checked": 0, "launches": 0, "steps": 0,
         "status": {}}
    for path in files:
        r = load_json(path, {}) or {}
        t["ranks"] += 1
        t["steps"] += r.get("steps_completed", 0)
        t["status"][r.get("status", "?")] = t["status"].get(r.get("status", "?"), 0) + 1
        t["coll"] += sum(op.get("calls", 0) for op in (r.get("nccl") or {}).values())
        group = r.get("nccl_group")
        if isinstance(group, dict):
            t["group"] += group.get("start", 0) + group.get("end", 0)
        else:
            t["group"] += r.get("group_start", 0) + r.get("group_end", 0)
        t["init"] += r.get("nccl_init", 0)
        cuda = r.get("cuda") if isinstance(r.get("cuda"), dict) else r
        calls = cuda.get("calls") or r.get("cuda_calls") or {}
        if calls:
            t["sync"] += sum(v for k, v in calls.items() if k in CUDA_SYNC)
            t["checked"] += sum(v for k, v in calls.items() if k in CUDA_CHECKED)
            t["launches"] += sum(v for k, v in calls.items() if k in CUDA_LAUNCH)
        else:
            t["sync"] += sum((cuda.get("sync") or {}).values())
            t["launches"] += cuda.get("kernel_launches", 0)
    return t


def probe_hits(t, probes):
    hits = (t["coll"] * NCCL_COLL_HITS + t["group"] * GROUP_HITS + t["init"] * INIT_HITS + t["sync"] * SYNC_HITS
            + t["checked"] * CHECKED_HITS)
    if probes == "deep":
        hits += t["launches"] * LAUNCH_HITS
    return hits


def fmt(v, spec=".1f", none="n/a"):
    return none if v is None else format(v, spec)


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


# ---- GPU layer (bench/gpu_handoff.sh) ----
GPU_BATCH = 256  # records per argus:gpu_batch fire (ARGUS_GPU_BATCH_MAX)


def read_kv(path):
    kv = {}
    try:
        with open(path) as f:
            for line in f:
                k, sep, v = line.rstrip("\n").partition("=")
                if sep:
                    kv[k] = v
    except OSError:
        pass
    return kv


def median(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def gpu_section(gdir):
    """Lines and a results dict for the GPU layer's figures in gdir (gpu_handoff.sh's OUT_DIR)."""
    facts = read_facts(gdir)
    res = {"facts": facts, "runs": {}}
    out = []
    p = out.append
    if not facts:
        return out, None
    runs = {}
    for phase in ("unprobed", "attached", "after"):
        rows = []
        for path in sorted(glob.glob(os.path.join(gdir, "fire-%s-*.txt" % phase))):
            kv = read_kv(path)
            try:
                batches = int(kv["batches_requested"]) + 1  # + the warm-up batch each run fires first
                cpu_s = float(kv["process_user_s"]) + float(kv["process_sys_s"])
                rows.append({"ns_per_batch": float(kv["ns_per_batch"]), "ns_per_record": float(kv["ns_per_record"]),
                             "records_fired": int(kv["records_fired"]), "exit_code": int(kv.get("exit_code", -1)),
                             "cpu_ns_per_batch": cpu_s * 1e9 / batches,
                             "sys_share": float(kv["process_sys_s"]) / cpu_s if cpu_s else None})
            except (KeyError, ValueError):
                rows.append({"error": path})
        runs[phase] = rows
    res["runs"] = runs

    def med(phase, key):
        return median([r.get(key) for r in runs.get(phase, []) if key in r])

    un, at, af = med("unprobed", "ns_per_batch"), med("attached", "ns_per_batch"), med("after", "ns_per_batch")
    unc, atc, afc = (med("unprobed", "cpu_ns_per_batch"), med("attached", "cpu_ns_per_batch"),
                     med("after", "cpu_ns_per_batch"))
    p("")
    p("== GPU layer, %s: kernel %s, %s CPUs, load avg %s -> %s ==" % (
        facts.get("date", "?"), facts.get("kernel", "?"), facts.get("cpus", "?"), facts.get("loadavg_start", "?"),
        facts.get("loadavg_end", "?")))
    p("results: %s" % gdir)
    if facts.get("other_tracers_gpu_start") or facts.get("other_tracers_gpu_end"):
        p("WARNING: other argus-agent/bpftrace processes ran (pids %s %s): they may have probed the library copy" % (
            facts.get("other_tracers_gpu_start", ""), facts.get("other_tracers_gpu_end", "")))
    p("")
    p("1. libargus-cupti.so hand-off: %s runs x %s batches of %d records each phase (median of runs)" % (
        facts.get("reps", "?"), facts.get("batches_per_run", "?"), GPU_BATCH))
    def fastest(phase, key):
        v = [r.get(key) for r in runs.get(phase, []) if key in r]
        return min(v) if v else None

    p("%-30s %13s %13s %26s %17s" % ("phase", "ns per batch", "fastest run", "all runs (ns per batch)",
                                      "process CPU/batch"))
    for phase, label in (("unprobed", "no agent"), ("attached", "argus-agent attached"),
                         ("after", "no agent again (drift)")):
        nb, cb = med(phase, "ns_per_batch"), med(phase, "cpu_ns_per_batch")
        allr = " ".join("%.0f" % r["ns_per_batch"] for r in runs.get(phase, []) if "ns_per_batch" in r)
        p("%-30s %13s %13s %26s %17s" % (label, fmt(nb, ".0f"), fmt(fastest(phase, "ns_per_batch"), ".0f"), allr,
                                         fmt(cb, ".0f")))
    p("  (ns per batch: the bench's own timing of its firing loop, median of the runs; process CPU/batch: the "
      "whole process's user+sys CPU / batches, start-up included)")
    fu, fa, ff = fastest("unprobed", "ns_per_batch"), fastest("attached", "ns_per_batch"), fastest(
        "after", "ns_per_batch")
    hand = {
        "unprobed_ns_per_batch": un, "attached_ns_per_batch": at, "after_ns_per_batch": af,
        "unprobed_cpu_ns_per_batch": unc, "attached_cpu_ns_per_batch": atc, "after_cpu_ns_per_batch": afc,
        "attached_x_unprobed": ratio(at, un), "attached_x_after": ratio(at, af), "after_x_unprobed": ratio(af, un),
        "handoff_delta_ns_per_batch": (at - un) if at is not None and un is not None else None,
        "handoff_delta_cpu_ns_per_batch": (atc - unc) if atc is not None and unc is not None else None,
        "fastest_unprobed_ns_per_batch": fu, "fastest_attached_ns_per_batch": fa, "fastest_after_ns_per_batch": ff,
        "fastest_attached_x_unprobed": ratio(fa, min(x for x in (fu, ff) if x is not None) if (fu or ff) else None),
        "fastest_handoff_delta_ns_per_batch": (fa - min(x for x in (fu, ff) if x is not None))
        if fa is not None and (fu or ff) else None,
        "unprobed_ms_per_1e5_records": un * 1e5 / GPU_BATCH / 1e6 if un else None,
        "attached_ms_per_1e5_records": at * 1e5 / GPU_BATCH / 1e6 if at else None,
    }
    res["handoff"] = hand
    p("  attached / no agent: %s (wall), %s (CPU); no agent again / no agent: %s" % (
        fmt(hand["attached_x_unprobed"], ".2f"), fmt(ratio(atc, unc), ".2f"), fmt(hand["after_x_unprobed"], ".2f")))
    p("  fastest runs (least disturbed by the machine's other load): attached / no agent (fastest of before and "
      "after) %s, hand-off %s ns per batch" % (fmt(hand["fastest_attached_x_unprobed"], ".2f"),
                                               fmt(hand["fastest_handoff_delta_ns_per_batch"], ".0f")))
    p("  hand-off to the agent (attached - no agent, medians): %s ns per batch (%s ns of CPU), %s ns per record" % (
        fmt(hand["handoff_delta_ns_per_batch"], ".0f"), fmt(hand["handoff_delta_cpu_ns_per_batch"], ".0f"),
        fmt(hand["handoff_delta_ns_per_batch"] / GPU_BATCH if hand["handoff_delta_ns_per_batch"] is not None else None,
            ".1f")))
    p("  per 10^5 records: %s ms with no agent, %s ms attached (the thread that completes CUPTI buffers)" % (
        fmt(hand["unprobed_ms_per_1e5_records"], ".2f"), fmt(hand["attached_ms_per_1e5_records"], ".2f")))

    gb = load_json(os.path.join(gdir, "gbench.json"), {}) or {}
    gres = {}
    for b in gb.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        gres[b.get("name")] = {"cpu_ns": b["cpu_time"] * scale, "real_ns": b["real_time"] * scale}
    res["gbench"] = gres
    if gres:
        def g(name):
            return gres.get(name, {}).get("cpu_ns")
        p("  no agent, Google Benchmark (CPU): convert only %s ms per 10^5 records; the library's buffer path "
          "(convert + USDT sites) %s ms per 10^5 records, %s µs per batch of 256; an unattached USDT site %s ns "
          "(an empty asm with the same arguments %s ns)" % (
              fmt(g("BM_ConvertBatch/100000") and g("BM_ConvertBatch/100000") / 1e6, ".2f"),
              fmt(g("BM_SoProcessBuffer/100000") and g("BM_SoProcessBuffer/100000") / 1e6, ".2f"),
              fmt(g("BM_SoProcessBuffer/256") and g("BM_SoProcessBuffer/256") / 1e3, ".1f"),
              fmt(g("BM_UsdtFireBatch"), ".2f"), fmt(g("BM_NoopBatch"), ".2f")))

    m1 = metrics(os.path.join(gdir, "attached-t1.metrics"))
    job = facts.get("job", "")
    fired = int(facts.get("records_fired_attached", "0") or 0)
    recv = msum(m1, "argus_gpu_records_total", job_id=job)
    kinds = {l.get("kind"): v for n, l, v in m1 if n == "argus_gpu_records_total" and l.get("job_id") == job}
    lost_ev = msum(m1, "argus_agent_events_lost_total", source="gpu")
    lost_rec = msum(m1, "argus_gpu_records_lost_total", job_id=job)
    bpf_gpu = {l.get("error"): v for n, l, v in m1 if n == "argus_agent_bpf_errors_total"
               and "gpu" in l.get("error", "") and v}
    batches = sum(int(facts.get("batches_per_run", "0") or 0) + 1 for r in runs.get("attached", []) if "error" not in r)
    ticks = int(facts.get("agent_cpu_ticks_attached", "0") or 0)
    tck = int(facts.get("clk_tck", "100") or 100)
    agent_us = ticks / tck * 1e6 / batches if batches else None
    res["agent"] = {"records_fired": fired, "records_received": recv, "received_by_kind": kinds,
                    "events_lost_gpu": lost_ev, "records_lost": lost_rec, "bpf_gpu_errors": bpf_gpu,
                    "agent_cpu_us_per_batch": agent_us, "batches": batches,
                    "fire_phase_wall_s": facts.get("fire_phase_wall_s"),
                    "attached_phase_wall_s": facts.get("attached_phase_wall_s"),
                    "attach_after_s": facts.get("attach_after_s"),
                    "gpu_probes_attached": facts.get("agent_gpu_probes_attached")}
    p("  agent: %d records fired, %d received (%s); events lost (source gpu) %d; records lost %d; "
      "BPF gpu errors %s" % (fired, recv, ", ".join("%s %d" % (k, v) for k, v in sorted(kinds.items())), lost_ev,
                            lost_rec, bpf_gpu or "none"))
    p("  agent CPU: %s µs per batch of %d records (%d batches fired in %s s, all received after %s s; the "
      "bench repeats one buffer's timestamps, which the agent's timeline handles in quadratic time: not a figure "
      "for real jobs); attached %s s after a process mapped the library" % (
          fmt(agent_us, ".0f"), GPU_BATCH, batches, facts.get("fire_phase_wall_s", "?"),
          facts.get("attached_phase_wall_s") or "?", facts.get("attach_after_s", "?")))

    ms = metrics(os.path.join(gdir, "sim.metrics"))
    sjob = facts.get("sim_job", "")
    sizes = {l.get("rank"): v for n, l, v in ms if n == "argus_gpu_step_summary_bytes" and l.get("job_id") == sjob}
    srec = msum(ms, "argus_gpu_records_total", job_id=sjob)
    skern = msum(ms, "argus_gpu_records_total", job_id=sjob, kind="kernel")
    slost = msum(ms, "argus_gpu_records_lost_total", job_id=sjob)
    unit = facts.get("unit_realistic_step_bytes") or None
    truth = {"batches": 0, "records": 0, "kernels": 0, "dropped": 0, "ranks": 0}
    for path in glob.glob(os.path.join(gdir, "sim", "rank-*.json")):
        g = (load_json(path, {}) or {}).get("gpu") or {}
        truth["ranks"] += 1
        for k in ("batches", "records", "kernels", "dropped"):
            truth[k] += g.get(k, 0)
    sim_ticks = int(facts.get("agent_cpu_ticks_sim", "0") or 0)
    sim_wall = float(facts.get("sim_phase_wall_s", "0") or 0)
    sim_cpu_pct = sim_ticks / tck / sim_wall * 100 if sim_wall else None
    res["sketch"] = {"sim_step_summary_bytes_by_rank": sizes, "sim_records": srec, "sim_kernels": skern,
                     "sim_records_lost": slost, "unit_realistic_step_bytes": unit, "sim_truth": truth,
                     "agent_cpu_pct_during_sim": sim_cpu_pct, "sim_phase_wall_s": sim_wall}
    p("")
    p("2. Per-step kernel sketch (argus_gpu_step_summary_bytes, mean of the last 100 steps)")
    if sizes:
        v = sorted(sizes.values())
        p("  argus-sim --ranks 8 --steps 100 --step-ms 50: %d ranks, %s bytes per step (min %s, max %s); "
          "%d GPU records (%d kernels), %d lost" % (len(v), fmt(median(v), ".0f"), fmt(v[0], ".0f"),
                                                   fmt(v[-1], ".0f"), srec, skern, slost))
        p("  the sim's ranks fired %d batches, %d records (%d kernels, %d dropped): agent / sim records = %s; "
          "agent CPU %s%% of a core over the %.1f s of the job (everything it does, not only GPU records)" % (
              truth["batches"], truth["records"], truth["kernels"], truth["dropped"],
              fmt(ratio(srec, truth["records"]), ".4f"), fmt(sim_cpu_pct, ".2f"), sim_wall))
    else:
        p("  argus-sim: no argus_gpu_step_summary_bytes for job %s (see %s/sim.log, agent.log)" % (sjob, gdir))
    p("  unit test StepSketch.RealisticStepStaysUnderTwoKilobytes (2 400 kernels, 150 names): %s bytes per step" % (
        unit or "n/a"))
    with open(os.path.join(gdir, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    return out, res


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--gpu":
        lines, _ = gpu_section(sys.argv[2])
        print("\n".join(lines) if lines else "no GPU-layer results in %s" % sys.argv[2])
        return
    work = sys.argv[1]
    facts = read_facts(work)
    res = {"facts": facts, "probe_cost": {}, "agent_load": {}, "estimates": {}}
    out = []
    p = out.append
    p("")
    p("== Argus overhead, %s: kernel %s, %s CPUs (%s), load avg %s -> %s ==" % (
        facts.get("date", "?"), facts.get("kernel", "?"), facts.get("cpus", "?"), facts.get("virt", "?"),
        facts.get("loadavg_start", "?"), facts.get("loadavg_end", "?")))
    p("results: %s" % work)
    others = {k[len("other_tracers_"):]: v for k, v in facts.items() if k.startswith("other_tracers_") and v.strip()}
    if others:
        res["other_tracers"] = others
        p("WARNING: other argus-agent/bpftrace processes ran during %s (pids %s): they probe the bench and the "
          "sim too, so these figures include their cost" % (", ".join(sorted(others)),
                                                         " ".join(sorted(set(" ".join(others.values()).split())))))
    if facts.get("unprobed_run_was_probed"):
        res["unprobed_run_was_probed"] = True
        p("WARNING: the 'unprobed' run found itself probed by another tracer: its figures are not unprobed")

    # ---- a. probe cost ----
    runs = {k: bench_times(os.path.join(work, "bench-%s.json" % k)) for k in PROBE_RUNS}
    un = runs["unprobed"]
    p("")
    p("a. Probe cost: extra CPU ns per call of the traced thread over the unprobed call (medians; [in syscalls])")
    p("%-30s %10s %14s %14s %14s %14s %9s %14s %9s" % (
        "call", "unprobed", "interposer", "argus", "argus deep", "bpftrace", "argus/bt", "bpftrace timed",
        "argus/btt"))
    sysc = un["BM_SyscallGetppid"][0] if un and "BM_SyscallGetppid" in un else None
    noop = un["BM_NoopCall"][0] if un and "BM_NoopCall" in un else None

    def delta(run, name):
        r, u = runs.get(run), un.get(name) if un else None
        return (r[name][0] - u[0]) if r and u and name in r else None

    def dcell(d, hits=1):
        return "n/a" if d is None else ("%.0f [%.1f]" % (d, d / sysc) if sysc and hits else "%.0f" % d)

    for name, label, _, hits, deep_hits in BENCHES:
        u = un.get(name) if un else None
        d = {run: delta(run, name) for run in PROBE_RUNS[1:]}
        # Argus against bpftrace on the set that probes the call.
        mine = d["argus"] if hits else d["argus_deep"]
        row = {"label": label, "probe_hits_default": hits, "probe_hits_deep": deep_hits,
               "unprobed_ns": u, **{run + "_ns": runs[run].get(name) if runs.get(run) else None for run in PROBE_RUNS[1:]},
               **{run + "_delta_ns": d[run] for run in PROBE_RUNS[1:]},
               "argus_vs_bpftrace": ratio(mine, d["bpftrace"]) if deep_hits else None,
               "argus_vs_bpftrace_timed": ratio(mine, d["bpftrace_timed"]) if deep_hits else None,
               "argus_delta_syscalls": ratio(mine, sysc) if deep_hits else None}
        res["probe_cost"][name] = row
        p("%-30s %10s %14s %14s %14s %14s %9s %14s %9s" % (
            label, "n/a" if u is None else "%.1f" % u[0], dcell(d["interpose"], deep_hits), dcell(d["argus"], hits),
            dcell(d["argus_deep"], deep_hits), dcell(d["bpftrace"], deep_hits),
            fmt(row["argus_vs_bpftrace"], ".2f") if deep_hits else "-", dcell(d["bpftrace_timed"], deep_hits),
            fmt(row["argus_vs_bpftrace_timed"], ".2f") if deep_hits else "-"))
    r = res["probe_cost"]["BM_NcclAllReduce1Rank"]
    pair_ns = r["argus_delta_ns"]          # entry + return probe on one function
    p("  syscall = %s x a plain call; unprobed calls that are not in the table's runs cost nothing extra "
      "(ncclGetVersion is the control)" % fmt(ratio(sysc, noop), ".0f"))
    p("  Argus / bpftrace extra cost per call: ncclAllReduce %s, ncclGroupStart/End %s, cuStreamSynchronize %s, "
      "cuLaunchKernel (deep) %s; the interposer (LD_PRELOAD, counting): %s of Argus's on ncclAllReduce" % (
        fmt(r["argus_vs_bpftrace"], ".2f"), fmt(res["probe_cost"]["BM_NcclGroupStartEnd"]["argus_vs_bpftrace"], ".2f"),
        fmt(res["probe_cost"]["BM_CuStreamSynchronize"]["argus_vs_bpftrace"], ".2f"),
        fmt(res["probe_cost"]["BM_CuLaunchKernel"]["argus_vs_bpftrace"], ".2f"),
        fmt(ratio(r["interpose_delta_ns"], pair_ns), ".3f")))
    pairs = bpf_pair_rows(work)
    if any(a is not None for _, a, _, _ in pairs):
        res["probe_cost"]["bpf_ns_per_call"] = {label: {"argus": a, "bpftrace": b, "bpftrace_timed": bt}
                                                for label, a, b, bt in pairs}
        p("  BPF programs alone (kernel.bpf_stats_enabled; ns per call, entry + return; the trap is the rest): %s" % (
            "; ".join("%s Argus %s, bpftrace counting %s, timing %s" % (label, fmt(a, ".0f"), fmt(b, ".0f"), fmt(bt, ".0f"))
                      for label, a, b, bt in pairs)))
    if facts.get("interpose_failed"):
        p("  WARNING: the interposer did not count every timed call: its column is not interposed")
    if facts.get("interpose_counts"):
        p("  interposer counted: %s" % facts["interpose_counts"])
    ab_ticks = facts.get("agent_bench_cpu_ticks")
    ab_wall = facts.get("agent_bench_wall_s")
    if ab_ticks and ab_wall:
        tck = float(facts.get("clk_tck", "100"))
        share = 100 * int(ab_ticks) / tck / float(ab_wall)
        res["probe_cost"]["agent_cpu_pct_during_probed_bench"] = share
        am = metrics(os.path.join(work, "agent-bench.metrics"))
        ev = msum(am, "argus_agent_events_total")
        lost = msum(am, "argus_agent_events_lost_total")
        res["probe_cost"]["agent_events"] = ev
        res["probe_cost"]["agent_events_lost"] = lost
        ev_s = ev / float(ab_wall)
        us_per_ev = ratio(share / 100 * 1e6, ev_s)
        res["probe_cost"]["agent_events_per_s"] = ev_s
        res["probe_cost"]["agent_us_cpu_per_event"] = us_per_ev
        p("  while the probed bench ran (one call after another, no pause), argus-agent used %.0f%% of a core "
          "for %.0f events/s (%s µs of agent CPU per event); lost %d" % (share, ev_s, fmt(us_per_ev, ".1f"), lost))
    if facts.get("agent_bench_stop_s"):
        p("  argus-agent stop (SIGTERM to exit) took %s s with %s probes attached" % (
            facts["agent_bench_stop_s"], facts.get("agent_bench_probes_at_stop", "?")))

    # ---- b. agent cost ----
    p("")
    p("b. argus-agent at the sim's call rate (argus-sim --ranks 8 --steps 0 --step-ms 100 --init-ms 200)")
    p("%-8s %10s %10s %8s %8s %9s %9s %10s %12s %12s %9s %10s" % (
        "probes", "CPU %core", "schedstat", "idle %", "net %", "RSS MiB", "peak MiB", "coll/s/rk", "launch/s/rk",
        "hits/s node", "events/s", "net µs/ev"))
    tck = float(facts.get("clk_tck", "100"))
    pending_notes = []
    for probes in ("default", "deep"):
        wall = facts.get("load_%s_wall_s" % probes)
        if not wall:
            p("%-8s not run (see the log above)" % probes)
            continue
        wall = float(wall)
        cpu_s = int(facts.get("load_%s_cpu_ticks" % probes, "0")) / tck
        cpu_ns = int(facts.get("load_%s_cpu_ns" % probes, "0"))
        idle_wall = float(facts.get("idle_%s_wall_s" % probes, "0") or 0)
        # idle and net from the scheduler's ns (finer than 10 ms ticks over a few seconds)
        idle_pct = (100 * int(facts.get("idle_%s_cpu_ns" % probes, "0")) / 1e9 / idle_wall) if idle_wall else None
        job = facts.get("sim_%s_job" % probes, "")
        t0 = rank_totals(os.path.join(work, "load-%s-t0.ranks.json" % probes), job)
        t1 = rank_totals(os.path.join(work, "load-%s-t1.ranks.json" % probes), job)
        fin = rank_totals(os.path.join(work, "load-%s-final.ranks.json" % probes), job)
        truth = truth_totals(work, probes)
        nranks = max(t1["ranks"], 1)
        coll_s = (t1["coll"] - t0["coll"]) / wall
        launch_s = (t1["launches"] - t0["launches"]) / wall if t1["launches_known"] else None
        sync_s = (t1["sync"] - t0["sync"]) / wall
        m0 = metrics(os.path.join(work, "load-%s-t0.metrics" % probes))
        m1 = metrics(os.path.join(work, "load-%s-t1.metrics" % probes))
        i0 = metrics(os.path.join(work, "idle-%s-t0.metrics" % probes))
        i1 = metrics(os.path.join(work, "idle-%s-t1.metrics" % probes))
        events = msum(m1, "argus_agent_events_total") - msum(m0, "argus_agent_events_total")
        proc_events = (msum(m1, "argus_agent_events_total", source="proc")
                       - msum(m0, "argus_agent_events_total", source="proc"))
        idle_proc = (msum(i1, "argus_agent_events_total", source="proc")
                     - msum(i0, "argus_agent_events_total", source="proc"))
        lost = msum(m1, "argus_agent_events_lost_total") - msum(m0, "argus_agent_events_lost_total")
        bpf_errors = msum(m1, "argus_agent_bpf_errors_total")
        attach_errors = msum(m1, "argus_agent_probe_attach_errors_total")
        if truth and truth["coll"]:
            hits_s = probe_hits(truth, probes) / truth["coll"] * coll_s
            hits_exact = True
        else:  # from the agent's own counts
            hits_s = coll_s * NCCL_COLL_HITS + sync_s * SYNC_HITS + (launch_s or 0) * (
                LAUNCH_HITS if probes == "deep" else 0)
            hits_exact = False
        cover = {}
        if truth:
            cover["collectives"] = ratio(fin["coll"], truth["coll"])
            cover["sync"] = ratio(fin["sync"], truth["sync"])
            if probes == "deep":
                cover["launches"] = ratio(fin["launches"], truth["launches"])
        pct = 100 * cpu_s / wall
        sched_pct = 100 * cpu_ns / 1e9 / wall
        net_pct = None if idle_pct is None else sched_pct - idle_pct
        row = {
            "wall_s": wall, "agent_cpu_s": cpu_s, "agent_cpu_pct": pct,
            "agent_cpu_pct_schedstat": 100 * cpu_ns / 1e9 / wall,
            "agent_idle_cpu_pct": idle_pct, "agent_net_cpu_pct": net_pct,
            "rss_kib": int(facts.get("agent_%s_vmrss_kib" % probes, "0") or 0),
            "peak_rss_kib": int(facts.get("agent_%s_vmhwm_kib" % probes, "0") or 0),
            "ranks_tracked": t1["ranks"], "ranks_tracked_after_s": facts.get("sim_%s_all_tracked_after_s" % probes),
            "coll_per_s_node": coll_s, "coll_per_s_rank": coll_s / nranks, "sync_per_s_node": sync_s,
            "launch_per_s_rank": None if launch_s is None else launch_s / nranks,
            "probe_hits_per_s_node": hits_s, "probe_hits_exact": hits_exact,
            "events_per_s": events / wall, "proc_events_per_s": proc_events / wall,
            "idle_proc_events_per_s": (idle_proc / idle_wall) if idle_wall else None,
            "events_lost": lost, "bpf_errors": bpf_errors, "attach_errors": attach_errors,
            "net_agent_us_per_event": (ratio(net_pct / 100 * 1e6, events / wall) if net_pct is not None else None),
            "agent_final": fin, "truth": truth, "agent_over_truth": cover,
            "agent_exit_code": facts.get("agent_%s_exit_code" % probes),
        }
        # Which agent thread spent the CPU.
        def threads(path):
            out = {}
            try:
                with open(path) as f:
                    for line in f:
                        parts = line.split(None, 2)
                        if len(parts) == 3:
                            out[parts[0]] = (int(parts[1]), parts[2].strip())
            except (OSError, ValueError):
                pass
            return out
        th0 = threads(os.path.join(work, "load-%s-t0.threads" % probes))
        th1 = threads(os.path.join(work, "load-%s-t1.threads" % probes))
        busy = sorted(((v[0] - th0.get(tid, (0, ""))[0], v[1], tid) for tid, v in th1.items()), reverse=True)
        row["threads"] = [{"tid": tid, "comm": comm, "cpu_pct": 100 * d / tck / wall} for d, comm, tid in busy]
        res["agent_load"][probes] = row
        p("%-8s %10.2f %10.2f %8s %8s %9.1f %9.1f %10.1f %12s %11.0f%s %9.0f %10s" % (
            probes, pct, sched_pct, fmt(idle_pct, ".2f"), fmt(net_pct, ".2f"), row["rss_kib"] / 1024,
            row["peak_rss_kib"] / 1024, row["coll_per_s_rank"], fmt(row["launch_per_s_rank"]), hits_s,
            "" if hits_exact else "+", events / wall, fmt(row["net_agent_us_per_event"], ".1f")))
        notes = ["%s: all %d ranks tracked %.2f s after the sim started" % (
            probes, t1["ranks"], float(row["ranks_tracked_after_s"] or 0))]
        notes.append("exec/proc events/s from the rest of the machine: %s idle, %.1f loaded" % (
            fmt(row["idle_proc_events_per_s"]), row["proc_events_per_s"]))
        if cover:
            notes.append("agent/truth calls: " + ", ".join("%s %s" % (k, fmt(v, ".4f")) for k, v in cover.items()))
        if row["threads"]:
            notes.append("busiest agent threads: " + ", ".join(
                "%s %.2f%%" % (t["comm"], t["cpu_pct"]) for t in row["threads"][:3]))
        if lost or bpf_errors or attach_errors:
            notes.append("events lost %d, BPF errors %d, attach errors %d" % (lost, bpf_errors, attach_errors))
        if facts.get("agent_%s_stop_s" % probes):
            notes.append("agent stop (SIGTERM to exit): %s s with %s probes attached%s" % (
                facts["agent_%s_stop_s" % probes], facts.get("agent_%s_probes_at_stop" % probes, "?"),
                " - HUNG, killed" if facts.get("agent_%s_stop_hung" % probes) else ""))
            row["stop_s"] = float(facts["agent_%s_stop_s" % probes])
        if probes == "default" and facts.get("churn_wall_s"):
            cw = float(facts["churn_wall_s"])
            cpct = 100 * int(facts.get("churn_cpu_ns", "0")) / 1e9 / cw
            rate = int(facts.get("churn_execs", "0") or 0) / cw
            row["churn"] = {"execs_per_s": rate, "agent_cpu_pct": cpct, "idle_cpu_pct": idle_pct}
            notes.append("discovery: with %.1f execs/s of 3-s-lived processes the agent used %.2f%% of a core (idle %s%%)" % (
                rate, cpct, fmt(idle_pct, ".2f")))
        if row["agent_exit_code"] not in ("0", None):
            notes.append("agent exit status %s" % row["agent_exit_code"])
        if truth and truth["status"]:
            notes.append("sim ranks ended: %s" % ", ".join("%d %s" % (v, k) for k, v in sorted(truth["status"].items())))
        if pair_ns and hits_s:
            # What the traced ranks pay: hits/s x cost per hit (half an entry+return pair).
            per_hit = pair_ns / 2
            rank_share = hits_s / nranks * per_hit / 1e9 * 100
            row["rank_time_pct_here"] = rank_share
            notes.append("probes cost each rank ~%.3f%% of its time here (hits/s/rank x measured cost)" % rank_share)
        pending_notes.append(notes)
    for notes in pending_notes:
        p("  " + notes[0])
        for n in notes[1:]:
            p("    " + n)

    # ---- estimates ----
    if pair_ns is not None:
        p("")
        p("Estimates (probe hits/s x cost measured above; bare metal traps ~10x cheaper, ENVIRONMENT.md):")
        cases = [("default: 200 collectives/s/rank (entry+return each)", 200),
                 ("deep: 10k kernel launches/s/rank (entry+return each)", 10000)]
        for label, per_s in cases:
            share = per_s * pair_ns / 1e9 * 100
            res["estimates"][label] = {"calls_per_s_rank": per_s, "pct_of_rank_time_here": share,
                                       "pct_of_rank_time_bare_metal_est": share / 10}
            p("  %-55s %7.2f%% of a rank's time here, ~%.3f%% on bare metal" % (label, share, share / 10))
        us_ev = res["probe_cost"].get("agent_us_cpu_per_event")
        if us_ev:
            # One ring-buffer event per collective; launches are counted in BPF maps.
            ev_s = 8 * 200
            agent = ev_s * us_ev / 1e6 * 100
            res["estimates"]["agent_8_ranks_200_coll_s"] = {"events_per_s": ev_s, "agent_cpu_pct_here": agent}
            p("  %-55s %7.2f%% of one core for argus-agent's event handling here" % (
                "agent: 8 ranks x 200 collectives/s = %d events/s" % ev_s, agent))

    gdir = os.path.join(work, "gpu")
    if os.path.isdir(gdir):
        lines, gres = gpu_section(gdir)
        out.extend(lines)
        res["gpu"] = gres

    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    print("\n".join(out))


if __name__ == "__main__":
    main()
