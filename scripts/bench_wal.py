#!/usr/bin/env python3
"""Commit-path benchmark sweep: walrus bench --workload walcommit with 1..16
clients for each sync method, walwrite for bandwidth, and fio's 8 KiB
append + fdatasync on the same file system for reference.  Prints a
markdown report (the figures in docs/performance.md come from it).  The
clients are processes (--processes), as when those figures were taken;
`walrus bench` runs threads unless told so.

usage: bench_wal.py [--walrus build/tools/walrus] [--dir /var/tmp] [--duration 5]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

METHODS = [
    ("fdatasync", []),
    ("fsync", ["-o", "wal_sync_method=fsync"]),
    ("open_datasync", ["-o", "wal_sync_method=open_datasync"]),
    ("fdatasync + O_DIRECT", ["-o", "wal_direct_io=on"]),
    ("fdatasync, io_uring", ["-o", "io_method=io_uring"]),
]
CLIENTS = [1, 2, 4, 8, 16]


def run_bench(walrus, base, opts, args):
    d = tempfile.mkdtemp(prefix="walrus-bench-", dir=base)
    try:
        cmd = [walrus, "-D", d, "-o", "supervisor_linger=0", *opts, "bench", *args, "--json"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
        return json.loads(out.strip().splitlines()[-1])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def fio(base, duration):
    if not shutil.which("fio"):
        return None
    d = tempfile.mkdtemp(prefix="walrus-fio-", dir=base)
    try:
        out = subprocess.run(
            ["fio", "--name=walappend", "--rw=write", "--bs=8k", "--fdatasync=1",
             "--size=256m", f"--filename={d}/fio.dat", f"--runtime={duration}",
             "--time_based", "--ioengine=sync", "--output-format=json"],
            check=True, capture_output=True, text=True, timeout=600).stdout
        job = json.loads(out)["jobs"][0]["write"]
        return job["iops"], job["clat_ns"]["percentile"]["50.000000"] / 1000.0, \
            job["clat_ns"]["percentile"]["99.000000"] / 1000.0
    finally:
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default="build/tools/walrus")
    ap.add_argument("--dir", default="/var/tmp")
    ap.add_argument("--duration", type=float, default=5)
    a = ap.parse_args()
    dur = ["--duration", str(a.duration)]
    print("## WAL commit path\n")
    f = fio(a.dir, int(a.duration))
    if f:
        print(f"fio, 8 KiB append + fdatasync (1 job): **{f[0]:.0f} IOPS**, "
              f"p50 {f[1]:.0f} us, p99 {f[2]:.0f} us\n")
    print("Durable commits per second (100-byte records), by committing processes:\n")
    print("| sync method | " + " | ".join(f"{c} clients" for c in CLIENTS) +
          " | 8 vs 1 | p50/p99 us (1 client) |")
    print("|---|" + "---|" * (len(CLIENTS) + 2))
    for name, opts in METHODS:
        cells, r1, r8 = [], None, None
        for c in CLIENTS:
            r = run_bench(a.walrus, a.dir, opts,
                          ["--workload", "walcommit", "--clients", str(c), "--processes",
                           *dur])
            cells.append(f"{r['ops_per_s']:.0f}")
            if c == 1:
                r1 = r
            if c == 8:
                r8 = r
        ratio = r8["ops_per_s"] / r1["ops_per_s"] if r1["ops_per_s"] else 0
        print(f"| {name} | " + " | ".join(cells) +
              f" | {ratio:.1f}x | {r1['p50_us']}/{r1['p99_us']} |")
        sys.stdout.flush()
    print("\nWAL bandwidth, 1 MiB records each flushed (1 client):\n")
    print("| sync method | MB/s | p50 us |")
    print("|---|---|---|")
    for name, opts in METHODS:
        r = run_bench(a.walrus, a.dir, opts, ["--workload", "walwrite", *dur])
        print(f"| {name} | {r['MBps']:.0f} | {r['p50_us']} |")
    if f:
        print(f"\n1-client fdatasync commits vs fio: see the first table's first cell "
              f"against {f[0]:.0f} IOPS.")


if __name__ == "__main__":
    main()
