#!/usr/bin/env python3
"""Ring-buffer events per second: where the agent starts losing them.

    sudo BUILD_DIR=build python3 bench/event_rate.py OUT_DIR     (also `make bench`, part k)

bench/event_rate_load calls ncclAllReduce (the simulator's shim, a copy of its
own) at a paced rate from ARGUS_BENCH_RATE_THREADS threads (default: one per
CPU); every call sends two ring-buffer events to the agent (the collective's
entry and its return: each call passes an invalid datatype, which the shim
refuses at once, and BPF sends a return event for a failed call; a successful
return that quick sends none). For each ring-buffer size (ARGUS_BENCH_RATE_RINGBUF_KB,
default "4096 64": the default and a small one) and each target rate
(ARGUS_BENCH_RATES, default "5000 50000 500000" calls/s = 10^4, 10^5, 10^6
events/s) it runs the load for ARGUS_BENCH_RATE_SECONDS (5) and reads the
agent's /metrics before and after: events expected (2 x calls made), received
(argus_agent_events_total{source="nccl"}), lost (argus_agent_events_lost_total),
and the agent's CPU share over the run. A target the threads cannot reach (each
call traps twice) is reported as the rate they reached. Writes OUT_DIR/rate.txt.
"""
import os
import re
import shutil
import subprocess
import sys
import time

from benchlib import free_port, metrics, msum, stop


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: event_rate.py OUT_DIR")
    out = sys.argv[1]
    build = os.environ.get("BUILD_DIR", "build")
    agent_bin = os.path.join(build, "bin", "argus-agent")
    load_bin = os.path.join(build, "bin", "event_rate_load")
    for f in (agent_bin, load_bin, os.path.join(build, "lib", "libnccl.so.2")):
        if not os.path.exists(f):
            sys.exit(f"event_rate: {f} missing (make build)")
    if os.geteuid() != 0:
        sys.exit("event_rate: needs root (BPF)")
    os.makedirs(out, exist_ok=True)
    lib = os.path.join(out, "libnccl.so.2")  # an inode of its own
    shutil.copy(os.path.join(build, "lib", "libnccl.so.2"), lib)
    seconds = float(os.environ.get("ARGUS_BENCH_RATE_SECONDS", "5"))
    rates = [float(r) for r in os.environ.get("ARGUS_BENCH_RATES", "5000 50000 500000").split()]
    ringbufs = [int(k) for k in os.environ.get("ARGUS_BENCH_RATE_RINGBUF_KB", "4096 64").split()]
    threads = int(os.environ.get("ARGUS_BENCH_RATE_THREADS", str(os.cpu_count() or 1)))

    lines = [f"ring-buffer events/s ({threads} load threads on {os.cpu_count()} CPUs, {seconds:.0f} s a row; "
             "2 events per ncclAllReduce call: its entry and its failed return)",
             "%-9s %12s %12s %12s %12s %10s %8s %12s" % ("ringbuf", "target ev/s", "sent ev/s", "sent",
                                                           "received", "lost", "lost %", "agent cpu %")]
    for kb in ringbufs:
        port = free_port()
        log = open(os.path.join(out, f"agent-{kb}.log"), "w")
        agent = subprocess.Popen([agent_bin, "--listen", f"127.0.0.1:{port}", "--log-level", "warn",
                                  "--ringbuf-kb", str(kb)], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(150):
                if metrics(port):
                    break
                time.sleep(0.1)
            else:
                sys.exit(f"event_rate: the agent did not start; see {log.name}")
            # Warm-up: the library's probes attach (per inode: every later process
            # is covered from its first call).
            subprocess.run([load_bin, lib, "1", "100", "2"], check=True, capture_output=True)
            if msum(metrics(port), "argus_agent_probes_attached", library="nccl") <= 0:
                sys.exit(f"event_rate: the agent never probed {lib}; see {log.name}")
            for rate in rates:
                m0, c0, t0 = metrics(port), cpu_s(agent.pid), time.time()
                r = subprocess.run([load_bin, lib, str(threads), str(rate), str(seconds), "fail"], check=True,
                                   capture_output=True, text=True)
                time.sleep(0.5)  # the agent drains the ring every 50 ms
                m1, c1, t1 = metrics(port), cpu_s(agent.pid), time.time()
                calls, secs = (float(x) for x in re.match(r"calls (\d+) seconds (\S+)", r.stdout).groups())
                sent = 2 * calls
                got = msum(m1, "argus_agent_events_total", source="nccl") - msum(m0, "argus_agent_events_total",
                                                                                  source="nccl")
                lost = msum(m1, "argus_agent_events_lost_total") - msum(m0, "argus_agent_events_lost_total")
                lines.append("%-9s %12.0f %12.0f %12.0f %12.0f %10.0f %8.3f %12.2f" % (
                    f"{kb} KiB", 2 * rate, sent / secs, sent, got, lost, 100 * lost / sent if sent else 0,
                    100 * (c1 - c0) / (t1 - t0)))
                print(lines[-1], flush=True)
        finally:
            stop(agent)
            log.close()
    with open(os.path.join(out, "rate.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
