#!/usr/bin/env python3
"""bench_twemproxy.py - redis-benchmark SET/GET against one `walrus serve`
directly and through twemproxy over three shards (docs/performance.md,
"Sharding behind twemproxy"; the setup of docs/scale-out.md).  Not a test.

Per round and per pipeline depth it runs, one after the other on fresh data
directories: one walrus serve (synchronous_commit=on, its default pool),
then three such shards behind nutcracker with the shipped
examples/twemproxy/nutcracker.yml (ports replaced), each driven by

  redis-benchmark -p P -t set,get -n N -c 50 -P DEPTH -r 1000000 --csv

(-r: random keys, so that the proxy spreads them; the same for the direct
server).  Prints every cell, then the medians and the proxy/direct ratio.

usage: bench_twemproxy.py --walrus build/tools/walrus [--rounds 2] [-n 200000]
                          [--pipelines 1,16] [--dir /tmp]
"""
import argparse
import csv
import io
import os
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "shard"))
from shardtest import Cluster, Shard, free_ports, kill_all  # noqa: E402


def bench(port, n, pipeline):
    argv = ["redis-benchmark", "-p", str(port), "-t", "set,get", "-n", str(n), "-c", "50",
            "-P", str(pipeline), "-r", "1000000", "--csv"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {r.stdout}{r.stderr}")
    return {row[0]: float(row[1]) for row in csv.reader(io.StringIO(r.stdout))
            if row and row[0] in ("SET", "GET")}


def run_direct(walrus, base, n, pipeline):
    import shutil
    import tempfile
    d = tempfile.mkdtemp(prefix="walrus-direct-", dir=base)
    os.chmod(d, 0o700)
    s = Shard(walrus, free_ports(1)[0], d)
    try:
        s.start()
        return bench(s.port, n, pipeline)
    finally:
        if s.proc is not None:
            s.stop()
        kill_all(d)
        shutil.rmtree(d, ignore_errors=True)


def run_proxy(walrus, base, n, pipeline):
    with Cluster(walrus, base=base) as cl:
        return bench(cl.proxy.port, n, pipeline)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--dir", default="/tmp")
    a = ap.parse_args()
    cells = {}
    setups = [("direct", run_direct), ("proxy", run_proxy)]
    pipelines = [int(x) for x in a.pipelines.split(",")]
    for rnd in range(a.rounds):
        for pl in pipelines:
            for name, fn in setups:
                r = fn(a.walrus, a.dir, a.n, pl)
                for k, v in r.items():
                    cells.setdefault((name, pl, k), []).append(v)
                print(f"round {rnd} -P {pl:<3} {name:<7} " +
                      " ".join(f"{k}={v:.0f}" for k, v in r.items()), flush=True)
    print("\nmedians, requests/s (proxy: three shards behind nutcracker)")
    print("| -P | test | one walrus serve | through twemproxy, 3 shards | proxy / direct |")
    print("|---|---|---|---|---|")
    for pl in pipelines:
        for t in ("SET", "GET"):
            d = statistics.median(cells[("direct", pl, t)])
            p = statistics.median(cells[("proxy", pl, t)])
            print(f"| {pl} | {t} | {d:,.0f} | {p:,.0f} | {p / d:.2f}x |".replace(",", " "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
