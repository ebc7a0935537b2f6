#!/usr/bin/env python3
"""scripts/bench_threads.py - the measurements of walrus's client threads
(docs/performance.md, "Clients as threads"), with walrus-peers.

Three parts, each repeated --rounds times, the orders alternated from round to
round so that no mode or build always runs first (the machine is shared: only
ratios taken within one round, and their medians, are compared):

  sync    fillsync, 8 clients, --sync-ops durable puts each: walrus's 8 threads
          and 8 processes and RocksDB's 8 threads, in one walrus-peers run
  read    readrandom of --num keys with 1 and 2 clients, walrus in threads and
          in processes, in one walrus-peers run
  single  the single-client rows (fillseq, fillrandom, fillsync 1, readrandom 1,
          scan) of the new build (--new) and of the build before the thread
          work (--base), run A/B/A/B: the new build's fillsync and readrandom
          in threads and in processes, the base's in processes
  cpu     scripts/callcost.c compiled against each build (its libwalrus_core.a
          and include/, found from the walrus-peers paths: BUILD/bench/peers/
          walrus-peers, BUILD/../include), run A/B/A/B: --num asynchronous puts
          then --num random gets in one thread, wall and thread CPU time per
          call (CPU time leaves out the time other jobs held the CPUs)

Each walrus-peers run's JSON lines are appended to --out (one object per line,
with "part", "round" and "build" added); the summary printed at the end gives,
per figure, the median ops/s and the median of the per-round ratios.

usage: bench_threads.py --new PEERS [--base PEERS] [--parts sync,read,single,cpu]
                        [--rounds 3] [--num 1000000] [--sync-ops 2000]
                        [--dir DIR] [--out FILE.jsonl]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run(peers, args, tag, out):
    cmd = [peers, "--json"] + args
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=3600)
    sys.stderr.write(p.stderr)
    if p.returncode != 0:
        sys.exit("bench_threads: %s: exit %d" % (" ".join(cmd), p.returncode))
    rows = []
    for line in p.stdout.splitlines():
        if line.strip():
            r = json.loads(line)
            r.update(tag)
            rows.append(r)
    with open(out, "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


def rate(rows, engine, workload, procs, mode=None):
    for r in rows:
        if (r["engine"], r["workload"], r["procs"]) == (engine, workload, procs) and \
                (mode is None or r["mode"] == mode):
            return r["ops_per_s"]
    sys.exit("bench_threads: no row %s %s procs=%d %s" % (engine, workload, procs, mode))


def summary(name, values):
    med = statistics.median(values)
    print("  %-44s median %12.3f   [%s]" % (name, med, ", ".join("%.3f" % v for v in values)))
    return med


def part_sync(a, common):
    rates = {"walrus threads": [], "walrus processes": [], "rocksdb threads": []}
    ratio_tp, ratio_tr = [], []
    for i in range(a.rounds):
        modes = "threads,processes" if i % 2 == 0 else "processes,threads"
        engines = "walrus,rocksdb" if i % 2 == 0 else "rocksdb,walrus"
        rows = run(a.new, common + ["--engines", engines, "--workloads", "fillsync",
                                    "--sync-procs", "8", "--sync-ops", str(a.sync_ops),
                                    "--walrus-clients", modes],
                   {"part": "sync", "round": i, "build": "new"}, a.out)
        t = rate(rows, "walrus", "fillsync", 8, "threads")
        p = rate(rows, "walrus", "fillsync", 8, "processes")
        r = rate(rows, "rocksdb", "fillsync", 8)
        rates["walrus threads"].append(t)
        rates["walrus processes"].append(p)
        rates["rocksdb threads"].append(r)
        ratio_tp.append(t / p)
        ratio_tr.append(t / r)
    print("fillsync, 8 clients (ops/s):")
    for k, v in rates.items():
        summary(k, v)
    summary("walrus threads / walrus processes", ratio_tp)
    summary("walrus threads / rocksdb threads", ratio_tr)


def part_read(a, common):
    rates = {}
    ratios = {"threads": [], "processes": []}
    for i in range(a.rounds):
        procs = "1,2" if i % 2 == 0 else "2,1"
        modes = "threads,processes" if i % 2 == 0 else "processes,threads"
        rows = run(a.new, common + ["--engines", "walrus", "--workloads", "readrandom",
                                    "--num", str(a.num), "--read-procs", procs,
                                    "--walrus-clients", modes],
                   {"part": "read", "round": i, "build": "new"}, a.out)
        for m in ("threads", "processes"):
            one = rate(rows, "walrus", "readrandom", 1, m)
            two = rate(rows, "walrus", "readrandom", 2, m)
            rates.setdefault("%s, 1 client" % m, []).append(one)
            rates.setdefault("%s, 2 clients" % m, []).append(two)
            ratios[m].append(two / one)
    print("readrandom, %d keys (ops/s):" % a.num)
    for k, v in rates.items():
        summary(k, v)
    for m, v in ratios.items():
        summary("2 %s / 1" % m, v)


SINGLE = [("fillseq", 1, None), ("fillrandom", 1, None), ("fillsync", 1, "threads"),
          ("fillsync", 1, "processes"), ("readrandom", 1, "threads"),
          ("readrandom", 1, "processes"), ("scan", 1, None)]


def part_single(a, common):
    if not a.base:
        sys.exit("bench_threads: the single part needs --base")
    args = common + ["--engines", "walrus", "--num", str(a.num), "--sync-ops", str(a.sync_ops),
                     "--sync-procs", "1", "--read-procs", "1"]
    new_rates, base_rates, ratios = {}, {}, {}
    for i in range(a.rounds):
        order = ["base", "new"] if i % 2 == 0 else ["new", "base"]
        got = {}
        for b in order:
            if b == "new":
                got[b] = run(a.new, args + ["--walrus-clients", "threads,processes"],
                             {"part": "single", "round": i, "build": b}, a.out)
            else:
                got[b] = run(a.base, args, {"part": "single", "round": i, "build": b}, a.out)
        for w, n, m in SINGLE:
            name = w + (" " + m if m else "")
            nv = rate(got["new"], "walrus", w, n, m)
            bv = rate(got["base"], "walrus", w, n, "processes")
            new_rates.setdefault(name, []).append(nv)
            base_rates.setdefault(name, []).append(bv)
            ratios.setdefault(name, []).append(nv / bv)
    print("single client, %d keys (ops/s; base: fillsync and readrandom in processes):" % a.num)
    for name in new_rates:
        summary("base " + name.split(" ")[0] + (" (processes)" if " " in name else ""),
                base_rates[name])
        summary("new  " + name, new_rates[name])
        summary("new / base " + name, ratios[name])


def build_callcost(peers, out):
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(peers))))
    src = os.path.dirname(os.path.abspath(__file__))
    cmd = ["cc", "-O2", "-D_GNU_SOURCE", "-I", os.path.join(os.path.dirname(build), "include"),
           os.path.join(src, "callcost.c"), os.path.join(build, "libwalrus_core.a"),
           "-luring", "-lzstd", "-lcrypto", "-lm", "-lpthread", "-o", out]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def wait_stopped(d):
    """The supervisor removes walrus.pid when it exits, after its linger and
    shutdown checkpoint: the next run must not share the disk with it."""
    for _ in range(6000):
        if not os.path.exists(os.path.join(d, "walrus.pid")):
            return
        time.sleep(0.05)
    sys.exit("bench_threads: the instance in %s is still running" % d)


def part_cpu(a, common):
    if not a.base:
        sys.exit("bench_threads: the cpu part needs --base")
    tmp = tempfile.mkdtemp(prefix="bench-threads-", dir=a.dir)
    try:
        bins = {"new": os.path.join(tmp, "callcost-new"),
                "base": os.path.join(tmp, "callcost-base")}
        build_callcost(a.new, bins["new"])
        build_callcost(a.base, bins["base"])
        vals = {}
        for i in range(a.rounds):
            got = {}
            for b in (["base", "new"] if i % 2 == 0 else ["new", "base"]):
                d = os.path.join(tmp, "db-%s-%d" % (b, i))
                cmd = [bins[b], d, str(a.num)]
                print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
                p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=3600)
                if p.returncode != 0:
                    sys.exit("bench_threads: %s: exit %d" % (" ".join(cmd), p.returncode))
                got[b] = json.loads(p.stdout)
                got[b].update({"part": "cpu", "round": i, "build": b})
                with open(a.out, "a") as f:
                    f.write(json.dumps(got[b]) + "\n")
                wait_stopped(d)
                shutil.rmtree(d)
            for k in ("put_wall_ns", "put_cpu_ns", "get_wall_ns", "get_cpu_ns"):
                vals.setdefault("base " + k, []).append(got["base"][k])
                vals.setdefault("new  " + k, []).append(got["new"][k])
                vals.setdefault("new / base " + k, []).append(got["new"][k] / got["base"][k])
        print("one thread, %d asynchronous puts then %d random gets (ns per call):"
              % (a.num, a.num))
        for k, v in vals.items():
            summary(k, v)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", required=True, help="walrus-peers of the build measured")
    ap.add_argument("--base", help="walrus-peers of the build before the thread work")
    ap.add_argument("--parts", default="sync,read,single,cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num", type=int, default=1000000)
    ap.add_argument("--sync-ops", type=int, default=2000)
    ap.add_argument("--dir", help="scratch directory (default: walrus-peers's)")
    ap.add_argument("--out", default="bench_threads.jsonl")
    a = ap.parse_args()
    common = ["--dir", a.dir] if a.dir else []
    parts = {"sync": part_sync, "read": part_read, "single": part_single, "cpu": part_cpu}
    for p in a.parts.split(","):
        if p not in parts:
            sys.exit("bench_threads: unknown part %r" % p)
    for p in a.parts.split(","):
        parts[p](a, common)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
