#!/usr/bin/env python3
"""Base backup benchmark (docs/performance.md, "Base backup"): in one run,
  1. throughput: `walrus backup` of an idle running instance against
     `cp -r` + `sync` of the same directory stopped (MB/s of each, ratio;
     both from a warm page cache: this script never drops caches);
  2. foreground cost: the p99 latency of a durable load (walrus bench
     updaterandom --sync) without a backup, and with backups running back
     to back for the whole measurement (ratio).
Not a test: numbers depend on the machine.  Leaves nothing behind.

usage: scripts/bench_backup.py [--walrus build/tools/walrus] [--size-mb 128]
                               [--duration 10] [--clients 4] [--dir /var/tmp]"""
import argparse, json, os, shutil, subprocess, sys, tempfile, threading, time


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return r.stdout


def du(path):
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return total


def bench(w, data, num, secs, clients, csv=None):
    """A durable load (updaterandom --sync): its JSON summary."""
    cmd = [w, "-D", data, "bench", "--workload", "updaterandom", "--reuse", "--sync",
           "--value-size", "1000", "--num", str(num), "--duration", str(secs),
           "--clients", str(clients), "--json"] + (["--csv", csv] if csv else [])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(p):
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit(f"bench: exit {p.returncode}: {err.strip()[-500:]}")
    return json.loads(out.strip().splitlines()[-1])


def rows_p99(csv, lo, hi):
    """The worst per-second p99 among the rows of @csv overlapping [lo, hi] (s)."""
    worst = 0.0
    with open(csv) as f:
        head = f.readline().strip().split(",")
        for line in f:
            r = dict(zip(head, line.strip().split(",")))
            t, secs = float(r["t_s"]), float(r["secs"])
            if t > lo and t - secs < hi:
                worst = max(worst, float(r["lat_p99_us"]))
    return worst


def one_backup(w, data, root, num, a, mode):
    """One backup during a durable load (which runs long enough to cover a
    spread checkpoint): its seconds, the worst per-second p99 of the rows it
    overlaps and the second after it (when the pages its checkpoint cleaned
    are logged whole again), and the run's summary."""
    csv = os.path.join(root, f"during-{mode}.csv")
    t0 = time.monotonic()
    p = bench(w, data, num, max(a.duration, 30), a.clients, csv)
    time.sleep(3)
    b0 = time.monotonic() - t0
    dest = os.path.join(root, f"one-{mode}")
    run([w, "-D", data, "backup", "--checkpoint", mode, dest])
    b1 = time.monotonic() - t0
    j = result(p)
    shutil.rmtree(dest)
    return b1 - b0, rows_p99(csv, b0, b1 + 1.0), j


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--walrus", default="build/tools/walrus")
    ap.add_argument("--size-mb", type=int, default=128)
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    w = os.path.abspath(a.walrus)
    root = tempfile.mkdtemp(prefix="walrus-bench-backup-", dir=a.dir)
    data = os.path.join(root, "data")
    try:
        num = a.size_mb * 1024 * 1024 // 1100
        run([w, "-D", data, "-o", "create_if_missing=on", "bench", "--workload", "fillrandom",
             "--num", str(num), "--value-size", "1000"])
        run([w, "-D", data, "stop", "--wait"])
        size = du(data)
        t0 = time.monotonic()
        run(["cp", "-r", data, os.path.join(root, "cp")])
        run(["sync"])
        cp_s = time.monotonic() - t0
        shutil.rmtree(os.path.join(root, "cp"))
        # an instance that stays up across the commands below
        # checkpoint_timeout 20 s: a spread checkpoint takes at most 18 s
        serve = subprocess.Popen([w, "-D", data, "-o", "checkpoint_timeout=20s", "serve"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        try:
            while subprocess.run([w, "-D", data, "status"],
                                 capture_output=True).returncode != 0:
                time.sleep(0.1)
            t0 = time.monotonic()
            run([w, "-D", data, "backup", "--checkpoint", "fast", os.path.join(root, "b0")])
            bk_s = time.monotonic() - t0
            bk_size = du(os.path.join(root, "b0"))
            shutil.rmtree(os.path.join(root, "b0"))
            base = result(bench(w, data, num, a.duration, a.clients))
            one = {m: one_backup(w, data, root, num, a, m) for m in ("spread", "fast")}
            # worst case: backups back to back for the whole run
            stop = threading.Event()
            count = [0]

            def backups():
                while not stop.is_set():
                    dest = os.path.join(root, f"c{count[0]}")
                    run([w, "-D", data, "backup", "--checkpoint", "fast", dest])
                    shutil.rmtree(dest)
                    count[0] += 1
            t = threading.Thread(target=backups)
            t.start()
            try:
                loop = result(bench(w, data, num, a.duration, a.clients))
            finally:
                stop.set()
                t.join()
        finally:
            subprocess.run([w, "-D", data, "stop", "--wait"], capture_output=True)
            serve.wait(60)
        cp_mbs = size / 1048576 / cp_s
        bk_mbs = bk_size / 1048576 / bk_s
        p0 = base["p99_us"]
        print(f"data directory: {size / 1048576:.0f} MiB; backup: {bk_size / 1048576:.0f} MiB")
        print(f"cp -r + sync (stopped):  {cp_s:6.2f} s  {cp_mbs:7.1f} MiB/s")
        print(f"walrus backup (running): {bk_s:6.2f} s  {bk_mbs:7.1f} MiB/s  "
              f"ratio {bk_mbs / cp_mbs:.2f} (target >= 0.80)")
        print(f"durable load, {a.clients} clients: p99 {p0:.0f} us, {base['ops_per_s']:.0f} ops/s "
              f"without a backup")
        for m, (secs, worst, j) in one.items():
            print(f"  one backup, {m} checkpoint ({secs:.2f} s): worst per-second p99 from its "
                  f"start to 1 s after it {worst:.0f} us, ratio {worst / p0:.2f} (target <= 2); "
                  f"whole run p99 {j['p99_us']:.0f} us")
        print(f"  backups back to back ({count[0]}): p99 {loop['p99_us']:.0f} us, "
              f"{loop['ops_per_s']:.0f} ops/s, ratio {loop['p99_us'] / p0:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
