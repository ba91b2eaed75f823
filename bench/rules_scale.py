#!/usr/bin/env python3
"""The recording and alert rules (helm/argus/rules/argus-rules.yaml) evaluated by a
real Prometheus over a generated job of 12,960 ranks (and a tenth of it, to see how
the cost grows).

    sudo bench/rules_scale.py OUT_DIR        (also `make bench`, part n)

1. Template: argus-agent watches an 8-rank argus-sim job for ARGUS_BENCH_RULES_TEMPLATE_S
   (15) seconds; its /metrics is the template of one node (the label sets exactly as
   the agent writes them). Only the families the rules read are kept (the rest of a
   node's ~650 series is measured by part m, not read by any rule).
2. Nodes: a local HTTP server serves /node/K for K < ranks/8 with that template, job
   `big`, ranks K*8..K*8+7, node `node-K`, a NIC per GPU (argus_rank_nic_info,
   argus_ib_link_degraded for every reason). Values: every rank waits 0.40 of its
   time (+-0.02, drawn afresh every 20 s) except one straggler (rank ranks*5/9, waits 0.05);
   one NIC of node 1 is `down`; argus_nccl_last_seq advances 10 a second (seen every 20 s).
3. Prometheus (Debian's) scrapes every node every 5 s and evaluates the rules every
   5 s for ARGUS_BENCH_RULES_SECONDS (100), then is asked: what each rule group's
   evaluation took (median and max over the last 60 s, from its own metrics), missed
   iterations and failed evaluations, head series, its RSS and CPU, and whether the
   rules found exactly what was injected (ArgusStraggler for that one rank and
   ArgusLinkDown for that one port, pending or firing: a run shorter than their `for:` has
   them pending, the job counted at every rank, and nothing else).

Writes OUT_DIR/rules_scale.txt. Sizes: ARGUS_BENCH_RULES_RANKS ("1296 12960").
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import free_port, metrics  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"))
RULES = os.path.join(ROOT, "helm/argus/rules/argus-rules.yaml")
RANKS_PER_NODE = 8
REFRESH_S = 20  # values change this often (each node's body is cached between)
REASONS = ["errors", "flapping", "down", "rate", "width", "congestion", "imbalance"]
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def rule_families():
    with open(RULES) as f:
        return set(re.findall(r"\bargus_[a-z_]+\b", f.read()))


def capture_template(out, seconds):
    """One node's /metrics while the agent watches an 8-rank sim job."""
    port = free_port()
    agent = subprocess.Popen([f"{BUILD}/bin/argus-agent", "--listen", f"127.0.0.1:{port}", "--log-level", "warn",
                              "--kmsg", "off"], stdout=open(f"{out}/template-agent.log", "w"), stderr=subprocess.STDOUT)
    sim = None
    try:
        for _ in range(150):
            if metrics(port):
                break
            time.sleep(0.1)
        sim = subprocess.Popen([f"{BUILD}/bin/argus-sim", "--ranks", str(RANKS_PER_NODE), "--steps", "0", "--step-ms",
                                "50", "--kernels-per-step", "20", "--job-id", "tmpl", "--quiet"],
                               stdout=open(f"{out}/template-sim.log", "w"), stderr=subprocess.STDOUT,
                               start_new_session=True)
        time.sleep(seconds)
        text = metrics(port)
    finally:
        if sim:
            os.killpg(sim.pid, signal.SIGTERM)
            sim.wait()
        agent.terminate()
        agent.wait()
    with open(f"{out}/template-metrics.txt", "w") as f:
        f.write(text)
    return text


def template_samples(text, families):
    """(family, {label: value}) of the job's samples in the families the rules read."""
    keep = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or m.group(1) not in families:
            continue
        labels = dict(LABEL.findall(m.group(2)))
        if labels.get("job_id") == "tmpl":
            labels["__value__"] = m.group(3)
            keep.append((m.group(1), labels))
    return keep


class Job:
    """The generated job: what each node serves, and what was injected."""

    def __init__(self, samples, ranks):
        self.nodes = ranks // RANKS_PER_NODE
        self.ranks = self.nodes * RANKS_PER_NODE
        self.straggler = self.ranks * 5 // 9
        self.down = (1, "mlx5_3")  # node, device
        self.start = time.time()
        self.samples = samples
        self.rendered = 0
        self.cache = {}  # node -> (epoch, body)
        self.lock = threading.Lock()

    def body(self, node):
        """A node's exposition, fresh every REFRESH_S: rendering every scrape of 1,620
        nodes would take a core of this 2-core machine from the Prometheus measured."""
        epoch = int((time.time() - self.start) // REFRESH_S)
        with self.lock:
            hit = self.cache.get(node)
        if hit and hit[0] == epoch:
            return hit[1]
        body = self.render(node)
        with self.lock:
            self.cache[node] = (epoch, body)
        return body

    def value(self, family, rank, rng):
        if family == "argus_collective_wait_ratio":
            return 0.005 if rank == self.straggler else 0.02 + rng.uniform(-0.002, 0.002)
        if family == "argus_sync_wait_ratio":
            return 0.045 if rank == self.straggler else 0.38 + rng.uniform(-0.02, 0.02)
        if family == "argus_gpu_nccl_kernel_ratio":
            return 0.35 + rng.uniform(-0.02, 0.02)
        if family == "argus_nccl_last_seq":
            return int((time.time() - self.start) * 10) + 1
        return None  # the template's own value (0/1 verdicts and infos)

    def render(self, node):
        rng = random.Random()
        lines = []
        for family, labels in self.samples:
            local = int(labels.get("rank", "0"))
            rank = node * RANKS_PER_NODE + local
            lab = dict(labels, job_id="big", node=f"node-{node}") if "node" in labels else dict(labels, job_id="big")
            if "rank" in lab:
                lab["rank"] = str(rank)
            if "world_size" in lab:
                lab["world_size"] = str(self.ranks)
            if "pid" in lab:
                lab["pid"] = str(1000 + local)
            v = self.value(family, rank, rng)
            value = labels["__value__"] if v is None else repr(v)
            body = ",".join(f'{k}="{x}"' for k, x in lab.items() if k != "__value__")
            lines.append(f"{family}{{{body}}} {value}")
        for i in range(RANKS_PER_NODE):
            dev = f"mlx5_{i}"
            lines.append(f'argus_rank_nic_info{{job_id="big",rank="{node * RANKS_PER_NODE + i}",device="{dev}",port="1"}} 1')
            for r in REASONS:
                bad = (node, dev) == self.down and r == "down"
                lines.append(f'argus_ib_link_degraded{{device="{dev}",port="1",reason="{r}"}} {1 if bad else 0}')
        self.rendered += 1
        return ("\n".join(lines) + "\n").encode()


def serve(job):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            m = re.fullmatch(r"/node/(\d+)", self.path)
            if not m or int(m.group(1)) >= job.nodes:
                self.send_error(404)
                return
            body = job.body(int(m.group(1)))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except ConnectionError:
                pass  # Prometheus gave up on a slow scrape (its timeout is counted there)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def query(port, expr, at=None):
    args = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(args)
    with urllib.request.urlopen(url, timeout=60) as r:
        d = json.load(r)
    if d.get("status") != "success":
        raise RuntimeError(f"query {expr}: {d}")
    return d["data"]["result"]


def scalar(port, expr):
    r = query(port, expr)
    return float(r[0]["value"][1]) if r else float("nan")


def quiet_cost(prom, pport, work, listed):
    """Every rule's expression as one instant query at a moment of the run, once
    Prometheus scrapes and evaluates nothing more (reloaded without targets or
    rules): the rules' own cost, without the scrapes and the generator that share
    these 2 cores during the run. Best of 3 per rule, summed (ms)."""
    at = time.time() - 3
    with open(f"{work}/prometheus.yml", "w") as f:
        f.write("global: {evaluation_interval: 1h}\n")
    prom.send_signal(signal.SIGHUP)
    time.sleep(3)
    times = []
    for x in listed:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            query(pport, x["query"], at)
            best = min(best, time.perf_counter() - t0)
        times.append((best, x["name"]))
    return 1e3 * sum(t for t, _ in times), sorted(times, reverse=True)[:3]



def run_size(out, samples, ranks, seconds):
    job = Job(samples, ranks)
    server = serve(job)
    sport = server.server_address[1]
    pport = free_port()
    work = tempfile.mkdtemp(prefix=f"rules-{ranks}-", dir=out)
    targets = [{"targets": [f"127.0.0.1:{sport}"], "labels": {"__metrics_path__": f"/node/{k}", "instance": f"node-{k}:9400"}}
               for k in range(job.nodes)]
    with open(f"{work}/targets.json", "w") as f:
        json.dump(targets, f)
    with open(f"{work}/prometheus.yml", "w") as f:
        f.write(f"""global:
  scrape_interval: 5s
  evaluation_interval: 5s
rule_files: ["{RULES}"]
scrape_configs:
  - job_name: argus
    scrape_timeout: 5s
    file_sd_configs: [{{files: ["{work}/targets.json"]}}]
  - job_name: prometheus
    static_configs: [{{targets: ["127.0.0.1:{pport}"]}}]
""")
    prom = subprocess.Popen(["prometheus", f"--config.file={work}/prometheus.yml", f"--storage.tsdb.path={work}/data",
                             f"--web.listen-address=127.0.0.1:{pport}", "--log.level=warn"],
                            stdout=open(f"{work}/prometheus.log", "w"), stderr=subprocess.STDOUT)
    try:
        time.sleep(seconds)
        if prom.poll() is not None:
            raise RuntimeError(f"prometheus exited {prom.returncode}: see {work}/prometheus.log")
        groups = query(pport, "prometheus_rule_group_last_duration_seconds")
        per_group = {}
        for g in groups:
            name = g["metric"]["rule_group"].split(";")[-1]
            sel = f'prometheus_rule_group_last_duration_seconds{{rule_group="{g["metric"]["rule_group"]}"}}'
            per_group[name] = (scalar(pport, f"quantile_over_time(0.5, {sel}[60s])"), scalar(pport, f"max_over_time({sel}[60s])"))
        with urllib.request.urlopen(f"http://127.0.0.1:{pport}/api/v1/rules", timeout=60) as r:
            listed = [x for g in json.load(r)["data"]["groups"] for x in g["rules"]]
        rules = [(x.get("evaluationTime", 0), x.get("name")) for x in listed]
        total_sel = "sum(prometheus_rule_group_last_duration_seconds)"
        res = {
            "ranks": job.ranks,
            "nodes": job.nodes,
            "eval_ms_median": 1e3 * scalar(pport, f"quantile_over_time(0.5, {total_sel}[60s:5s])"),
            "eval_ms_max": 1e3 * scalar(pport, f"max_over_time({total_sel}[60s:5s])"),
            "groups": per_group,
            "slowest_rules": sorted(rules, reverse=True)[:4],
            "missed": scalar(pport, "sum(prometheus_rule_group_iterations_missed_total)"),
            "failures": scalar(pport, "sum(prometheus_rule_evaluation_failures_total)"),
            "head_series": scalar(pport, "prometheus_tsdb_head_series"),
            "scraped_samples": scalar(pport, 'sum(scrape_samples_scraped{job="argus"})'),
            "targets_up": scalar(pport, 'sum(up{job="argus"})'),
            "scrape_ms_max": 1e3 * scalar(pport, 'max(scrape_duration_seconds{job="argus"})'),
            "prom_rss_mib": scalar(pport, 'process_resident_memory_bytes{job="prometheus"}') / 2**20,
            "prom_cpu_pct": 100 * scalar(pport, 'rate(process_cpu_seconds_total{job="prometheus"}[60s])'),
            "judged": scalar(pport, 'job_id:argus_collective_wait_ratio:count{job_id="big"}'),
            "stragglers": sorted(int(r["metric"]["rank"]) for r in query(pport, "argus:straggler")),
            "injected_straggler": job.straggler,
            "alerts": sorted({(r["metric"]["alertname"], r["metric"].get("rank", r["metric"].get("device", "")),
                               r["metric"]["alertstate"]) for r in query(pport, "ALERTS")}),
            "renders": job.rendered,
        }
        res["quiet_eval_ms"], res["quiet_slowest"] = quiet_cost(prom, pport, work, listed)
        res["ok"] = (res["judged"] == job.ranks and res["stragglers"] == [job.straggler]
                     and sorted({a[:2] for a in res["alerts"]}) == sorted([("ArgusStraggler", str(job.straggler)),
                                                                          ("ArgusLinkDown", job.down[1])])
                     and res["failures"] == 0)
        return res
    finally:
        prom.terminate()
        prom.wait()
        server.shutdown()
        shutil.rmtree(f"{work}/data", ignore_errors=True)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: bench/rules_scale.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if shutil.which("prometheus") is None:
        sys.exit("rules_scale: prometheus not found (scripts/install-deps.sh installs it)")
    if os.geteuid() != 0:
        sys.exit("rules_scale: needs root (the template comes from argus-agent, which loads BPF)")
    sizes = [int(x) for x in os.environ.get("ARGUS_BENCH_RULES_RANKS", "1296 12960").split()]
    seconds = float(os.environ.get("ARGUS_BENCH_RULES_SECONDS", "100"))
    families = rule_families()
    text = capture_template(out, float(os.environ.get("ARGUS_BENCH_RULES_TEMPLATE_S", "15")))
    samples = template_samples(text, families)
    if not any(f == "argus_collective_wait_ratio" for f, _ in samples):
        sys.exit(f"rules_scale: the template has no argus_collective_wait_ratio (see {out}/template-*.log)")
    results = [run_size(out, samples, n, seconds) for n in sizes]
    with open(f"{out}/rules_scale.json", "w") as f:
        json.dump(results, f, indent=1)
    lines = [f"rules over a generated job (helm/argus/rules/argus-rules.yaml; Prometheus {prom_version()}, "
             f"scrape and evaluation every 5 s, {seconds:.0f} s; {len(samples) // RANKS_PER_NODE} template series/rank "
             f"+ 8 NICs x 8 series/node)",
             "ranks nodes head_series eval_ms_median eval_ms_max quiet_eval_ms missed failures scrape_ms_max prom_cpu_pct prom_rss_mib found_exactly_the_injected"]
    for r in results:
        lines.append(f"{r['ranks']} {r['nodes']} {r['head_series']:.0f} {r['eval_ms_median']:.1f} {r['eval_ms_max']:.1f} "
                     f"{r['quiet_eval_ms']:.1f} {r['missed']:.0f} {r['failures']:.0f} {r['scrape_ms_max']:.1f} {r['prom_cpu_pct']:.1f} "
                     f"{r['prom_rss_mib']:.0f} {'yes' if r['ok'] else 'NO'}")
    table = subprocess.run(["column", "-t"], input="\n".join(lines[1:]) + "\n", capture_output=True, text=True).stdout
    text = lines[0] + "\n" + table
    if len(results) >= 2 and results[0]["eval_ms_median"] > 0:
        a, b = results[0], results[-1]
        text += (f"growth {a['ranks']} -> {b['ranks']} ranks (x{b['ranks'] / a['ranks']:.0f}): evaluation "
                 f"x{b['eval_ms_median'] / a['eval_ms_median']:.1f} (quiet x{b['quiet_eval_ms'] / a['quiet_eval_ms']:.1f}), head series x{b['head_series'] / a['head_series']:.1f}, "
                 f"Prometheus RSS x{b['prom_rss_mib'] / a['prom_rss_mib']:.1f}\n")
    for r in results:
        slow = sorted(r["groups"].items(), key=lambda kv: -kv[1][0])[:3]
        text += f"{r['ranks']} ranks, slowest groups (median ms): " + ", ".join(f"{k} {v[0] * 1e3:.1f}" for k, v in slow)
        text += "; slowest rules (last evaluation, ms): " + ", ".join(f"{n} {t * 1e3:.1f}" for t, n in r["slowest_rules"])
        text += "; quiet, slowest (ms): " + ", ".join(f"{n} {t * 1e3:.1f}" for t, n in r["quiet_slowest"])
        text += f"; alerts: {r['alerts']}\n"
    with open(f"{out}/rules_scale.txt", "w") as f:
        f.write(text)
    print(text, end="")
    return 0 if all(r["ok"] for r in results) else 1


def prom_version():
    v = subprocess.run(["prometheus", "--version"], capture_output=True, text=True)
    m = re.search(r"version (\S+)", v.stdout + v.stderr)
    return m.group(1) if m else "?"


if __name__ == "__main__":
    sys.exit(main())
