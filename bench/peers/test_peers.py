#!/usr/bin/env python3
"""bench/peers/test_peers.py - the overwrite workloads (readwhilewriting,
updaterandom) on every engine of walrus-peers, small, walrus's client modes
(threads and processes), and its help text.

walrus-peers checks every result itself (exit 2 on a wrong one): after an
overwrite workload, every key holds a value some client wrote, and with a
single writer each key holds exactly its last put's value, so an engine whose
put fails or leaves an existing key unchanged is caught. This script checks
what it prints: one JSON line per (engine, workload, client count), in order,
with the operations asked for, latencies, and the readwhilewriting writer's
puts (at least one). updaterandom runs twice, the second time on a database
the first one rewrote. walrus runs every client count twice, as threads (a
handle each) and as processes, in the order --walrus-clients gives (default
threads,processes); RocksDB runs threads, SQLite and LMDB processes. A second
run, walrus alone with --walrus-clients threads, checks fillsync (1 and 8
clients) and readrandom (1 and 2) in threads only, every row with its
operations. It also checks that `walrus-peers --help` and `walrus bench
--help` both name every workload and the client modes, and that a bad mode
is a usage error. A third run, every engine's fillseq and fillrandom with
--batch 100 (2050 keys: the last batch a partial one) and --cache-mb 64,
checks the batch each row reports (RocksDB's is 1: one write per op, the
issue 18 definition); bad values of --batch and --cache-mb are usage errors.
No timing is asserted.

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
SYNC_OPS = 20
MODES = {"walrus": ["threads", "processes"], "sqlite": ["processes"], "lmdb": ["processes"],
         "rocksdb": ["threads"]}


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
        opts = (["--walrus-clients", "--batch", "--cache-mb"] if argv[0] == peers
                else ["--threads", "--processes", "--batch"])
        for o in opts:
            if o not in p.stdout:
                fail("%s does not describe %s:\n%s" % (" ".join(argv), o, p.stdout))
    for args, msg in ((["--workloads", "updaterandomx"], 'unknown workload "updaterandomx"'),
                      (["--walrus-clients", "fibers"], 'unknown client mode "fibers"'),
                      (["--walrus-clients", "threads,threads"], "names a mode twice"),
                      (["--batch", "0"], "bad value for --batch"),
                      (["--batch", "-1"], "bad value for --batch"),
                      (["--batch", "x"], "bad value for --batch"),
                      (["--batch", "100001"], "bad value for --batch"),
                      (["--cache-mb", "0"], "bad value for --cache-mb"),
                      (["--cache-mb", "1x"], "bad value for --cache-mb"),
                      (["--cache-mb", "1048577"], "bad value for --cache-mb")):
        p = subprocess.run([peers] + args, capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or msg not in p.stderr:
            fail("%s: exit %d, %r" % (args, p.returncode, p.stderr[:200]))


def run_json(argv, stderr_has=None):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        fail("%s: exit %d" % (" ".join(argv), p.returncode))
    if stderr_has is not None and stderr_has not in p.stderr:
        fail("%s: stderr lacks %r" % (" ".join(argv), stderr_has))
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def check_row(r, ops):
    what = "%s %s procs=%d %s" % (r["engine"], r["workload"], r["procs"], r["mode"])
    if r["ops"] != ops:
        fail("%s: %d operations, expected %d" % (what, r["ops"], ops))
    if not (r["seconds"] > 0 and r["ops_per_s"] > 0):
        fail("%s: no time or rate: %s" % (what, r))
    if not (isinstance(r["p50_us"], (int, float)) and r["p99_us"] >= r["p50_us"] > 0):
        fail("%s: latencies %s, %s" % (what, r["p50_us"], r["p99_us"]))
    if r["workload"] == "readwhilewriting":
        if not r.get("writer_ops", 0) >= 1:
            fail("%s: the writer put nothing: %s" % (what, r))
    elif "writer_ops" in r:
        fail("%s: a writer in a workload without one: %s" % (what, r))


def check_runs(peers):
    rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads", ",".join(RUN),
                     "--num", str(NUM), "--read-procs", ",".join(map(str, PROCS)), "--json"])
    want = [(e, w, n, m) for e in ENGINES for w in RUN for n in PROCS for m in MODES[e]]
    got = [(r["engine"], r["workload"], r["procs"], r["mode"]) for r in rows]
    if got != want:
        fail("results %s, expected %s" % (got, want))
    for r in rows:
        check_row(r, NUM)
    if any(r["batch"] != 1 for r in rows):
        fail("a row without --batch reports a batch: %s" % rows)
    print("ok: %d results, %s on %s" % (len(rows), ",".join(RUN), ",".join(ENGINES)))


def check_batch(peers):
    """The fills with --batch 100 on every engine: walrus-peers checks every key after
    each fill (exit 2 on a missing one); the rows name their batch."""
    num = 2050
    rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads", "fillseq,fillrandom",
                     "--num", str(num), "--batch", "100", "--cache-mb", "64", "--json"],
                    stderr_has="batch=100 cache-mb=64")
    want = [(e, w) for e in ENGINES for w in ("fillseq", "fillrandom")]
    got = [(r["engine"], r["workload"]) for r in rows]
    if got != want:
        fail("batch run: results %s, expected %s" % (got, want))
    for r in rows:
        check_row(r, num)
        if r["batch"] != (1 if r["engine"] == "rocksdb" else 100):
            fail("%s %s: batch %s" % (r["engine"], r["workload"], r["batch"]))
    print("ok: %d results with --batch 100" % len(rows))


def check_threads(peers):
    """walrus alone, its clients threads only: fillsync and readrandom, every count."""
    rows = run_json([peers, "--engines", "walrus", "--workloads", "fillsync,readrandom",
                     "--num", str(NUM), "--sync-ops", str(SYNC_OPS), "--sync-procs", "1,8",
                     "--read-procs", "1,2", "--walrus-clients", "threads", "--json"])
    want = [("fillsync", 1), ("fillsync", 8), ("readrandom", 1), ("readrandom", 2)]
    got = [(r["workload"], r["procs"]) for r in rows]
    if got != want or any(r["engine"] != "walrus" or r["mode"] != "threads" for r in rows):
        fail("threads run: %s, expected %s in threads" % (rows, want))
    for r in rows:
        check_row(r, SYNC_OPS * r["procs"] if r["workload"] == "fillsync" else NUM)
    print("ok: %d results of walrus in threads" % len(rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--walrus", required=True)
    a = ap.parse_args()
    check_help(a.peers, a.walrus)
    check_threads(a.peers)
    check_batch(a.peers)
    check_runs(a.peers)


if __name__ == "__main__":
    main()
