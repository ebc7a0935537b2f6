#!/usr/bin/env python3
"""scripts/bench_fio.py - the file system's physical read limit, by fio, to set
walrus-peers' reads beside.

Run mode (the default): on a file of --size bytes in --dir (created by fio,
removed at the end on every path), fio reads 8 KiB blocks at random with
O_DIRECT at each queue depth of --depths (default 1,2,8,32: 1, 2 and 8 are
walrus-peers' readrandom client counts, 32 the device's deeper limit), then
reads the file sequentially with O_DIRECT in 1 MiB blocks at depth 8. Each
job runs --runtime seconds. Prints a table, or with --json one object:

  {"fio":"fio-3.33","dir":...,"size_bytes":...,"ioengine":"libaio","runtime_s":30,
   "randread_8k":{"1":IOPS,"2":IOPS,...},"seqread_1m":{"mb_per_s":...,"reads_per_s":...}}

Compare mode (--compare FIO.json PEERS.jsonl): walrus-peers' JSON rows (its
--json output) beside that object: each readrandom and readwhilewriting row's
gets per second as a fraction of fio's random reads per second at the same
number of reads in flight (its client count; no figure when fio did not run
that depth), and each scan and scanrange row's MB/s as a fraction of fio's
sequential MB/s.
A get served from an engine's cache or the page cache costs no read, so a
fraction above 1 says the data set (or the part read) fitted in memory.

usage: bench_fio.py --dir DIR [--size 4GB] [--runtime 30] [--depths 1,2,8,32]
                    [--ioengine libaio|io_uring] [--json]
       bench_fio.py --compare FIO.json PEERS.jsonl [--json]
exit: 0 ok, 2 usage error, 3 fio failed
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

UNITS = {"": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
RANDOM_BS = 8192
SEQ_BS = 1 << 20
SEQ_DEPTH = 8


def usage_error(msg):
    sys.stderr.write("bench_fio.py: %s\n" % msg)
    sys.exit(2)


def parse_size(s):
    m = re.fullmatch(r"(\d+)\s*([kKmMgGtT][bB]|)", s)
    if not m or int(m.group(1)) == 0:
        usage_error("bad size %r (1GB, 512MB, ...)" % s)
    return int(m.group(1)) * UNITS[m.group(2).lower()]


def parse_depths(s):
    try:
        depths = [int(x) for x in s.split(",")]
    except ValueError:
        usage_error("bad --depths %r" % s)
    if not depths or any(d < 1 or d > 1024 for d in depths):
        usage_error("bad --depths %r (1..1024 each)" % s)
    return depths


def fio_job(path, size, runtime, ioengine, rw, bs, depth):
    """One fio job; returns its read side (iops, bytes per second)."""
    argv = ["fio", "--name=walrus-fio", "--filename=" + path, "--size=%d" % size,
            "--direct=1", "--rw=" + rw, "--bs=%d" % bs, "--iodepth=%d" % depth,
            "--ioengine=" + ioengine, "--runtime=%d" % runtime, "--time_based",
            "--randrepeat=0", "--norandommap", "--output-format=json"]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write("bench_fio.py: fio %s depth %d failed (exit %d): %s\n"
                         % (rw, depth, p.returncode, p.stderr.strip()[:2000]))
        sys.exit(3)
    try:
        out = json.loads(p.stdout[p.stdout.index("{"):])
        read = out["jobs"][0]["read"]
        return out.get("fio version", "fio"), float(read["iops"]), float(read["bw_bytes"])
    except (ValueError, KeyError, IndexError) as e:
        sys.stderr.write("bench_fio.py: fio's output unreadable (%s): %r\n"
                         % (e, p.stdout[:500]))
        sys.exit(3)


def run(args):
    if shutil.which("fio") is None:
        usage_error("fio is not installed (apt-get install fio)")
    if not os.path.isdir(args.dir):
        usage_error("--dir %r is not a directory" % args.dir)
    size = parse_size(args.size)
    depths = parse_depths(args.depths)
    path = os.path.join(args.dir, "walrus-fio.%d.dat" % os.getpid())
    res = {"dir": args.dir, "size_bytes": size, "ioengine": args.ioengine,
           "runtime_s": args.runtime, "randread_8k": {}}
    try:
        for d in depths:
            version, iops, _ = fio_job(path, size, args.runtime, args.ioengine, "randread",
                                       RANDOM_BS, d)
            res["fio"] = version
            res["randread_8k"][str(d)] = round(iops, 1)
        _, iops, bw = fio_job(path, size, args.runtime, args.ioengine, "read", SEQ_BS,
                              SEQ_DEPTH)
        res["seqread_1m"] = {"mb_per_s": round(bw / 1048576.0, 1),
                             "reads_per_s": round(iops, 1), "iodepth": SEQ_DEPTH}
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    if args.json:
        print(json.dumps(res))
        return
    print("%s on %s, file %.1f MiB, %s, %d s per job" % (res["fio"], args.dir,
                                                         size / 1048576.0, args.ioengine,
                                                         args.runtime))
    for d in depths:
        print("randread 8KiB O_DIRECT  iodepth %-3d %12.0f reads/s" % (d, res["randread_8k"][str(d)]))
    s = res["seqread_1m"]
    print("read 1MiB O_DIRECT      iodepth %-3d %12.1f MB/s (%.0f reads/s)"
          % (SEQ_DEPTH, s["mb_per_s"], s["reads_per_s"]))


def compare(args):
    fio_path, peers_path = args.compare
    try:
        with open(fio_path) as f:
            fio = json.load(f)
        with open(peers_path) as f:
            rows = [json.loads(line) for line in f if line.strip().startswith("{")]
    except (OSError, ValueError) as e:
        usage_error("--compare: %s" % e)
    for r in rows:
        w = r.get("workload")
        if w in ("readrandom", "readwhilewriting"):
            ref = fio["randread_8k"].get(str(r["procs"]))
            what, got = "reads/s", r["ops_per_s"]
        elif w in ("scan", "scanrange"):
            ref = fio["seqread_1m"]["mb_per_s"]
            what, got = "MB/s", r["mb_per_s"]
        else:
            continue
        frac = got / ref if ref else None
        if args.json:
            print(json.dumps({"engine": r["engine"], "workload": w, "procs": r["procs"],
                              "mode": r.get("mode"), "unit": what, "engine_rate": got,
                              "fio_rate": ref, "fraction_of_fio": frac}))
        else:
            print("%-12s %-16s procs=%-2d %-9s %12.1f %-7s fio %12s  %s"
                  % (r["engine"], w, r["procs"], r.get("mode", ""), got, what,
                     "%.1f" % ref if ref else "-",
                     "x%.3f of fio" % frac if frac is not None else "(fio did not run it)"))


def main():
    ap = argparse.ArgumentParser(description="fio's random and sequential O_DIRECT reads")
    ap.add_argument("--dir")
    ap.add_argument("--size", default="4GB")
    ap.add_argument("--runtime", type=int, default=30)
    ap.add_argument("--depths", default="1,2,8,32")
    ap.add_argument("--ioengine", default="libaio", choices=["libaio", "io_uring"])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--compare", nargs=2, metavar=("FIO.json", "PEERS.jsonl"))
    args = ap.parse_args()
    if args.compare:
        compare(args)
    elif args.dir is None:
        usage_error("--dir DIR (or --compare FIO.json PEERS.jsonl) is required")
    elif args.runtime < 1:
        usage_error("--runtime must be at least 1")
    else:
        run(args)


if __name__ == "__main__":
    main()
