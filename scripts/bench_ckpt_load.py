#!/usr/bin/env python3
"""Checkpoints under load: `walrus bench --workload updaterandom` on one
loaded database, once per configuration, each run long enough for one
spread checkpoint (checkpoint_timeout) to fall inside it, plus a run with
checkpoints pushed out of it. Prints a markdown table: throughput, p99 over
the whole run, p99 of the seconds with a checkpoint running against the
seconds without (from the per-second histograms of the same run), the
checkpoint's own figures, and WAL bytes per put. Each run's JSON line is
kept in DIR/results.jsonl (compare two with `walrus bench --compare`).

usage: bench_ckpt_load.py [--walrus PATH] [--dir DIR] [--num 400000]
           [--shared-buffers 128MB] [--duration 50] [--timeout 20s]
           [--clients 1] [--sync] [--configs base,nockpt,zstd,...] [--repeat 1]

The database is made once (fillseq of --num keys) and reused: the instance
stops after each run (supervisor_linger=0), so every run starts its own
instance with its configuration, and its first timed checkpoint comes
--timeout after that start.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

CONFIGS = {
    "base": ("spread checkpoint: sorted, flush_after=256kB, io_method=sync", []),
    "nockpt": ("no checkpoint in the run (checkpoint_timeout=1h)",
               ["checkpoint_timeout=1h", "max_wal_size=64GB"]),
    "unsorted": ("spread checkpoint, unsorted", ["checkpoint_sort=off"]),
    "noflush": ("spread checkpoint, no write-back hints (flush_after=0)",
                ["checkpoint_flush_after=0"]),
    "uring": ("spread checkpoint, io_method=io_uring", ["io_method=io_uring"]),
    "zstd": ("spread checkpoint, wal_compression=zstd", ["wal_compression=zstd"]),
}


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        sys.exit("failed (%d): %s\n%s" % (p.returncode, " ".join(cmd), p.stderr))
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default="build/tools/walrus")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--num", type=int, default=400000)
    ap.add_argument("--shared-buffers", default="128MB")
    ap.add_argument("--duration", type=float, default=50)
    ap.add_argument("--timeout", default="20s")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--configs", default="base,nockpt,unsorted,noflush,uring,zstd")
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    base = a.dir or tempfile.mkdtemp(prefix="walrus-ckpt-load-")
    os.makedirs(base, mode=0o700, exist_ok=True)
    db = os.path.join(base, "db")
    common = ["-o", "supervisor_linger=0", "-o", "shared_buffers=" + a.shared_buffers,
              "-o", "max_wal_size=8GB"]
    names = a.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            sys.exit("unknown configuration %r (%s)" % (n, ",".join(CONFIGS)))
    rows = []
    try:
        shutil.rmtree(db, ignore_errors=True)
        run([a.walrus, "-D", db] + common + ["bench", "--workload", "fillseq", "--num",
                                             str(a.num), "--json"])
        with open(os.path.join(base, "results.jsonl"), "w") as out:
            for rep in range(a.repeat):
                for n in names:
                    opts = ["checkpoint_timeout=" + a.timeout] + CONFIGS[n][1]
                    cmd = [a.walrus, "-D", db] + common
                    for o in opts:
                        cmd += ["-o", o]
                    cmd += ["bench", "--workload", "updaterandom", "--num", str(a.num),
                            "--duration", str(a.duration), "--clients", str(a.clients),
                            "--json"] + (["--sync"] if a.sync else [])
                    j = json.loads(run(cmd).stdout.strip().splitlines()[-1])
                    j["config"] = n
                    out.write(json.dumps(j) + "\n")
                    out.flush()
                    rows.append((n, j))
                    print("%s: %.0f ops/s, p99 %.1f us, %d checkpoint(s)" %
                          (n, j["ops_per_s"], j["p99_us"], len(j["checkpoints"])),
                          file=sys.stderr)
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    j0 = rows[0][1]
    page = j0.get("page_size", 8192)  # absent from the JSON of walrus before -Dpage_size
    print("updaterandom: %d keys (%d tree pages, %.0f MB) in shared_buffers=%s, %d client(s), "
          "%s puts, %.0f s per run, checkpoint_timeout=%s\n" %
          (a.num, j0["working_set_pages"], j0["working_set_pages"] * page / 1048576,
           a.shared_buffers, a.clients, "durable" if a.sync else "asynchronous", a.duration,
           a.timeout))
    print("| configuration | ops/s | p99 us | p99 us, seconds with a checkpoint | p99 us, "
          "seconds without | with/without | checkpoint write MB/s | sync s | WAL bytes/put |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, j in rows:
        ck = j["checkpoints"]
        wr = "%.1f" % (sum(c["write_MBps"] for c in ck) / len(ck)) if ck else "-"
        sy = "%.3f" % max(c["sync_s"] for c in ck) if ck else "-"
        pin, pout = j["in_checkpoint_p99_us"], j["no_checkpoint_p99_us"]
        ratio = "%.2f" % (pin / pout) if pin and pout else "-"
        print("| %s | %.0f | %.1f | %s | %s | %s | %s | %s | %.0f |" %
              (CONFIGS[n][0], j["ops_per_s"], j["p99_us"],
               "%.1f (%.0f s)" % (pin, j["in_checkpoint_s"]) if pin else "-",
               "%.1f (%.0f s)" % (pout, j["no_checkpoint_s"]) if pout else "-", ratio, wr, sy,
               j["wal_bytes_per_put"]))


if __name__ == "__main__":
    sys.exit(main())
