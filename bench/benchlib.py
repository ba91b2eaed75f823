"""Small helpers the Python benches share (each bench runs as bench/NAME.py, so
this directory is on sys.path)."""
import json
import re
import socket
import subprocess
import urllib.request


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def metrics(port):
    """The agent's /metrics text on 127.0.0.1:port ("" when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    except OSError:
        return ""


def msum(text, name, **labels):
    """The sum of the samples of metric `name` in /metrics text whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)', line)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(4))
    return total


def stop(proc, timeout=120):
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()


def prog_stats():
    """id -> (name, run_cnt, run_time_ns) of every loaded BPF program."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True).stdout
    try:
        return {p["id"]: (p.get("name", ""), p.get("run_cnt", 0), p.get("run_time_ns", 0)) for p in json.loads(out)}
    except ValueError:
        return {}
