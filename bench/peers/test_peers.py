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

Issue 18's additions, each a test of its own (--check NAME):
- fillsync-seconds: fillsync with --sync-seconds 1 on every engine (walrus in
  threads and processes), 1 and 2 clients: each row runs at least the second
  and reports puts and latencies; walrus-peers itself checks the database
  afterwards (every key of the load still there with a value some client
  wrote, and with one client each key exactly its last put's).
- sizes: fillrandom on every engine with --keep and --compact: each row's
  total_bytes equals this script's own count of the allocated bytes under
  the engine's directory and exceeds the raw pairs' bytes; walrus's rows
  split it into base/ (data_bytes, above the raw bytes), wal/ and the rest,
  which add up, and walrus's alone carry "compacted": the sizes after
  walrus_compact (what the kept directory holds), base/ smaller than before.
- drop-caches: readrandom and scan with --drop-caches-file FILE on every
  engine: every row says drop_caches and FILE holds the 3 written to it;
  --drop-caches itself runs when /proc/sys/vm/drop_caches is writable
  (root) and is refused (exit 2, its message) when not; a file that cannot
  be opened for writing is refused before anything runs.
- txn: txn_transfer on every engine with transactions (walrus in threads and
  processes; SQLite and LMDB processes; RocksDB's optimistic and pessimistic
  transaction DBs, threads), 1 and 4 clients, asynchronous then durable
  commits, 50 transfers per client: walrus-peers checks after each row that
  the balances still add up (exit 2 otherwise); this script checks every
  row (commits, aborts, their rate, latencies), that plain rocksdb is
  skipped with its message, and --txn-seconds. Then --snapshot: walrus's
  readrandom and scan rows each twice, plain then through a snapshot, the
  peer's once. Then `walrus bench`: txn_transfer (asynchronous in threads,
  durable in processes on the accounts the first left), readrandom and scan
  with --snapshot, the JSON lines; the usage errors; and a database whose
  balances no longer add up refused with exit 2.
- large: the options of runs larger than memory on every engine: fillseq then
  readrandom, scanrange, writerandom, readwhilewriting and updaterandom with
  --reads, --writes, --scan-keys and --warm-pass sample (and LMDB with
  --lmdb-nordahead, named in the header line); every row with the
  operations asked for (readwhilewriting's the readers'), scanrange's keys
  and MB/s, writerandom's puts and batch, no untimed load after the fillseq
  row; walrus's tree verified after writerandom; then scanrange and
  writerandom alone: one untimed load per engine, announced; the defaults of
  --reads (N) and --scan-keys (N/10); readwhilewriting with --writer-rate,
  whose writer puts no more than the rate allows in its row; the usage
  errors; `walrus bench` refusing both workloads.
The bad values of --sync-seconds and the txn_transfer options are in the help
check.

usage: test_peers.py --peers PATH --walrus PATH [--check NAME]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

WORKLOADS = ["fillseq", "fillrandom", "fillsync", "readrandom", "scan", "readwhilewriting",
             "updaterandom", "txn_transfer"]
ENGINES = ["walrus", "sqlite", "lmdb", "rocksdb"]
NUM = 2000
PROCS = [1, 2]
RUN = ["readwhilewriting", "updaterandom", "updaterandom"]
SYNC_OPS = 20
MODES = {"walrus": ["threads", "processes"], "sqlite": ["processes"], "lmdb": ["processes"],
         "rocksdb": ["threads"], "rocksdb-otxn": ["threads"], "rocksdb-ptxn": ["threads"]}
TXN_ENGINES = ["walrus", "sqlite", "lmdb", "rocksdb-otxn", "rocksdb-ptxn"]
TXN_OPS = 50
TXN_PROCS = [1, 4]
MEMCG_ROOT = "/sys/fs/cgroup/memory"


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check_help(peers, walrus):
    for argv in ([peers, "--help"], [walrus, "bench", "--workload", "updaterandom", "--help"]):
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            fail("%s: exit %d: %s" % (" ".join(argv), p.returncode, p.stderr))
        for w in WORKLOADS + (["scanrange", "writerandom"] if argv[0] == peers else []):
            if ("  %s " % w) not in p.stdout:
                fail("%s does not describe workload %s:\n%s" % (" ".join(argv), w, p.stdout))
        opts = (["--walrus-clients", "--batch", "--cache-mb", "--sync-seconds",
                 "--drop-caches", "--drop-caches-file", "--txn-procs", "--txn-ops",
                 "--txn-seconds", "--txn-commit", "--snapshot", "rocksdb-otxn",
                 "rocksdb-ptxn", "--reads", "--writes", "--scan-keys",
                 "--warm-pass", "--lmdb-nordahead"] if argv[0] == peers
                else ["--threads", "--processes", "--batch", "--snapshot"])
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
                      (["--cache-mb", "1048577"], "bad value for --cache-mb"),
                      (["--sync-seconds", "0"], "bad value for --sync-seconds"),
                      (["--sync-seconds", "-1"], "bad value for --sync-seconds"),
                      (["--sync-seconds", "1.5"], "bad value for --sync-seconds"),
                      (["--sync-seconds", "86401"], "bad value for --sync-seconds"),
                      (["--sync-seconds"], "--sync-seconds needs a value"),
                      (["--txn-commit", "durable"], 'unknown commit "durable"'),
                      (["--txn-commit", "sync,sync"], "names a commit twice"),
                      (["--txn-ops", "0"], "bad value for --txn-ops"),
                      (["--txn-procs", "65"], "bad value for --txn-procs"),
                      (["--txn-seconds", "0"], "bad value for --txn-seconds"),
                      (["--engines", "rocksdb-txn"], 'unknown engine "rocksdb-txn"')):
        p = subprocess.run([peers] + args, capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or msg not in p.stderr:
            fail("%s: exit %d, %r" % (args, p.returncode, p.stderr[:200]))


def run_json(argv, stderr_has=None):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        fail("%s: exit %d" % (" ".join(argv), p.returncode))
    for want in [stderr_has] if isinstance(stderr_has, str) else stderr_has or []:
        if want not in p.stderr:
            fail("%s: stderr lacks %r" % (" ".join(argv), want))
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
    if any("drop_caches" in r for r in rows):
        fail("a row without --drop-caches says it dropped them: %s" % rows)
    print("ok: %d results, %s on %s" % (len(rows), ",".join(RUN), ",".join(ENGINES)))


def check_batch(peers):
    """The fills with --batch 100 on every engine: walrus-peers checks every key after
    each fill (exit 2 on a missing one), and walrus's tree with walrus_verify; the rows
    name their batch."""
    num = 2050
    rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads", "fillseq,fillrandom",
                     "--num", str(num), "--batch", "100", "--cache-mb", "64", "--json"],
                    stderr_has=["batch=100 cache-mb=64", "walrus: verify ok after fillseq",
                                "walrus: verify ok after fillrandom"])
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


def check_fillsync_seconds(peers):
    """fillsync by issue 18's definition: on a load of --num keys, each client upserts
    random keys durably for --sync-seconds."""
    rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads", "fillsync",
                     "--sync-seconds", "1", "--sync-procs", "1,2", "--num", str(NUM),
                     "--json"], stderr_has="sync-seconds=1")
    want = [(e, "fillsync", n, m) for e in ENGINES for n in (1, 2) for m in MODES[e]]
    got = [(r["engine"], r["workload"], r["procs"], r["mode"]) for r in rows]
    if got != want:
        fail("fillsync --sync-seconds: results %s, expected %s" % (got, want))
    for r in rows:
        what = "%s fillsync procs=%d %s" % (r["engine"], r["procs"], r["mode"])
        # Each client puts until a second has passed since its own start.
        if r["seconds"] < 1.0 or r["ops"] < r["procs"]:
            fail("%s: %d puts in %.3f s" % (what, r["ops"], r["seconds"]))
        if not r["p99_us"] >= r["p50_us"] > 0 or "writer_ops" in r:
            fail("%s: %s" % (what, r))
    print("ok: %d fillsync rows by seconds" % len(rows))


def allocated_bytes(top):
    total = 0
    for d, _, files in os.walk(top):
        for f in files:
            st = os.lstat(os.path.join(d, f))
            if (st.st_mode & 0o170000) == 0o100000:
                total += st.st_blocks * 512
    return total


def check_sizes(peers):
    """The on-disk bytes after fillrandom, against this script's own count."""
    num = 5000
    with tempfile.TemporaryDirectory(prefix="peers-sizes.") as tmp:
        base = os.path.join(tmp, "run")
        rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads", "fillrandom",
                         "--num", str(num), "--batch", "100", "--dir", base, "--keep",
                         "--compact", "--json"], stderr_has=" compacted in ")
        if [r["engine"] for r in rows] != ENGINES:
            fail("sizes: rows %s" % rows)
        for r in rows:
            e = r["engine"]
            if r.get("raw_bytes") != num * 116:
                fail("%s: raw_bytes %s, expected %d" % (e, r.get("raw_bytes"), num * 116))
            du = allocated_bytes(os.path.join(base, e))
            if (e == "walrus") != ("compacted" in r):
                fail("%s: compacted sizes %s" % (e, r.get("compacted")))
            if e == "walrus":  # the kept directory is the compacted one
                c = r["compacted"]
                if c.get("total_bytes") != du or c.get("seconds", -1) < 0 or \
                        c.get("data_bytes") != allocated_bytes(os.path.join(base, e, "base")) \
                        or not r["raw_bytes"] < c["data_bytes"] < r["data_bytes"]:
                    fail("walrus: compacted %s, the directory holds %d, before %s" % (c, du, r))
                du = r["total_bytes"]
            if r.get("total_bytes") != du or du <= r["raw_bytes"]:
                fail("%s: total_bytes %s, the directory holds %d, raw %d"
                     % (e, r.get("total_bytes"), du, r["raw_bytes"]))
            parts = ("data_bytes", "wal_bytes", "other_bytes")
            if e != "walrus":
                if any(p in r for p in parts):
                    fail("%s: walrus's parts in %s" % (e, r))
                continue
            if r["data_bytes"] + r["wal_bytes"] + r["other_bytes"] != r["total_bytes"]:
                fail("walrus: the parts do not add up: %s" % r)
            if r["wal_bytes"] != allocated_bytes(os.path.join(base, e, "wal")):
                fail("walrus: wal/ measured wrong: %s" % r)
            if r["data_bytes"] <= r["raw_bytes"] or r["wal_bytes"] <= 0:
                fail("walrus: data %d, wal %d, raw %d"
                     % (r["data_bytes"], r["wal_bytes"], r["raw_bytes"]))
    print("ok: sizes of %s" % ",".join(ENGINES))


def check_drop_caches(peers):
    """--drop-caches-file FILE on every engine's reads; the real file when writable,
    its refusal when not; an unwritable FILE refused."""
    with tempfile.TemporaryDirectory(prefix="peers-drop.") as tmp:
        f = os.path.join(tmp, "drop_caches")
        open(f, "w").close()
        rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads",
                         "readrandom,scan", "--num", str(NUM), "--read-procs", "1,2",
                         "--drop-caches-file", f, "--json"], stderr_has="drop-caches=" + f)
        want = ([(e, "readrandom", n) for n in PROCS for _ in MODES[e]] + [(e, "scan", 1)]
                for e in ENGINES)
        want = [x for w in want for x in w]
        got = [(r["engine"], r["workload"], r["procs"]) for r in rows]
        if got != want or not all(r.get("drop_caches") is True for r in rows):
            fail("drop caches: rows %s, expected %s, each with drop_caches" % (rows, want))
        with open(f) as fh:
            if fh.read() != "3\n":
                fail("drop caches: %s does not hold the 3 written to it" % f)
        for bad in (os.path.join(tmp, "missing", "x"), tmp):
            p = subprocess.run([peers, "--engines", "walrus", "--workloads", "readrandom",
                                "--num", str(NUM), "--drop-caches-file", bad],
                               capture_output=True, text=True, timeout=60)
            if p.returncode != 2 or "--drop-caches: cannot write" not in p.stderr:
                fail("%s: exit %d, %r" % (bad, p.returncode, p.stderr[:300]))
    argv = [peers, "--engines", "walrus", "--workloads", "readrandom", "--num", str(NUM),
            "--read-procs", "1", "--walrus-clients", "threads", "--drop-caches", "--json"]
    if os.access("/proc/sys/vm/drop_caches", os.W_OK):
        rows = run_json(argv)
        if len(rows) != 1 or rows[0].get("drop_caches") is not True:
            fail("--drop-caches: %s" % rows)
    else:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or "needs root" not in p.stderr:
            fail("--drop-caches as non-root: exit %d, %r" % (p.returncode, p.stderr[:300]))
    print("ok: --drop-caches")


def check_txn_row(r, ops):
    what = "%s txn_transfer procs=%d %s sync=%s" % (r["engine"], r["procs"], r["mode"],
                                                      r["sync"])
    if ops is not None and r["ops"] != ops:
        fail("%s: %d commits, expected %d" % (what, r["ops"], ops))
    if r["commits"] != r["ops"] or r["aborts"] < 0 or r["mb_per_s"] is not None:
        fail("%s: %s" % (what, r))
    tries = r["ops"] + r["aborts"]
    if abs(r["abort_rate"] - r["aborts"] / tries) > 1e-6:
        fail("%s: abort rate %s for %d aborts of %d" % (what, r["abort_rate"], r["aborts"],
                                                         tries))
    if not (r["seconds"] > 0 and r["ops_per_s"] > 0 and r["p99_us"] >= r["p50_us"] > 0):
        fail("%s: figures %s" % (what, r))
    # LMDB's writers take turns at one lock: nothing to conflict with.
    if r["engine"] == "lmdb" and r["aborts"] != 0:
        fail("%s: LMDB aborted %d transactions" % (what, r["aborts"]))


def wait_stopped(d, timeout_s=60):
    """walrus bench's instance exits supervisor_linger after the run: its
    directory may be removed only then."""
    for _ in range(timeout_s * 20):
        if not os.path.exists(os.path.join(d, "walrus.pid")):
            return
        time.sleep(0.05)
    fail("instance in %s still running after %d s" % (d, timeout_s))


def bench(walrus, db, args, rc=0):
    argv = [walrus, "-D", db, "-o", "supervisor_linger=0", "-o", "shared_buffers=16MB",
            "bench"] + args
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    sys.stderr.write(p.stderr)
    if p.returncode != rc:
        fail("%s: exit %d, expected %d" % (" ".join(argv), p.returncode, rc))
    wait_stopped(db)
    return p


def check_txn(peers, walrus):
    """txn_transfer on every engine, --snapshot rows, and walrus bench's."""
    engines = ["walrus", "sqlite", "lmdb", "rocksdb", "rocksdb-otxn", "rocksdb-ptxn"]
    p = subprocess.run([peers, "--engines", ",".join(engines), "--workloads", "txn_transfer",
                        "--num", str(NUM), "--txn-ops", str(TXN_OPS), "--txn-procs",
                        ",".join(map(str, TXN_PROCS)), "--json"],
                       capture_output=True, text=True, timeout=600)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        fail("txn_transfer: exit %d" % p.returncode)
    if "rocksdb: no transactions in this engine: txn_transfer skipped" not in p.stderr:
        fail("plain rocksdb was not skipped with its message")
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    want = [(e, n, m, s) for e in TXN_ENGINES for s in (False, True) for n in TXN_PROCS
            for m in MODES[e]]
    got = [(r["engine"], r["procs"], r["mode"], r["sync"]) for r in rows]
    if got != want or any(r["workload"] != "txn_transfer" for r in rows):
        fail("txn_transfer: rows %s, expected %s" % (got, want))
    for r in rows:
        check_txn_row(r, TXN_OPS * r["procs"])
    if p.stderr.count("walrus: verify ok after txn_transfer") != 8:
        fail("walrus's tree was not verified after each txn_transfer row")
    print("ok: %d txn_transfer rows" % len(rows))

    rows = run_json([peers, "--engines", "walrus", "--workloads", "txn_transfer",
                     "--txn-seconds", "1", "--txn-procs", "2", "--txn-commit", "sync",
                     "--walrus-clients", "threads", "--json"], stderr_has="txn-seconds=1")
    if len(rows) != 1 or rows[0]["seconds"] < 1.0 or not rows[0]["sync"]:
        fail("txn_transfer --txn-seconds 1: %s" % rows)
    check_txn_row(rows[0], None)

    rows = run_json([peers, "--engines", "walrus,lmdb", "--workloads", "readrandom,scan",
                     "--num", str(NUM), "--read-procs", "1,2", "--snapshot", "--json"],
                    stderr_has=" snapshot")
    want = [("walrus", "readrandom", n, m, s) for n in PROCS for m in MODES["walrus"]
            for s in (False, True)]
    want += [("walrus", "scan", 1, "processes", s) for s in (False, True)]
    want += [("lmdb", "readrandom", n, "processes", False) for n in PROCS]
    want += [("lmdb", "scan", 1, "processes", False)]
    got = [(r["engine"], r["workload"], r["procs"], r["mode"], r.get("snapshot", False))
           for r in rows]
    if got != want:
        fail("--snapshot: rows %s, expected %s" % (got, want))
    for r in rows:
        if r["workload"] == "readrandom":
            check_row(r, NUM)
        elif r["ops"] != NUM:
            fail("scan: %s" % r)
    print("ok: %d rows with --snapshot" % len(rows))

    with tempfile.TemporaryDirectory(prefix="peers-txn.") as tmp:
        db = os.path.join(tmp, "db")
        p = bench(walrus, db, ["--workload", "txn_transfer", "--num", str(TXN_OPS), "--json"])
        j = json.loads(p.stdout.strip().splitlines()[-1])
        if (j["workload"] != "txn_transfer" or j["clients"] != 8 or j["mode"] != "threads"
                or j["sync"] or j["num"] != 10000 or j["ops"] != 8 * TXN_OPS
                or j["commits"] != j["ops"] or "aborts" not in j or "snapshot" in j):
            fail("walrus bench txn_transfer: %s" % j)
        if "loading 10000 accounts" not in p.stderr or "aborts: " not in p.stderr:
            fail("walrus bench txn_transfer: stderr %r" % p.stderr[-600:])
        # The accounts the first run left, durable commits from processes.
        p = bench(walrus, db, ["--workload", "txn_transfer", "--num", str(TXN_OPS), "--clients",
                               "3", "--processes", "--sync", "--json"])
        j = json.loads(p.stdout.strip().splitlines()[-1])
        if not j["sync"] or j["clients"] != 3 or j["mode"] != "processes" \
                or j["ops"] != 3 * TXN_OPS or "loading" in p.stderr:
            fail("walrus bench txn_transfer --sync: %s" % j)
        # Account 0 one short: the warm pass's sum check refuses the database.
        put = subprocess.run([walrus, "-D", db, "-o", "supervisor_linger=0", "put",
                              "0000000000000000", "999"], capture_output=True, text=True,
                             timeout=60)
        wait_stopped(db)
        if put.returncode != 0:
            fail("walrus put: exit %d: %s" % (put.returncode, put.stderr))
        p = bench(walrus, db, ["--workload", "txn_transfer", "--num", "5"], rc=2)
        if "balances add up to" not in p.stderr:
            fail("a wrong sum: stderr %r" % p.stderr[-600:])
        db = os.path.join(tmp, "db2")
        for w in ("readrandom", "scan"):
            p = bench(walrus, db, ["--workload", w, "--num", str(NUM), "--snapshot", "--json"])
            j = json.loads(p.stdout.strip().splitlines()[-1])
            if j["workload"] != w or j.get("snapshot") is not True or j["ops"] != NUM:
                fail("walrus bench %s --snapshot: %s" % (w, j))
            if "reads through a snapshot" not in p.stderr:
                fail("walrus bench %s --snapshot: stderr %r" % (w, p.stderr[-600:]))
        for args, msg in ((["--workload", "fillseq", "--snapshot"], "--snapshot is for"),
                          (["--workload", "txn_transfer", "--value-size", "20"],
                           "decimal balances"),
                          (["--workload", "txn_transfer", "--batch", "2"], "no batches")):
            p = bench(walrus, os.path.join(tmp, "none"), args, rc=2)
            if msg not in p.stderr:
                fail("%s: stderr %r" % (args, p.stderr))
        shutil.rmtree(db)
    print("ok: walrus bench txn_transfer and --snapshot")


def run_pid(argv):
    """Runs walrus-peers; returns its exit code, stdout, stderr and pid (the
    cgroups it makes are named after the pid)."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as p:
        try:
            out, err = p.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            fail("%s: did not end in 600 s" % " ".join(argv))
    sys.stderr.write(err)
    return p.returncode, out, err, p.pid


def cgroups_left(pid):
    prefix = "walrus-peers-%d-" % pid
    return [d for d in os.listdir(MEMCG_ROOT) if d.startswith(prefix)]


def check_memory_limit(peers):
    """--memory-limit on every engine: each row carries the cgroup's figures,
    its most usage within the limit, walrus's supervisor inside the cgroup;
    the cgroups and the scratch directory are gone afterwards; a limit the
    engine cannot run in is a failed row per engine (killed by the OOM
    killer), not a hang; the usage errors."""
    for args, msg in ((["--memory-limit", "1XB"], "bad value for --memory-limit"),
                      (["--memory-limit", "0"], "bad value for --memory-limit"),
                      (["--memory-limit", "-5MB"], "bad value for --memory-limit"),
                      (["--memory-limit", "1MB"], "--memory-limit: at least 4MB"),
                      (["--memory-limit", "256MB", "--cache-mb", "256"],
                       "--cache-mb 256 does not fit in --memory-limit of 256 MiB")):
        p = subprocess.run([peers, "--engines", "lmdb", "--num", str(NUM)] + args,
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or msg not in p.stderr:
            fail("%s: exit %d, %r" % (args, p.returncode, p.stderr[:300]))
    root = os.geteuid() == 0
    if not root or not os.path.exists(os.path.join(MEMCG_ROOT, "memory.limit_in_bytes")):
        p = subprocess.run([peers, "--engines", "lmdb", "--num", str(NUM),
                            "--memory-limit", "256MB"], capture_output=True, text=True,
                           timeout=60)
        want = "needs root" if not root else "no memory controller"
        if p.returncode != 2 or want not in p.stderr:
            fail("--memory-limit without root or controller: exit %d, %r"
                 % (p.returncode, p.stderr[:300]))
        print("ok: --memory-limit refused here (%s); the cgroup runs need root and %s"
              % (want, MEMCG_ROOT))
        return
    with tempfile.TemporaryDirectory(prefix="peers-memcg.") as tmp:
        p = subprocess.run([peers, "--engines", "lmdb", "--num", str(NUM), "--memory-limit",
                            "256MB", "--memory-cgroup-root", os.path.join(tmp, "none")],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or "no memory controller of cgroup v1" not in p.stderr:
            fail("missing controller: exit %d, %r" % (p.returncode, p.stderr[:300]))
        scratch = os.path.join(tmp, "scratch")
        limit = 256 << 20
        rc, out, err, pid = run_pid(
            [peers, "--engines", ",".join(ENGINES), "--num", "20000", "--memory-limit",
             "256MB", "--workloads", "fillrandom,readrandom,scan,readwhilewriting",
             "--read-procs", "1", "--walrus-clients", "threads", "--dir", scratch, "--json"])
        if rc != 0:
            fail("--memory-limit run: exit %d" % rc)
        if "cache-mb=64 " not in err:
            fail("--memory-limit 256MB: the caches are not a quarter of it: %r" % err[:300])
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        want = [(e, w) for e in ENGINES
                for w in ("fillrandom", "readrandom", "scan", "readwhilewriting")]
        got = [(r["engine"], r["workload"]) for r in rows]
        if got != want:
            fail("--memory-limit rows %s, expected %s" % (got, want))
        for r in rows:
            if not (r.get("memory_limit_bytes") == limit
                    and 0 < r["memory_max_usage_bytes"] <= limit
                    and r["memory_failcnt"] >= 0 and r["memory_procs"] >= 1
                    and r["memory_rss_bytes"] > 0):
                fail("--memory-limit row without the cgroup's figures: %s" % r)
        # walrus_open forked the supervisor from the engine's process, inside
        # the cgroup: the read rows, taken while the instance is up, count it.
        for r in rows:
            if r["engine"] == "walrus" and r["workload"] != "fillrandom" \
                    and r["memory_procs"] < 2:
                fail("walrus's supervisor is not in the cgroup: %s" % r)
        if cgroups_left(pid) or os.path.exists(scratch):
            fail("--memory-limit left %s, %s" % (cgroups_left(pid), os.listdir(tmp)))
        # 4MB cannot hold fillrandom's order of 10^6 keys (8 MB): the OOM
        # killer ends each engine's process, a failed row each, exit 3.
        rc, out, err, pid = run_pid(
            [peers, "--engines", "lmdb,walrus", "--num", "1000000", "--memory-limit", "4MB",
             "--workloads", "fillrandom", "--dir", scratch, "--json"])
        rows = [json.loads(line) for line in out.splitlines() if line.strip()]
        if rc != 3 or [r["engine"] for r in rows] != ["lmdb", "walrus"]:
            fail("--memory-limit 4MB: exit %d, rows %s" % (rc, rows))
        for r in rows:
            if not (r.get("failed") is True and r["signal"] == 9
                    and r["memory_oom_kills"] >= 1 and r["memory_limit_bytes"] == 4 << 20):
                fail("--memory-limit 4MB: not an OOM kill: %s" % r)
        if "failed under --memory-limit: killed by signal 9" not in err:
            fail("--memory-limit 4MB: no human line for the failed row: %r" % err[:500])
        if cgroups_left(pid) or os.path.exists(scratch):
            fail("--memory-limit 4MB left %s, %s" % (cgroups_left(pid), os.listdir(tmp)))
    print("ok: --memory-limit")


def check_fio(peers):
    """scripts/bench_fio.py on a 64 MiB file, 1 s per job: the random reads at
    each depth and the sequential read, its file removed; --compare on a
    walrus-peers readrandom row and a scanrange row."""
    del peers
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                          "scripts", "bench_fio.py")
    if shutil.which("fio") is None:
        print("skipped: fio is not installed")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="peers-fio.") as tmp:
        p = subprocess.run([sys.executable, script, "--dir", tmp, "--size", "64MB",
                            "--runtime", "1", "--depths", "1,8,32", "--json"],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            fail("bench_fio.py: exit %d, %r" % (p.returncode, p.stderr[:500]))
        res = json.loads(p.stdout)
        if sorted(res["randread_8k"]) != ["1", "32", "8"] \
                or not all(v > 0 for v in res["randread_8k"].values()) \
                or not res["seqread_1m"]["mb_per_s"] > 0 or res["size_bytes"] != 64 << 20:
            fail("bench_fio.py: %s" % res)
        if os.listdir(tmp):
            fail("bench_fio.py left %s" % os.listdir(tmp))
        fio_json = os.path.join(tmp, "fio.json")
        rows_json = os.path.join(tmp, "rows.jsonl")
        with open(fio_json, "w") as f:
            f.write(p.stdout)
        with open(rows_json, "w") as f:
            f.write(json.dumps({"engine": "lmdb", "workload": "readrandom", "procs": 8,
                                "mode": "processes", "ops_per_s": 1000.0}) + "\n")
            f.write(json.dumps({"engine": "lmdb", "workload": "scanrange", "procs": 1,
                                "mode": "processes", "mb_per_s": 10.0}) + "\n")
        p = subprocess.run([sys.executable, script, "--compare", fio_json, rows_json,
                            "--json"], capture_output=True, text=True, timeout=60)
        got = [json.loads(line) for line in p.stdout.splitlines()]
        if p.returncode != 0 or len(got) != 2 \
                or abs(got[0]["fraction_of_fio"] - 1000.0 / res["randread_8k"]["8"]) > 1e-9 \
                or abs(got[1]["fraction_of_fio"] - 10.0 / res["seqread_1m"]["mb_per_s"]) > 1e-9:
            fail("bench_fio.py --compare: exit %d, %r" % (p.returncode, p.stdout))
        p = subprocess.run([sys.executable, script, "--dir", tmp, "--size", "0"],
                           capture_output=True, text=True, timeout=60)
        if p.returncode != 2 or "bad size" not in p.stderr:
            fail("bench_fio.py --size 0: exit %d, %r" % (p.returncode, p.stderr))
    print("ok: bench_fio.py")


def check_large(peers, walrus):
    """--reads, --writes, --scan-keys, --warm-pass sample, scanrange and writerandom."""
    num, reads, writes, keys = 3000, 700, 450, 333
    run = ["readrandom", "scanrange", "writerandom", "readwhilewriting", "updaterandom"]
    p = subprocess.run([peers, "--engines", ",".join(ENGINES), "--workloads",
                        ",".join(["fillseq"] + run), "--num", str(num), "--reads", str(reads),
                        "--writes", str(writes), "--scan-keys", str(keys), "--batch", "100",
                        "--read-procs", "1,2", "--walrus-clients", "threads", "--warm-pass",
                        "sample", "--json"], capture_output=True, text=True, timeout=600)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        fail("large run: exit %d" % p.returncode)
    for want in ("reads=%d writes=%d scan-keys=%d warm-pass=sample" % (reads, writes, keys),
                 "walrus: verify ok after writerandom"):
        if want not in p.stderr:
            fail("large run: stderr lacks %r" % want)
    # The fillseq row's load serves every later row of its engine.
    if "loading" in p.stderr:
        fail("large run: an untimed load after the fillseq row: %r" % p.stderr[-2000:])
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    # One client mode each (walrus's threads): a row per client count.
    want = [(e, w, n) for e in ENGINES for w in ["fillseq"] + run
            for n in ([1] if w in ("fillseq", "scanrange", "writerandom") else PROCS)]
    got = [(r["engine"], r["workload"], r["procs"]) for r in rows]
    if got != want:
        fail("large run: rows %s, expected %s" % (got, want))
    for r in rows:
        w = r["workload"]
        if w == "fillseq":
            check_row(r, num)
        elif w == "scanrange":
            if r["ops"] != keys or r["p50_us"] is not None or not r["mb_per_s"] > 0 \
                    or abs(r["mb_per_s"] - r["ops_per_s"] * 116 / 1048576.0) > 0.01:
                fail("scanrange: %s" % r)
        elif w == "writerandom":
            check_row(r, writes)
            if r["batch"] != (1 if r["engine"] == "rocksdb" else 100):
                fail("writerandom: batch %s" % r)
        else:
            check_row(r, reads)
    print("ok: %d rows with --reads, --writes, --scan-keys, --warm-pass sample" % len(rows))

    # Alone, each engine loads once (untimed, announced), and the defaults hold.
    rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads",
                     "scanrange,writerandom,readrandom", "--num", str(num), "--read-procs",
                     "1", "--walrus-clients", "threads", "--batch", "100", "--json"])
    got = [(r["engine"], r["workload"], r["ops"]) for r in rows]
    want = [(e, w, n) for e in ENGINES
            for w, n in (("scanrange", num // 10), ("writerandom", num), ("readrandom", num))]
    if got != want:
        fail("defaults: rows %s, expected %s" % (got, want))
    p = subprocess.run([peers, "--engines", ",".join(ENGINES), "--workloads",
                        "scanrange,writerandom", "--num", str(num), "--writes", "10",
                        "--scan-keys", str(num), "--batch", "100", "--lmdb-nordahead",
                        "--json"],
                       capture_output=True, text=True, timeout=600)
    sys.stderr.write(p.stderr)
    for e in ENGINES:
        line = "walrus-peers: %s: loading %d keys by fillseq, batch %d (untimed)" % (
            e, num, 1 if e == "rocksdb" else 100)
        if p.returncode != 0 or p.stderr.count(line) != 1:
            fail("%s: exit %d, not one %r" % (e, p.returncode, line))
    if "lmdb-nordahead" not in p.stderr.splitlines()[0]:
        fail("--lmdb-nordahead: not in the header: %r" % p.stderr.splitlines()[0])
    # The whole key space as the range: it starts at key 0.
    if [r["ops"] for r in map(json.loads, p.stdout.splitlines())] != [num, 10] * len(ENGINES):
        fail("--scan-keys N: %s" % p.stdout)
    print("ok: one untimed load per engine, the defaults of --reads and --scan-keys")

    # --writer-rate: the writer's put k (from 0) starts k / rate s after the
    # writer does, inside the row, so it put at most rate x seconds + 1.
    rate = 2000
    rows = run_json([peers, "--engines", ",".join(ENGINES), "--workloads", "readwhilewriting",
                     "--num", str(num), "--reads", "200000", "--read-procs", "1,2",
                     "--writer-rate", str(rate), "--json"],
                    stderr_has="writer-rate=%d" % rate)
    for r in rows:
        check_row(r, 200000)
        if r["writer_rate"] != rate or r["writer_ops"] > rate * (r["seconds"] + 1e-6) + 1:
            fail("--writer-rate %d: %d puts in %.6f s: %s" % (rate, r["writer_ops"],
                                                           r["seconds"], r))
    print("ok: --writer-rate %d holds the writer to it on every engine" % rate)

    for args, msg in ((["--reads", "0"], "bad value for --reads"),
                      (["--writes", "x"], "bad value for --writes"),
                      (["--scan-keys", "-1"], "bad value for --scan-keys"),
                      (["--scan-keys", "2001"], "--scan-keys is more than the --num keys"),
                      (["--writer-rate", "0"], "bad value for --writer-rate"),
                      (["--warm-pass", "none"], 'unknown warm pass "none"')):
        p = subprocess.run([peers, "--num", "2000"] + args, capture_output=True, text=True,
                           timeout=60)
        if p.returncode != 2 or msg not in p.stderr:
            fail("%s: exit %d, %r" % (args, p.returncode, p.stderr[:200]))
    with tempfile.TemporaryDirectory(prefix="peers-large.") as tmp:
        for w in ("scanrange", "writerandom"):
            p = bench(walrus, os.path.join(tmp, "db"), ["--workload", w], rc=2)
            if "%s is a workload of walrus-peers only" % w not in p.stderr:
                fail("walrus bench --workload %s: %r" % (w, p.stderr))
    print("ok: the usage errors; walrus bench refuses scanrange and writerandom")


CHECKS = {"fillsync-seconds": check_fillsync_seconds, "sizes": check_sizes,
          "drop-caches": check_drop_caches, "txn": check_txn,
          "memory-limit": check_memory_limit, "fio": check_fio, "large": check_large}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", required=True)
    ap.add_argument("--walrus", required=True)
    ap.add_argument("--check", choices=sorted(CHECKS))
    a = ap.parse_args()
    if a.check in ("txn", "large"):
        (check_txn if a.check == "txn" else check_large)(a.peers, a.walrus)
        return
    if a.check is not None:
        CHECKS[a.check](a.peers)
        return
    check_help(a.peers, a.walrus)
    check_threads(a.peers)
    check_batch(a.peers)
    check_runs(a.peers)


if __name__ == "__main__":
    main()
