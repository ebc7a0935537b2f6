#!/usr/bin/env python3
"""bench/peers/test_peers.py - the overwrite workloads (readwhilewriting,
updaterandom) on every engine of walrus-peers, small, and its help text.

walrus-peers checks every result itself (exit 2 on a wrong one): after an
overwrite workload, every key holds a value some client wrote, and with a
single writer each key holds exactly its last put's value, so an engine whose
put fails or leaves an existing key unchanged is caught. This script checks
what it prints: one JSON line per (engine, workload, client count), in order,
with the operations asked for, latencies, and the readwhilewriting writer's
puts (at least one). updaterandom runs twice, the second time on a database
the first one rewrote. It also checks that `walrus-peers --help` and `walrus
bench --help` both name every workload. No timing is asserted.

usage: test_peers.py --peers PATH --walrus PATH
"""
import argparse
import json
import subprocess
import sys

WORKLOADS = ["fillseq", "fillrandom", "fillsync", "readrandom", "scan", "readwhilewriting",
             "updaterandom"]
ENGINES = ["walrus", "sqlite", "lmdb", "rocksdb"]
NUM = 2000
PROCS = [1, 2]
RUN = ["readwhilewriting", "updaterandom", "updaterandom"]


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check_help(peers, walrus):
    for argv in ([peers, "--help"], [walrus, "bench", "--workload", "updaterandom", "--help"]):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            fail("%s: exit %d: %s" % (" ".join(argv), p.returncode, p.stderr))
        for w in WORKLOADS:
            if ("  %s " % w) not in p.stdout:
                fail("%s does not describe workload %s:\n%s" % (" ".join(argv), w, p.stdout))
    p = subprocess.run([peers, "--workloads", "updaterandomx"], capture_output=True, text=True,
                       timeout=60)
    if p.returncode != 2 or 'unknown workload "updaterandomx"' not in p.stderr:
        fail("an unknown workload: exit %d, %r" % (p.returncode, p.stderr[:200]))


def check_runs(peers):
    argv = [peers, "--engines", ",".join(ENGINES), "--workloads", ",".join(RUN), "--num",
            str(NUM), "--read-procs", ",".join(map(str, PROCS)), "--json"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        fail("%s: exit %d" % (" ".join(argv), p.returncode))
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    want = [(e, w, n) for e in ENGINES for w in RUN for n in PROCS]
    got = [(r["engine"], r["workload"], r["procs"]) for r in rows]
    if got != want:
        fail("results %s, expected %s" % (got, want))
    for r in rows:
        what = "%s %s procs=%d" % (r["engine"], r["workload"], r["procs"])
        mode = "threads" if r["engine"] == "rocksdb" else "processes"
        if r["mode"] != mode:
            fail("%s: mode %s, expected %s" % (what, r["mode"], mode))
        if r["ops"] != NUM:
            fail("%s: %d operations, expected %d" % (what, r["ops"], NUM))
        if not (r["seconds"] > 0 and r["ops_per_s"] > 0):
            fail("%s: no time or rate: %s" % (what, r))
        if not (isinstance(r["p50_us"], (int, float)) and r["p99_us"] >= r["p50_us"] > 0):
            fail("%s: latencies %s, %s" % (what, r["p50_us"], r["p99_us"]))
        if r["workload"] == "readwhilewriting":
            if not r.get("writer_ops", 0) >= 1:
                fail("%s: the writer put nothing: %s" % (what, r))
        elif "writer_ops" in r:
            fail("%s: a writer in a workload without one: %s" % (what, r))
    print("ok: %d results, %s on %s" % (len(rows), ",".join(RUN), ",".join(ENGINES)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--walrus", required=True)
    a = ap.parse_args()
    check_help(a.peers, a.walrus)
    check_runs(a.peers)


if __name__ == "__main__":
    main()
