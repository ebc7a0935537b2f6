#!/usr/bin/env python3
"""bench_resp.py - redis-benchmark against `walrus serve` and redis-server,
side by side, interleaved (not a test: docs/performance.md, "RESP server").

For each round and each pipeline depth it runs, one after the other, the
servers of --servers (default pool-on,perconn-on,redis):
  pool-on      walrus serve, its default pool of backends (two per online
               CPU), synchronous_commit=on (a reply only once the WAL is
               durable)
  pool-off     the same with synchronous_commit=off
  perconn-on   walrus serve --backends 0 (one backend process per
               connection), synchronous_commit=on
  perconn-off  the same with synchronous_commit=off
  poolN-on     walrus serve --backends N (and poolN-off)
  redis        redis-server --appendonly yes --appendfsync always --save ''
each on a fresh data directory on the same file system, with
  redis-benchmark -t set,get -n N -c 50 -P P --csv
and prints the median requests/s of every cell over the rounds, for walrus
the writes per WAL flush (INFO wal), and each walrus SET median against
redis's.  The machine is shared and noisy: compare cells of one run, and
rounds interleave the servers so that a noisy minute hits them all.

usage: bench_resp.py --walrus build/tools/walrus [--rounds 3] [-n 200000]
                     [--pipelines 1,16] [--servers pool-on,perconn-on,redis]
                     [--dir /tmp]
"""
import argparse
import csv
import io
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srvtest import kill_all  # noqa: E402


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def bench(port, n, pipeline, tests):
    r = subprocess.run(["redis-benchmark", "-p", str(port), "-t", tests, "-n", str(n), "-c", "50",
                        "-P", str(pipeline), "--csv"], capture_output=True, text=True, timeout=1800)
    out = {}
    for row in csv.reader(io.StringIO(r.stdout)):
        if row and row[0] in ("SET", "GET"):
            out[row[0]] = float(row[1])
    return out


def info_wal(port):
    r = subprocess.run(["redis-cli", "-p", str(port), "INFO", "wal"], capture_output=True,
                       text=True, timeout=60)
    f = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    return int(f.get("wal_records", 0)), int(f.get("wal_flushes", 0))


def run_walrus(walrus, base, sync, backends, n, pipeline, tests):
    d = tempfile.mkdtemp(prefix="walrus-", dir=base)
    os.chmod(d, 0o700)
    port = free_port()
    extra = [] if backends is None else ["--backends", str(backends)]
    p = subprocess.Popen([walrus, "-D", os.path.join(d, "data"), "-o", "create_if_missing=on",
                          "-o", f"synchronous_commit={sync}", "serve", "--port", str(port),
                          "--unix", "none"] + extra,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        while b"ready" not in p.stdout.readline():
            if p.poll() is not None:
                raise RuntimeError("walrus serve did not start")
        res = bench(port, n, pipeline, tests)
        rec, fl = info_wal(port)
        res["per_flush"] = rec / fl if fl else 0.0
        p.send_signal(signal.SIGTERM)
        p.wait(120)
    finally:
        if p.poll() is None:
            p.kill()
        kill_all(d)
        shutil.rmtree(d, ignore_errors=True)
    return res


def run_redis(base, n, pipeline, tests):
    d = tempfile.mkdtemp(prefix="redis-", dir=base)
    port = free_port()
    p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                          "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                          "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            r = subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True)
            if r.stdout.strip() == b"PONG":
                break
            time.sleep(0.05)
        return bench(port, n, pipeline, tests)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("--pipelines", default="1,16")
    ap.add_argument("--tests", default="set,get")
    ap.add_argument("--servers", default="pool-on,perconn-on,redis")
    ap.add_argument("--dir", default="/tmp")
    a = ap.parse_args()
    base = tempfile.mkdtemp(prefix="walrus-resp-bench-", dir=a.dir)
    cells = {}

    def walrus(sync, backends):
        return lambda n, p: run_walrus(a.walrus, base, sync, backends, n, p, a.tests)
    known = {"pool-on": walrus("on", None), "pool-off": walrus("off", None),
             "perconn-on": walrus("on", 0), "perconn-off": walrus("off", 0),
             "redis": lambda n, p: run_redis(base, n, p, a.tests)}
    for name in a.servers.split(","):  # poolN-on / poolN-off: --backends N
        m = re.fullmatch(r"pool(\d+)-(on|off)", name)
        if m:
            known[name] = walrus(m.group(2), int(m.group(1)))
    servers = [(name, known[name]) for name in a.servers.split(",")]
    try:
        for rnd in range(a.rounds):
            for pl in [int(x) for x in a.pipelines.split(",")]:
                for name, fn in servers:
                    r = fn(a.n, pl)
                    for k, v in r.items():
                        cells.setdefault((name, pl, k), []).append(v)
                    print(f"round {rnd} -P {pl:<3} {name:<13} " +
                          " ".join(f"{k}={v:.0f}" if k != "per_flush" else f"{k}={v:.1f}"
                                   for k, v in r.items()), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("\nmedians over %d rounds (requests/s; writes per WAL flush):" % a.rounds)
    print("| server | -P | SET | GET | writes/flush |")
    print("|---|---|---|---|---|")
    for name, _ in servers:
        for pl in [int(x) for x in a.pipelines.split(",")]:
            def med(k):
                v = cells.get((name, pl, k))
                return statistics.median(v) if v else None
            s, g, f = med("SET"), med("GET"), med("per_flush")
            print(f"| {name} | {pl} | {s:.0f} | " + (f"{g:.0f}" if g else "-") + " | " +
                  (f"{f:.1f} |" if f else "- |") if s else f"| {name} | {pl} | ? | ? | ? |")
    if "redis" in dict(servers):
        print("\nSET medians against redis's:")
        for name, _ in servers:
            for pl in [int(x) for x in a.pipelines.split(",")]:
                w, r = cells.get((name, pl, "SET")), cells.get(("redis", pl, "SET"))
                if name != "redis" and w and r:
                    print(f"  {name:<12} -P {pl:<3} {statistics.median(w) / statistics.median(r):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
