#!/usr/bin/env python3
"""data_direct_io=off against on, alternating, with `walrus bench`.

Each round runs, for each setting in turn (off then on, then on then off in
the next round, so that neither always goes first on a machine whose load
drifts), on a fresh data directory under --dir:

  fillrandom  --num N --batch B (default 100: a batch pins its leaves, at
              most a quarter of the pool) into a pool of --pool (a tree
              several times the pool once N is large enough)
  readrandom  --num N --duration S --reuse, --clients 1 and --clients 4,
              on that tree
  scan        --num N --duration S --reuse (whole scans repeated)
  fillsync    --clients 8 --duration S on a new directory (the default
              pool: durable puts, data files written by checkpoints only)

Every run's JSON summary goes to stdout with "direct" and "round" added;
a table of ops/s per workload and setting (the median over rounds, and
on/off) goes to stderr.  The directory must be on a real file system: tmpfs
keeps every page in memory whatever the setting (refused).

usage: bench_direct.py --walrus PATH --dir DIR [--num N] [--pool SIZE] [--batch B]
                       [--rounds R] [--duration S] [-o name=value ...]
"""
import argparse, json, os, shutil, statistics, subprocess, sys

WORKLOADS = ["fillrandom", "readrandom", "readrandom-4", "scan", "fillsync"]


def fs_type(path):
    r = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    return r.stdout.strip()


def bench(a, datadir, direct, workload, args, pool=True):
    opts = ["-o", f"data_direct_io={direct}"] + (["-o", f"shared_buffers={a.pool}"] if pool
                                                   else [])
    for o in a.o:
        opts += ["-o", o]
    argv = [a.walrus, "-D", datadir] + opts + ["bench", "--workload", workload] + args + ["--json"]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_direct: {' '.join(argv)}: exit {r.returncode}: {r.stderr[-600:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def stop(a, datadir):
    subprocess.run([a.walrus, "-D", datadir, "stop", "--wait"], capture_output=True)


def one_setting(a, rnd, direct):
    """The workloads for one setting: {name: summary}."""
    tree = os.path.join(a.dir, f"tree-{direct}")
    shutil.rmtree(tree, ignore_errors=True)
    num, dur = ["--num", str(a.num)], ["--duration", str(a.duration)]
    out = {"fillrandom": bench(a, tree, direct, "fillrandom", num + ["--batch", str(a.batch)])}
    out["readrandom"] = bench(a, tree, direct, "readrandom", num + dur + ["--reuse"])
    out["readrandom-4"] = bench(a, tree, direct, "readrandom",
                                num + dur + ["--reuse", "--clients", "4"])
    out["scan"] = bench(a, tree, direct, "scan", num + dur + ["--reuse"])
    stop(a, tree)
    shutil.rmtree(tree, ignore_errors=True)
    sync = os.path.join(a.dir, f"sync-{direct}")
    shutil.rmtree(sync, ignore_errors=True)
    out["fillsync"] = bench(a, sync, direct, "fillsync", dur + ["--clients", "8"], pool=False)
    stop(a, sync)
    shutil.rmtree(sync, ignore_errors=True)
    for name, s in out.items():
        s.pop("options", None)
        print(json.dumps(dict(s, bench=name, direct=direct, round=rnd)), flush=True)
        print(f"round {rnd} {direct:3s} {name:13s} {s['ops_per_s']:12.0f} ops/s "
              f"p50 {s['p50_us']} p99 {s['p99_us']} reads {s['reads']}", file=sys.stderr,
              flush=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walrus", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--num", type=int, default=1000000)
    ap.add_argument("--pool", default="32MB")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("-o", action="append", default=[], metavar="name=value")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    if fs_type(a.dir) in ("tmpfs", "ramfs"):
        sys.exit(f"bench_direct: {a.dir} is on {fs_type(a.dir)}: use a disk's file system")
    rates = {}
    for rnd in range(a.rounds):
        for direct in (["off", "on"] if rnd % 2 == 0 else ["on", "off"]):
            for name, s in one_setting(a, rnd, direct).items():
                rates.setdefault((name, direct), []).append(s["ops_per_s"])
    print(f"{'workload':13s} {'off ops/s':>12s} {'on ops/s':>12s} {'on/off':>7s}  (medians of "
          f"{a.rounds} rounds)", file=sys.stderr)
    for name in WORKLOADS:
        off, on = (statistics.median(rates[(name, d)]) for d in ("off", "on"))
        print(f"{name:13s} {off:12.0f} {on:12.0f} {on / off:7.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
