#!/usr/bin/env python3
"""Checkpoint throughput matrix: `walrus bench --workload checkpoint` with
sorting on/off, write-back hints on/off and io_method sync/io_uring, next to
fio's sequential buffered write (blocks of walrus's page size, 8 KiB by
default; fsync at the end) of the same volume on the same file system, all in
one run.  Prints a markdown table.

usage: bench_ckpt.py [--walrus PATH] [--dir DIR] [--shared-buffers 256MB] [--rounds 3]
"""
import argparse, json, os, shutil, subprocess, sys, tempfile

def run_walrus(walrus, base, name, sb, rounds, opts):
    d = os.path.join(base, name)
    cmd = [walrus, "-D", d, "-o", f"shared_buffers={sb}", "-o", "supervisor_linger=0"]
    for o in opts:
        cmd += ["-o", o]
    cmd += ["bench", "--workload", "checkpoint", "--rounds", str(rounds), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = json.loads(out.strip().splitlines()[-1])
    shutil.rmtree(d, ignore_errors=True)
    return res

def run_fio_once(base, mb, bs):
    subprocess.run(["fio", "--name=seqwrite", f"--directory={base}", "--rw=write", f"--bs={bs}",
                    f"--size={mb}M", "--end_fsync=1", "--ioengine=psync"],
                   check=True, capture_output=True)

def run_fio(base, mb, bs):
    run_fio_once(base, mb, bs)  # lays the file out: the measured run overwrites, as a checkpoint does
    out = subprocess.run(["fio", "--name=seqwrite", f"--directory={base}", "--rw=write",
                          f"--bs={bs}", f"--size={mb}M", "--end_fsync=1", "--ioengine=psync",
                          "--output-format=json"], check=True, capture_output=True, text=True).stdout
    job = json.loads(out)["jobs"][0]
    secs = job["job_runtime"] / 1000.0  # includes the final fsync
    for f in os.listdir(base):
        if f.startswith("seqwrite"):
            os.unlink(os.path.join(base, f))
    return mb / secs if secs > 0 else 0.0

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default="build/tools/walrus")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--shared-buffers", default="256MB")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    base = a.dir or tempfile.mkdtemp(prefix="walrus-ckpt-bench-")
    rows = []
    try:
        configs = [("sorted, flush_after=256kB, sync", ["checkpoint_sort=on", "checkpoint_flush_after=256kB", "io_method=sync"]),
                   ("unsorted, flush_after=256kB, sync", ["checkpoint_sort=off", "checkpoint_flush_after=256kB", "io_method=sync"]),
                   ("sorted, no write-back hints, sync", ["checkpoint_sort=on", "checkpoint_flush_after=0", "io_method=sync"]),
                   ("unsorted, no write-back hints, sync", ["checkpoint_sort=off", "checkpoint_flush_after=0", "io_method=sync"]),
                   ("sorted, flush_after=256kB, io_uring", ["checkpoint_sort=on", "checkpoint_flush_after=256kB", "io_method=io_uring"]),
                   ("unsorted, flush_after=256kB, io_uring", ["checkpoint_sort=off", "checkpoint_flush_after=256kB", "io_method=io_uring"])]
        mb = None
        page = 8192
        for i, (name, opts) in enumerate(configs):
            r = run_walrus(a.walrus, base, f"c{i}", a.shared_buffers, a.rounds, opts)
            page = r.get("page_size", 8192)  # absent from the JSON of walrus before -Dpage_size
            mb = r["written"] * page / 1048576 / a.rounds
            rows.append((name, r))
        fio = run_fio(base, int(mb), page)
    finally:
        if a.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(f"pages per checkpoint: {rows[0][1]['pages']} ({mb:.0f} MB), {a.rounds} rounds each; "
          f"fio sequential buffered write + fsync of {mb:.0f} MB: {fio:.0f} MB/s\n")
    print("| configuration | write phase MB/s | sync s/ckpt | write+sync MB/s | vs fio |")
    print("|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['write_mb_s']:.0f} | {r['sync_s']/a.rounds:.3f} | "
              f"{r['total_mb_s']:.0f} | {100*r['total_mb_s']/fio:.0f}% |")

if __name__ == "__main__":
    sys.exit(main())
