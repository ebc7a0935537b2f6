#!/usr/bin/env python3
"""tests/tools/test_bench_kv.py - `walrus bench`'s key-value workloads as a
benchmark of checkpoints: option errors, the final JSON line (read by a real
JSON parser), --progress lines, the --csv time series, the --plot SVG (parsed
as XML), and --compare on the fixtures beside this file (bench_a.json,
bench_b.json: ratios checked exactly).

Small runs only; no timing is asserted (the machine is shared). The one run
that needs checkpoints inside it gets them from WAL volume, not from the
clock: with 1 MB WAL segments and max_wal_size=4MB, a checkpoint is
requested about every 1.3 MB of WAL, and two seconds of updates write tens
of MB. Every data directory is a new temporary one, removed after its
instance has shut down (supervisor_linger=0), so nothing is left behind.

usage: test_bench_kv.py --walrus PATH
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchtest import check_keys, fail, last_json, wait_stopped, walrus_arg  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SVG_NS = "{http://www.w3.org/2000/svg}"

# What scripts and docs rely on in the JSON line.
RUN_KEYS = ["workload", "engine", "mode", "procs", "clients", "num", "key_size", "value_size",
            "sync", "batch", "seed", "duration_s", "ops", "seconds", "ops_per_s", "mb_per_s", "avg_us",
            "stddev_us", "p50_us", "p99_us", "p999_us", "max_us", "checkpoints",
            "checkpoint_running_at_end", "checkpoints_failed", "in_checkpoint_s",
            "no_checkpoint_s", "in_checkpoint_p99_us", "no_checkpoint_p99_us", "wal_bytes",
            "wal_records", "wal_fpi", "wal_fpi_bytes_raw", "wal_fpi_bytes_stored",
            "wal_bytes_per_put", "buffers_written_checkpoint", "nbuffers", "dirty_max",
            "working_set_pages", "rows", "datadir", "options"]
CKPT_KEYS = ["reason", "start_s", "buffers", "write_s", "sync_s", "total_s", "write_MBps",
             "files_synced", "longest_sync_s"]
CSV_COLUMNS = ["t_s", "secs", "ops", "ops_per_s", "lat_avg_us", "lat_stddev_us", "lat_p50_us",
               "lat_p99_us", "lat_max_us", "writer_ops_per_s", "checkpoint", "dirty_buffers",
               "dirty_pct", "wal_since_redo_MB", "wal_MBps"]
BASE_OPTS = ["-o", "supervisor_linger=0", "-o", "shared_buffers=2MB"]


class Scratch:
    """A temporary directory; DIR/db is the data directory. Removed at the end."""

    def __enter__(self):
        self.base = tempfile.mkdtemp(prefix="walrus-tbenchkv-")
        self.db = os.path.join(self.base, "db")
        return self

    def __exit__(self, *exc):
        wait_stopped(self.db, 30)
        shutil.rmtree(self.base, ignore_errors=True)
        return False


def run(walrus, db, opts, args, expect_rc=0, timeout=240):
    cmd = [walrus, "-D", db] + BASE_OPTS + opts + ["bench"] + args
    print("$ " + " ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=timeout)
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    if p.returncode != expect_rc:
        fail("exit status %d, expected %d:\n%s" % (p.returncode, expect_rc, p.stderr))
    return p


def test_usage_errors(walrus):
    """Bad option names and values: exit 2, a message naming the option, no directory made."""
    cases = [
        (["--workload", "updaterandom", "--bogus"], 'unknown option "--bogus"'),
        (["--workload", "updaterandom", "--num", "abc"], 'bad value for --num: "abc"'),
        (["--workload", "updaterandom", "--num", "0"], "bad value for --num"),
        (["--workload", "updaterandom", "--num", "-5"], "bad value for --num"),
        (["--workload", "updaterandom", "--clients", "0"], "bad value for --clients"),
        (["--workload", "updaterandom", "--clients", "65"], "bad value for --clients"),
        (["--workload", "updaterandom", "--duration", "x"], "bad value for --duration"),
        (["--workload", "updaterandom", "--duration", "-1"], "bad value for --duration"),
        (["--workload", "updaterandom", "--key-size", "3"], "bad value for --key-size"),
        (["--workload", "updaterandom", "--value-size", "8"], "bad value for --value-size"),
        (["--workload", "updaterandom", "--seed", "1x"], "bad value for --seed"),
        (["--workload", "updaterandom", "--progress", "0"], "bad value for --progress"),
        (["--workload", "fillseq", "--batch", "0"], 'bad value for --batch: "0"'),
        (["--workload", "fillseq", "--batch", "-3"], "bad value for --batch"),
        (["--workload", "fillseq", "--batch", "ten"], "bad value for --batch"),
        (["--workload", "fillseq", "--batch", "100001"], "bad value for --batch"),
        (["--workload", "readrandom", "--batch", "10"], "--batch is for fillseq, fillrandom"),
        (["--workload", "updaterandom", "--csv"], "--csv needs a value"),
        (["--workload", "updaterandom", "--plot", "--json"], "--plot needs a file name"),
        (["--workload", "scan", "--clients", "2"], "--clients is for"),
        (["--workload", "scan", "--processes"], "--threads and --processes are for"),
        (["--workload", "fillseq", "--threads"], "--threads and --processes are for"),
        (["--workload", "readrandom", "--threads", "--processes"], "exclude each other"),
        (["--workload", "readrandom", "--sync"], "--sync is for"),
        (["--workload", "fillseq", "--key-size", "4", "--num", "20000"], "do not fit"),
        (["--workload", "nosuchworkload"], 'unknown workload "nosuchworkload"'),
        (["--workload", "updaterandm"], "the workloads are walcommit, walwrite, bufhit, "
         "bufscan, checkpoint, fillseq, fillrandom, fillsync, readrandom, scan, "
         "readwhilewriting, updaterandom"),
        ([], "--workload is required: walcommit"),
        (["--workload"], "--workload needs a value"),
        (["--workload", "walcommit", "--progress", "1"],
         "--progress is an option of the key-value workloads"),
        (["--workload", "walcommit", "--sync"], "--sync is an option of the key-value workloads"),
        (["--workload", "walcommit", "--num", "-5"], 'bad value for --num: "-5"'),
        (["--workload", "walcommit", "--bogus", "1"], 'unknown option "--bogus"'),
        (["--compare", os.path.join(HERE, "bench_a.json")], "usage: walrus bench --compare"),
        (["--compare", os.path.join(HERE, "bench_a.json"), "/nonexistent/b.json"],
         'could not open "/nonexistent/b.json"'),
    ]
    with Scratch() as s:
        for args, msg in cases:
            p = run(walrus, s.db, [], args, expect_rc=2)
            if msg not in p.stderr:
                fail("%s: stderr lacks %r: %r" % (args, msg, p.stderr))
            if os.path.exists(s.db):
                fail("%s: a usage error created %s" % (args, s.db))
        # -o before `bench`: the engine's option names and values.
        for opts, msg in [(["-o", "nosuch=1"], 'unrecognized option "nosuch"'),
                          (["-o", "shared_buffers=abc"], 'invalid value for option '
                           '"shared_buffers"'),
                          (["-o", "shared_buffers"], "expected name=value")]:
            p = run(walrus, s.db, opts, ["--workload", "updaterandom", "--num", "10"],
                    expect_rc=2)
            if msg not in p.stderr:
                fail("%s: stderr lacks %r: %r" % (opts, msg, p.stderr))
            if os.path.exists(s.db):
                fail("%s: a usage error created %s" % (opts, s.db))
        bad = os.path.join(s.base, "bad.json")
        with open(bad, "w") as f:
            f.write('{"ops_per_s": 12, "x": [1, 2,]}\n')
        p = run(walrus, s.db, [], ["--compare", bad, os.path.join(HERE, "bench_b.json")],
                expect_rc=2)
        if "bad.json" not in p.stderr or "expected a value" not in p.stderr:
            fail("invalid JSON: %r" % p.stderr)


# What issue 7 asks `walrus bench --help` to show.
HELP_OPTIONS = ["--num", "--duration", "--clients", "--threads", "--processes", "--key-size",
                "--value-size", "--sync", "--batch",
                "--seed", "-o name=value", "--progress", "--json", "--csv", "--plot",
                "--compare"]
KV_WORKLOADS = ["fillseq", "fillrandom", "fillsync", "readrandom", "readwhilewriting",
                "updaterandom", "scan"]


def test_help(walrus):
    """`walrus bench --help` and `walrus bench --workload W --help` list every option."""
    for args in (["--help"], ["--workload", "updaterandom", "--help"], ["-h"]):
        cmd = [walrus, "bench"] + args
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=60)
        if p.returncode != 0:
            fail("%s: exit %d" % (cmd, p.returncode))
        missing = [o for o in HELP_OPTIONS if o not in p.stdout]
        missing += [w for w in KV_WORKLOADS if w not in p.stdout]
        if missing:
            fail("%s does not mention %s:\n%s" % (" ".join(cmd), missing, p.stdout))


def test_updaterandom(walrus):
    """A run with checkpoints inside it: JSON, progress lines, CSV, SVG."""
    with Scratch() as s:
        csv_path = os.path.join(s.base, "series.csv")
        svg_path = os.path.join(s.base, "plot.svg")
        # Checkpoints by WAL volume, written at once (completion target 0), so
        # that one completes inside the run even on a slow (ASan) build.
        opts = ["-o", "wal_segment_size=1MB", "-o", "max_wal_size=4MB", "-o", "min_wal_size=2MB",
                "-o", "checkpoint_completion_target=0"]
        p = run(walrus, s.db, opts,
                ["--workload", "updaterandom", "--num", "3000", "--duration", "3", "--progress",
                 "1", "--seed", "7", "--csv", csv_path, "--plot", svg_path, "--json"])
        j = last_json(p)
        check_keys(j, RUN_KEYS, "updaterandom")
        if j["workload"] != "updaterandom" or j["num"] != 3000 or j["seed"] != 7:
            fail("updaterandom: %s" % j)
        if j["duration_s"] != 3 or j["ops"] <= 0 or j["clients"] != 1 or j["sync"]:
            fail("updaterandom: %s" % j)
        if not j["p50_us"] <= j["p99_us"] <= j["p999_us"] <= j["max_us"]:
            fail("percentiles out of order: %s" % j)
        if j["options"]["max_wal_size"] != "4MB" or j["options"]["shared_buffers"] != "2MB":
            fail("effective options: %s" % j["options"])
        if not isinstance(j["checkpoints"], list) or not j["checkpoints"]:
            fail("no checkpoint recorded in a run writing %d WAL bytes: %s"
                 % (j["wal_bytes"], j))
        for c in j["checkpoints"]:
            check_keys(c, CKPT_KEYS, "checkpoint")
            if c["reason"] not in ("wal", "time", "requested", "immediate", "time/wal"):
                fail("checkpoint reason: %s" % c)
            if c["total_s"] + 1e-3 < c["write_s"] + c["sync_s"] or c["buffers"] < 0:
                fail("checkpoint figures: %s" % c)
        if j["wal_bytes"] <= 0 or j["wal_bytes_per_put"] <= 0:
            fail("WAL figures: %s" % j)
        # --progress 1 over 3 s: one line per complete second.
        lines = [l for l in p.stderr.splitlines() if l.startswith("progress: ")]
        if not lines or "ops/s" not in lines[0] or "checkpoint " not in lines[0] \
                or "dirty " not in lines[0] or "WAL since redo" not in lines[0]:
            fail("progress lines: %r" % lines)
        # the summary went to stderr with --json
        if "checkpoints during the run:" not in p.stderr:
            fail("no summary on stderr")

        with open(csv_path, newline="") as f:
            rows = list(csv.DictReader(f))
        with open(csv_path) as f:
            header = f.readline().strip().split(",")
        if header != CSV_COLUMNS:
            fail("CSV header %s" % header)
        if len(rows) != j["rows"] or not rows:
            fail("CSV has %d rows, JSON says %d" % (len(rows), j["rows"]))
        if sum(int(r["ops"]) for r in rows) <= 0:
            fail("CSV rows count no operation")
        for r in rows:
            float(r["ops_per_s"]), float(r["lat_p99_us"]), int(r["dirty_buffers"])

        root = ET.parse(svg_path).getroot()
        if root.tag != SVG_NS + "svg":
            fail("plot root is %s" % root.tag)
        lines = root.findall(".//" + SVG_NS + "polyline")
        if len(lines) < 3:
            fail("plot has %d polylines" % len(lines))
        texts = " ".join(t.text or "" for t in root.iter(SVG_NS + "text"))
        if "throughput" not in texts or "p99" not in texts:
            fail("plot titles: %s" % texts)
        shaded = [r for r in root.iter(SVG_NS + "rect") if r.get("fill-opacity")]
        if not shaded:
            fail("no checkpoint shaded in the plot")


def test_other_workloads(walrus):
    """fillseq, then readwhilewriting, scan and readrandom on its database."""
    with Scratch() as s:
        j = last_json(run(walrus, s.db, [], ["--workload", "fillseq", "--num", "2000",
                                             "--key-size", "20", "--value-size", "50",
                                             "--json"]))
        check_keys(j, RUN_KEYS, "fillseq")
        if j["ops"] != 2000 or j["key_size"] != 20 or j["value_size"] != 50 or j["batch"] != 1:
            fail("fillseq: %s" % j)
        j = last_json(run(walrus, s.db, [], ["--workload", "readwhilewriting", "--num", "2000",
                                             "--key-size", "20", "--value-size", "50",
                                             "--json"]))
        check_keys(j, RUN_KEYS + ["writer_ops", "writer_p99_us"], "readwhilewriting")
        if j["ops"] != 2000 or j["wal_bytes_per_put"] is None and j["writer_ops"] > 0:
            fail("readwhilewriting: %s" % j)
        csv_path = os.path.join(s.base, "scan.csv")
        j = last_json(run(walrus, s.db, [], ["--workload", "scan", "--num", "2000",
                                             "--key-size", "20", "--value-size", "50",
                                             "--csv", csv_path, "--json"]))
        if j["ops"] != 2000 or j["p99_us"] is not None or j["wal_bytes_per_put"] is not None:
            fail("scan: %s" % j)
        # The scan reports its keys in groups of 64: the 16 after the last
        # group (2000 = 31 x 64 + 16) count as well.
        with open(csv_path, newline="") as f:
            ops = sum(int(r["ops"]) for r in csv.DictReader(f))
        if ops != 2000:
            fail("scan: the CSV counts %d keys of 2000" % ops)
        # Updates on a database earlier updates rewrote (their rounds are read first),
        # by client threads (the default) and by client processes.
        for clients, mode in (("2", None), ("1", None), ("2", "processes"), ("2", "threads")):
            j = last_json(run(walrus, s.db, [], ["--workload", "updaterandom", "--num", "2000",
                                                 "--key-size", "20", "--value-size", "50",
                                                 "--clients", clients, "--json"]
                              + (["--" + mode] if mode else [])))
            if j["ops"] != 2000 or j["clients"] != int(clients) \
                    or j["mode"] != (mode or "threads"):
                fail("updaterandom on an updated database: %s" % j)
        # Without --json: the human summary on stdout, no JSON.
        for mode, words in (("threads", "2 client threads"), ("processes",
                                                              "2 client processes")):
            p = run(walrus, s.db, [], ["--workload", "readrandom", "--num", "2000", "--key-size",
                                       "20", "--value-size", "50", "--clients", "2",
                                       "--" + mode])
            if "readrandom: " + words not in p.stdout or "{" in p.stdout:
                fail("readrandom summary: %r" % p.stdout)
        # A different key size does not match the database: a wrong result, exit 2.
        run(walrus, s.db, [], ["--workload", "readrandom", "--num", "2000"], expect_rc=2)


def test_compare(walrus):
    a = os.path.join(HERE, "bench_a.json")
    b = os.path.join(HERE, "bench_b.json")
    with Scratch() as s:
        p = run(walrus, s.db, [], ["--compare", a, b, "--json"])
        j = json.loads(p.stdout)
        m = {x["name"]: x for x in j["metrics"]}
        expect = {"ops_per_s": 1.5, "p99_us": 0.75, "max_us": 2.0, "wal_bytes_per_put": 0.8,
                  "checkpoints (count)": 0.5, "checkpoints: mean write_MBps": 3.0,
                  "checkpoints: mean total_s": 1.7 / 4.95}
        for name, ratio in expect.items():
            if name not in m or m[name]["ratio"] is None or abs(m[name]["ratio"] - ratio) > 1e-5:
                fail("compare %s: %s, expected ratio %s" % (name, m.get(name), ratio))
        if m["ops_per_s"]["a"] != 50000 or m["ops_per_s"]["b"] != 75000:
            fail("compare values: %s" % m["ops_per_s"])
        # No ratio where A is 0, or for strings and booleans; B's extra member shows.
        for name in ("checkpoints_failed", "workload", "sync"):
            if m[name]["ratio"] is not None:
                fail("compare %s has a ratio: %s" % (name, m[name]))
        if m["writer_ops"]["a"] != "(none)":
            fail("compare writer_ops: %s" % m["writer_ops"])
        differ = {x["name"]: (x["a"], x["b"]) for x in j["options_differ"]}
        if differ != {"checkpoint_sort": ("true", "false"), "wal_compression": ("off", "zstd")}:
            fail("options that differ: %s" % differ)
        # The table: one line per metric, the ratio last.
        p = run(walrus, s.db, [], ["--compare", a, b])
        rows = {l.split()[0]: l.split() for l in p.stdout.splitlines() if l.strip()}
        if rows["ops_per_s"][-1] != "1.500" or rows["p99_us"][-1] != "0.750":
            fail("compare table: %r" % p.stdout)
        if "checkpoint_sort" not in p.stdout or "options that differ" not in p.stdout:
            fail("compare table options: %r" % p.stdout)
        # A run against itself: every ratio is 1.
        p = run(walrus, s.db, [], ["--compare", b, b, "--json"])
        for x in json.loads(p.stdout)["metrics"]:
            if x["ratio"] is not None and abs(x["ratio"] - 1) > 1e-9:
                fail("self-compare: %s" % x)


def test_batch(walrus):
    """fillseq and fillrandom with --batch 100: every key is there after the fill (the
    workload's own check, exit 2 otherwise), 2050 keys so that the last batch is a
    partial one, and the JSON names the batch."""
    for w in ("fillseq", "fillrandom"):
        with Scratch() as s:
            j = last_json(run(walrus, s.db, [], ["--workload", w, "--num", "2050", "--batch",
                                                 "100", "--json"]))
            check_keys(j, RUN_KEYS, w)
            if j["ops"] != 2050 or j["batch"] != 100 or j["workload"] != w:
                fail("%s --batch 100: %s" % (w, j))
            # Each run ends with walrus verify on the database it left.
            p = run(walrus, s.db, [], ["--workload", "readrandom", "--num", "2050"])
            if not p.stderr.rstrip().endswith("verify: ok"):
                fail("%s: no verify at the end of the run: %r" % (w, p.stderr[-300:]))


def main():
    walrus = walrus_arg()
    test_help(walrus)
    test_usage_errors(walrus)
    test_compare(walrus)
    test_other_workloads(walrus)
    test_batch(walrus)
    test_updaterandom(walrus)
    print("ok")


if __name__ == "__main__":
    main()
